"""Copy an S3 prefix to a directory with the AWS CRT S3 client, the way boto3 / the aws cli v2 use it.

Run by bench/stage.py in the bench-only venv that bench/setup_s3tools.sh builds (awscrt is kept out of
shardprep's own environment). Two ways of driving the CRT, both listing the prefix once with botocore
(as ``aws s3 cp --recursive`` does) and then downloading every object into DEST/<key below the prefix>:

- ``--mode s3transfer``: ``s3transfer.crt.CRTTransferManager``, the code path of the aws cli v2 and of
  boto3's ``preferred_transfer_client="crt"`` (boto3 itself only builds it for https endpoints on AWS, so
  the client is assembled here as the aws cli v2 does: ``create_s3_crt_client`` + the botocore request
  serializer with ``endpoint_url``). Every GET is first serialized by botocore (its per-call machinery,
  ~1-2 ms CPU per object), then signed, split into ranges, sent and written to a temporary file by the
  CRT in C, renamed when done. ``S3ChecksumConfig(validate_response=True)``: a full-object checksum the
  server returns is validated; ETags/MD5 never are.
- ``--mode direct``: ``awscrt.s3.S3Client.make_request`` with a hand-built GET per object (no botocore
  per object), the cheapest way to drive the CRT and so the fairest stand-in for "the CRT underneath
  shardprep's planning and verification". Same temporary-file + rename and checksum settings.

Neither mode fsyncs. Prints one JSON line: objects, bytes, seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlparse


def list_objects(endpoint: str, bucket: str, prefix: str) -> list[tuple[str, int]]:
    import botocore.session

    client = botocore.session.get_session().create_client("s3", endpoint_url=endpoint)
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    return found


def crt_client(args: argparse.Namespace, *, region: str):
    """The CRT client as ``s3transfer.crt.create_s3_crt_client`` builds it, with an explicit throughput
    target (so no platform lookup) and plain HTTP for the local server."""
    from awscrt.auth import AwsCredentialsProvider
    from s3transfer.crt import create_s3_crt_client

    creds = AwsCredentialsProvider.new_static(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    return create_s3_crt_client(region, crt_credentials_provider=creds, target_throughput=args.throughput_gbps * 125e6,
                                part_size=args.part_size, use_ssl=urlparse(args.endpoint_url).scheme == "https")


def via_s3transfer(args: argparse.Namespace, bucket: str, jobs: list[tuple[str, Path]], region: str) -> None:
    import botocore.session
    from s3transfer.crt import BotocoreCRTRequestSerializer, CRTTransferManager
    from s3transfer.manager import TransferConfig

    serializer = BotocoreCRTRequestSerializer(botocore.session.get_session(),
                                              {"region_name": region, "endpoint_url": args.endpoint_url})
    config = TransferConfig(max_request_concurrency=args.concurrency, multipart_chunksize=args.part_size)
    with CRTTransferManager(crt_client(args, region=region), serializer, config=config) as manager:
        futures = [manager.download(bucket, key, str(path)) for key, path in jobs]
        for fut in futures:
            fut.result()


def via_direct(args: argparse.Namespace, bucket: str, jobs: list[tuple[str, Path]], region: str) -> None:
    from awscrt.http import HttpHeaders, HttpRequest
    from awscrt.s3 import S3ChecksumConfig, S3RequestType

    client = crt_client(args, region=region)
    host = urlparse(args.endpoint_url).netloc
    in_flight = threading.Semaphore(128)      # as CRTTransferManager: at most 128 meta requests queued
    errors: list[str] = []
    pending: list = []        # keeps the request objects alive until they finish
    done = threading.Event()
    left = [len(jobs)]
    lock = threading.Lock()

    def finished(tmp: str, final: Path, key: str):
        def on_done(error=None, **_):
            if error is None:
                os.replace(tmp, final)
            else:
                errors.append(f"{key}: {error}")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            in_flight.release()
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()
        return on_done

    for key, path in jobs:
        in_flight.acquire()
        tmp = str(path) + ".crt.tmp"
        request = HttpRequest("GET", f"/{bucket}/{quote(key)}", HttpHeaders([("Host", host)]))
        pending.append(client.make_request(type=S3RequestType.GET_OBJECT, request=request, recv_filepath=tmp,
                                           checksum_config=S3ChecksumConfig(validate_response=args.validate),
                                           max_active_connections_override=args.concurrency,
                                           on_done=finished(tmp, path, key)))
    if jobs:
        done.wait()
    if errors:
        raise SystemExit(f"{len(errors)} download(s) failed, first: {errors[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="s3://BUCKET/PREFIX/")
    ap.add_argument("dest", type=Path)
    ap.add_argument("--endpoint-url", required=True)
    ap.add_argument("--mode", choices=["s3transfer", "direct"], default="s3transfer")
    ap.add_argument("--concurrency", type=int, default=32, help="max active connections per object")
    ap.add_argument("--part-size", type=int, default=16 << 20, help="bytes per ranged GET")
    ap.add_argument("--throughput-gbps", type=float, default=10.0,
                    help="CRT throughput target (its default when the platform is unknown; sets the connection pool)")
    ap.add_argument("--no-validate", dest="validate", action="store_false",
                    help="direct mode: do not ask the CRT to validate response checksums (it then sends no HEAD)")
    args = ap.parse_args()
    started = time.perf_counter()
    loc = urlparse(args.source)
    bucket, prefix = loc.netloc, loc.path.lstrip("/")
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    listing = list_objects(args.endpoint_url, bucket, prefix)
    jobs = []
    for key, _size in listing:
        path = args.dest / key[len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        jobs.append((key, path))
    (via_s3transfer if args.mode == "s3transfer" else via_direct)(args, bucket, jobs, region)
    print(json.dumps({"objects": len(jobs), "bytes": sum(s for _, s in listing),
                      "seconds": round(time.perf_counter() - started, 3)}))


if __name__ == "__main__":
    main()
