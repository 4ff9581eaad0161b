"""``upload`` publishes exactly the bytes the job wrote (issue 13 item 3): a shard that no longer matches its
sidecar's sha256 is not uploaded, a file modified while it goes up is deleted from the bucket again, and
in both cases index.json stays unpublished and the command exits 7 naming the file.  Real S3 API (moto),
real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli
from s3_server import FaultProxy, aws_env, make_bucket, s3_client

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INCOMPLETE, EXIT_TRANSFER

pytestmark = pytest.mark.s3
MIB = 1 << 20


@pytest.fixture
def bucket(s3_endpoint) -> str:
    return make_bucket(s3_endpoint, "upload")


def _keys(endpoint: str, bucket: str) -> set[str]:
    return {o["Key"] for o in s3_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])}


def _upload(src: Path, bucket: str, endpoint: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "shardprep", "upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url",
            endpoint, *extra]


def test_shard_that_differs_from_its_sidecar_is_not_uploaded(tmp_path, s3_endpoint, bucket, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(2):
        (raw / f"part{i}.txt").write_text("\n".join(sample_documents(300, seed=i)) + "\n")
    out = tmp_path / "out"
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    shard = out / "shard-00001.tar"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01                        # a flipped bit, same size
    shard.write_bytes(bytes(data))

    # a finalized dataset is verified before anything is sent (issue 31 item 4): refused as verify refuses it
    r = run_cli("upload", out, f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint, check=EXIT_INCOMPLETE,
                env=aws_env())
    assert f"{out} does not verify (1 bad shard(s): shard-00001.tar: sha256 differs from index" in r.stderr
    assert "nothing was uploaded" in r.stderr
    assert _keys(s3_endpoint, bucket) == set()
    # outside a dataset (no index.json going up) the shard is still held to its sidecar's sha256
    r = run_cli("upload", out, f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint, "--exclude", "index.json",
                check=EXIT_TRANSFER, env=aws_env())
    assert f"sha256 of {shard} differs from its sidecar shard-00001.json" in r.stderr
    keys = _keys(s3_endpoint, bucket)
    assert "shards/shard-00000.tar" in keys and "shards/shard-00001.tar" not in keys
    assert "shards/index.json" not in keys


@pytest.mark.slow
def test_shard_modified_during_its_upload_is_withdrawn_and_the_index_not_published(tmp_path, s3_endpoint, bucket):
    src = tmp_path / "out"
    src.mkdir()
    shard = src / "shard-00000.tar"
    shard.write_bytes(os.urandom(11 * MIB))              # three 5 MiB parts
    (src / "shard-00000.json").write_bytes(b'{"task": 0}')
    (src / "index.json").write_bytes(b'{"shards": 1}')
    with FaultProxy(s3_endpoint) as proxy:
        first_part = proxy.hold("/shards/shard-00000.tar", query="partNumber=1")
        proc = subprocess.Popen(_upload(src, bucket, proxy.url, "--part-size", "5M", "--concurrency", "1"),
                                env=aws_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert first_part.arrived.wait(120), "the multipart upload never sent its first part"
            with open(shard, "r+b") as f:            # rewritten in place while part 1 is in flight
                f.write(os.urandom(11 * MIB))
        finally:
            first_part.release.set()
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_TRANSFER, err
    assert f"failed: shards/shard-00000.tar: {shard} changed while it was uploaded (modified)" in err
    assert "so it was deleted again" in err
    assert "failed: shards/index.json: not uploaded" in err
    assert _keys(s3_endpoint, bucket) == {"shards/shard-00000.json"}   # no mixed object, no index
