"""``upload`` onto a prefix that already holds another dataset (issue 23 item 3): refused by default in one
line (exit 4); ``--replace`` deletes the old index.json first and the old dataset's leftover files last, so
a published index.json never names another plan's shards, also when the upload is killed at either step
(and the same command then finishes the job).  Real CLI, real S3 API (moto), real shardprep outputs."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli
from s3_server import FaultProxy, aws_env, make_bucket, s3_client

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_PLAN_CONFLICT

pytestmark = pytest.mark.s3


def _dataset(root: Path, tokenizer: Path, files: int, seed: int) -> Path:
    corpus = root / "in"
    corpus.mkdir(parents=True)
    for i in range(files):
        (corpus / f"part-{i}.txt").write_text("\n".join(sample_documents(80, seed=seed + i)) + "\n")
    out = root / "out"
    run_cli("submit", "--one-file-per-task", "-i", corpus, "-o", out, "-t", tokenizer, "--no-progress")
    return out


@pytest.fixture(scope="module")
def old(tmp_path_factory, sample_tokenizer) -> Path:
    return _dataset(tmp_path_factory.mktemp("old"), sample_tokenizer, 3, seed=0)


@pytest.fixture(scope="module")
def new(tmp_path_factory, sample_tokenizer) -> Path:
    return _dataset(tmp_path_factory.mktemp("new"), sample_tokenizer, 2, seed=50)


def _local_keys(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")}


def _remote(endpoint: str, bucket: str) -> dict[str, bytes]:
    c = s3_client(endpoint)
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="ds/").get("Contents", [])]
    return {k[len("ds/"):]: c.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def assert_never_mixed(endpoint: str, bucket: str) -> dict | None:
    """If an index.json is published, every shard and sidecar it names is there, of its own plan."""
    remote = _remote(endpoint, bucket)
    if "index.json" not in remote:
        return None
    index = json.loads(remote["index.json"])
    for s in index["shards"]:
        assert hashlib.sha256(remote[s["name"]]).hexdigest() == s["sha256"], s["name"]
        assert json.loads(remote[s["sidecar"]])["plan_fingerprint"] == index["plan_fingerprint"], s["sidecar"]
    return index


def _upload(src: Path, bucket: str, endpoint: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "shardprep", "upload", str(src), f"s3://{bucket}/ds/", "--endpoint-url", endpoint,
            *extra]


def _run(cmd: list[str], check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=aws_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == check, proc.stderr
    return proc


def _killed_at(hold_on: str, methods: tuple[str, ...], cmd: list[str], proxy: FaultProxy) -> None:
    """Run ``cmd`` until a request matching ``hold_on`` is in flight, then SIGKILL it."""
    hold = proxy.hold(hold_on, methods=methods)
    proc = subprocess.Popen(cmd, env=aws_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert hold.arrived.wait(120), f"no {methods} of {hold_on} was sent: {proc.communicate(timeout=60)}"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        hold.release.set()
    assert proc.returncode == -signal.SIGKILL


def test_upload_onto_another_dataset_is_refused_then_replaced(old, new, s3_endpoint):
    bucket = make_bucket(s3_endpoint, "replace")
    _run(_upload(old, bucket, s3_endpoint))
    before = _remote(s3_endpoint, bucket)
    old_plan = json.loads((old / "index.json").read_bytes())["plan_fingerprint"]
    refused = _run(_upload(new, bucket, s3_endpoint), check=EXIT_PLAN_CONFLICT)
    lines = [x for x in refused.stderr.splitlines() if "error:" in x]
    assert len(lines) == 1 and "Traceback" not in refused.stderr
    assert (f"s3://{bucket}/ds/ already holds another dataset: its index.json lists another dataset (plan "
            f"{old_plan[:12]}, 3 shard(s); uploading plan ") in lines[0] and "--replace" in lines[0]
    assert _remote(s3_endpoint, bucket) == before                        # nothing touched

    dry = _run(_upload(new, bucket, s3_endpoint, "--replace", "--dry-run"))
    deletes = [x.split()[-1] for x in dry.stdout.splitlines() if x.strip().startswith("delete ")]
    assert deletes[0] == f"s3://{bucket}/ds/index.json"
    assert f"s3://{bucket}/ds/shard-00002.tar" in deletes and f"s3://{bucket}/ds/shard-00000.tar" not in deletes
    assert _remote(s3_endpoint, bucket) == before

    with FaultProxy(s3_endpoint) as proxy:
        _run(_upload(new, bucket, proxy.url, "--replace"))
        log = [r for r in proxy.log if r.method in ("PUT", "POST", "DELETE")]
    first_delete = next(r for r in log if r.method == "DELETE")
    assert first_delete.path.endswith("/ds/index.json")
    assert first_delete.ended <= min(r.started for r in log if r.method != "DELETE")
    index_put = next(r for r in log if r.method == "PUT" and r.path.endswith("/ds/index.json"))
    leftovers = [r for r in log if r.method == "DELETE" and r is not first_delete]
    assert leftovers and min(r.started for r in leftovers) >= index_put.ended
    remote = _remote(s3_endpoint, bucket)
    assert set(remote) == _local_keys(new)                               # nothing of the old dataset is left
    assert all(remote[k] == (new / k).read_bytes() for k in remote)
    assert assert_never_mixed(s3_endpoint, bucket)["plan_fingerprint"] != old_plan


def test_killed_replace_never_publishes_an_index_naming_another_plans_shards(old, new, s3_endpoint):
    bucket = make_bucket(s3_endpoint, "replace")
    _run(_upload(old, bucket, s3_endpoint))
    new_plan = json.loads((new / "index.json").read_bytes())["plan_fingerprint"]
    with FaultProxy(s3_endpoint) as proxy:               # killed while the new shards go up
        _killed_at("/ds/shard-00001.tar", ("PUT",), _upload(new, bucket, proxy.url, "--replace"), proxy)
    assert assert_never_mixed(s3_endpoint, bucket) is None               # the old index went first
    refused = _run(_upload(new, bucket, s3_endpoint), check=EXIT_PLAN_CONFLICT)
    assert "shard file(s) that are not this upload's and no index.json" in refused.stderr

    with FaultProxy(s3_endpoint) as proxy:               # killed while the old leftovers are deleted (the first)
        _killed_at("/ds/logs/task-00002.log", ("DELETE",), _upload(new, bucket, proxy.url, "--replace"), proxy)
    assert assert_never_mixed(s3_endpoint, bucket)["plan_fingerprint"] == new_plan
    assert {"shard-00002.tar", "shard-00002.json"} <= set(_remote(s3_endpoint, bucket))
    plain = _run(_upload(new, bucket, s3_endpoint))      # the new dataset is complete: a plain upload is fine
    assert (f"s3://{bucket}/ds/ holds 2 file(s) of shardprep's that this dataset does not have (e.g. "
            f"ds/shard-00002.json, ds/shard-00002.tar); --replace deletes them") in plain.stderr
    _run(_upload(new, bucket, s3_endpoint, "--replace"))
    remote = _remote(s3_endpoint, bucket)
    assert set(remote) == _local_keys(new) and assert_never_mixed(s3_endpoint, bucket)["plan_fingerprint"] == new_plan
