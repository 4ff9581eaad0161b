"""Staging throughput: ``shardprep stage`` side by side with ``aws s3 cp --recursive``.

Both CLIs copy the same prefixes from the same local S3 server (moto, started here as its own process on
127.0.0.1) into fresh directories; wall-clock time includes each CLI's start-up, as a user sees it.  Two
cases: many small objects (per-request overhead dominates) and a few large ones (multipart, bandwidth
dominates).  Prints a markdown table with the speed ratio (shardprep / aws); the target is >= 1.5x on
small objects and not slower on large ones.

    python bench/stage.py --quick          # 100 small + 2 x 16 MiB, one repetition (about a minute)
    python bench/stage.py                  # 1,000 small + 3 x 128 MiB, median of 3

The local server is the limit for both tools (it is Python); real S3 scales further with concurrency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, markdown_table, run_child  # noqa: E402

MIB = 1 << 20
ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
       "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **ENV})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def populate(endpoint: str, bucket: str, small: int, small_bytes: int, large: int, large_bytes: int) -> None:
    import boto3
    from boto3.s3.transfer import TransferConfig

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    client.create_bucket(Bucket=bucket)
    rnd = os.urandom(small_bytes)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(Bucket=bucket, Key=f"small/d{i % 10}/obj{i:05d}.bin",
                                                  Body=i.to_bytes(4, "little") + rnd[4:]), range(small)))
    cfg = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)  # aws cli's default parts
    for i in range(large):
        path = Path(tempfile.mkstemp()[1])
        path.write_bytes(os.urandom(large_bytes))
        client.upload_file(str(path), bucket, f"large/obj{i}.bin", Config=cfg)
        path.unlink()


def timed(cmd: list[str], dest: Path) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) of one run.

    The CPU time is the client's own (user + system of the finished child; the moto server is a
    different, still running child and is not counted).  Against this local server both tools wait on
    the server, so wall time cannot show client efficiency; on real S3, which scales out, the client's
    CPU per object is what limits a staging node.
    """
    import resource

    shutil.rmtree(dest, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = run_child(cmd, env=ENV, cwd=REPO, timeout=1800).wall_s
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 small objects, 2 x 16 MiB, one repetition")
    ap.add_argument("--small", type=int, default=None, help="number of small objects")
    ap.add_argument("--small-kib", type=int, default=16, help="size of each small object")
    ap.add_argument("--large", type=int, default=None, help="number of large objects")
    ap.add_argument("--large-mib", type=int, default=None, help="size of each large object")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions per measurement (median reported)")
    ap.add_argument("--concurrency", type=int, default=32, help="shardprep --concurrency")
    ap.add_argument("--workdir", type=Path, default=None, help="where destinations go (default: a temp dir)")
    args = ap.parse_args()
    small = args.small or (100 if args.quick else 1000)
    large = args.large or (2 if args.quick else 3)
    large_mib = args.large_mib or (16 if args.quick else 128)
    repeat = args.repeat or (1 if args.quick else 3)
    if shutil.which("aws") is None:
        sys.exit("aws cli not found (pip install awscli)")

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = start_moto(port)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-stage-"))
    try:
        populate(endpoint, "bench", small, args.small_kib << 10, large, large_mib * MIB)
        cases = [("small", small, small * (args.small_kib << 10)), ("large", large, large * large_mib * MIB)]
        rows = []
        for name, count, nbytes in cases:
            src = f"s3://bench/{name}/"
            aws = ["aws", "s3", "cp", "--recursive", "--quiet", "--endpoint-url", endpoint, src]
            ours = [sys.executable, "-m", "shardprep", "stage", src, str(work / "ours"), "--endpoint-url", endpoint,
                    "--json", "--no-progress", "--concurrency", str(args.concurrency)]
            aws_s, ours_s = [], []
            for _ in range(repeat):  # interleaved so drifting machine load hits both alike
                aws_s.append(timed(aws + [str(work / "aws")], work / "aws"))
                ours_s.append(timed(ours, work / "ours"))
            a, o = (statistics.median(w for w, _ in aws_s), statistics.median(w for w, _ in ours_s))
            ac, oc = (statistics.median(c for _, c in aws_s), statistics.median(c for _, c in ours_s))
            rows.append([f"{name}: {count} x {nbytes // count // 1024:,} KiB", f"{nbytes / MIB:,.1f}",
                         a, nbytes / 1e6 / a, o, nbytes / 1e6 / o, f"{a / o:.2f}x", ac, oc, f"{ac / oc:.2f}x"])
        info = machine_info()
        print(f"machine: {info['usable_cpus']} CPUs ({info['cpu_model']}), load at start "
              f"{info['load_avg_at_start']}; repetitions: {repeat} (median); shardprep --concurrency "
              f"{args.concurrency}, aws cli defaults (10 concurrent requests, 8 MB parts)\n")
        print(markdown_table(["case", "MiB", "aws s3 cp s", "aws MB/s", "shardprep s", "shardprep MB/s",
                              "speed ratio", "aws client CPU s", "shardprep client CPU s", "CPU ratio"], rows))
    finally:
        server.terminate()
        server.wait(timeout=10)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
