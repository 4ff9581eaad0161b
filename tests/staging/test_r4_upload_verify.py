"""``upload`` publishes only what verifies (issue 31 item 4): a shardprep dataset is checked as ``verify``
checks it before anything is sent; a torn sidecar, a sidecar whose document counts are wrong (its shard's
sha256 still right) or an index.json with an entry removed is refused in one line, exit 5, and the bucket
stays empty.  A file changed after it was verified does not go up either.  Directories that are not
shardprep datasets (raw inputs) are copied as before.  Real S3 API (moto), the CLI in-process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import cli
from r4_outputs import edit_json, finished_output
from s3_server import make_bucket, s3_client

from shardprep.errors import EXIT_INCOMPLETE

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_tokenizer) -> Path:
    return finished_output(tmp_path_factory.mktemp("upverify"), sample_tokenizer, docs=40, seed=60)


@pytest.fixture
def out(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "out"))


def _keys(endpoint: str, bucket: str) -> set[str]:
    return {o["Key"] for o in s3_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])}


def upload(capsys, src: Path, bucket: str, endpoint: str) -> tuple[int, str, str]:
    return cli("upload", src, f"s3://{bucket}/ds/", "--endpoint-url", endpoint, "--no-progress")


def _wrong_counts(d: dict) -> None:      # a sidecar that parses (its table adds up) but does not describe its shard
    d["documents"] += 1
    d["chunks"]["docs"][0] += 1


DAMAGE = {
    "torn sidecar": (lambda out: (out / "shard-00001.json").write_bytes((out / "shard-00001.json").read_bytes()[:150]),
                     "shard-00001.tar: sidecar unreadable"),
    "wrong counts": (lambda out: edit_json(out / "shard-00001.json", _wrong_counts),
                     "shard-00001.tar: sidecar documents"),
    "index entry removed": (lambda out: edit_json(out / "index.json", lambda d: d["shards"].pop(1)),
                            "index.json: field 'shards': lists 2 shard(s) but 'totals.shards' is 3"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_dataset_that_does_not_verify_is_refused_before_anything_is_sent(out, capsys, s3_endpoint, case):
    damage, needle = DAMAGE[case]
    damage(out)
    bucket = make_bucket(s3_endpoint, "upv")
    code, _, err = upload(capsys, out, bucket, s3_endpoint)
    assert code == EXIT_INCOMPLETE, err
    lines = [line for line in err.splitlines() if "shardprep upload: error:" in line]
    assert len(lines) == 1 and needle in lines[0], err
    assert f"shardprep repair {out}" in lines[0]
    assert _keys(s3_endpoint, bucket) == set()                  # nothing at all went up


def test_a_verified_dataset_goes_up_and_reads_back(out, capsys, s3_endpoint):
    from shardprep.loader import ShardDataset

    bucket = make_bucket(s3_endpoint, "upv")
    code, _, err = upload(capsys, out, bucket, s3_endpoint)
    assert code == 0, err
    assert {"ds/index.json", "ds/job.json", "ds/shard-00002.tar", "ds/shard-00002.json"} <= _keys(s3_endpoint, bucket)
    remote = ShardDataset(f"s3://{bucket}/ds", mode="doc", shuffle=False, verify=True, endpoint_url=s3_endpoint)
    local = ShardDataset(out, mode="doc", shuffle=False)
    assert [d["input_ids"].tolist() for d in remote] == [d["input_ids"].tolist() for d in local]


def test_a_shard_changed_after_it_was_verified_does_not_go_up(out, s3_endpoint):
    from shardprep.staging.upload import UploadOptions, plan_upload, run_upload
    from shardprep.storage.s3 import ClientOptions, make_client

    bucket = make_bucket(s3_endpoint, "upv")
    options = UploadOptions(out, f"s3://{bucket}/ds/", progress=False, client=ClientOptions(endpoint_url=s3_endpoint))
    client = make_client(options.client)
    plan = plan_upload(options, client)                      # verified here
    with open(out / "shard-00001.tar", "r+b") as f:          # then rewritten, same size, same bytes but one
        f.seek(700)
        byte = f.read(1)
        f.seek(700)
        f.write(bytes([byte[0] ^ 1]))
    summary = run_upload(options, client, plan)
    reasons = dict(summary.failed)
    assert "changed after it was verified" in reasons["ds/shard-00001.tar"]
    assert "ds/shard-00001.tar" not in _keys(s3_endpoint, bucket) and "ds/index.json" not in _keys(s3_endpoint, bucket)


def test_a_directory_that_is_no_dataset_is_copied_as_before(tmp_path, capsys, s3_endpoint):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("some text\n")
    (raw / "index.json").write_text('{"pages": ["a.txt"]}\n')      # another tool's index
    bucket = make_bucket(s3_endpoint, "upv")
    code, _, err = upload(capsys, raw, bucket, s3_endpoint)
    assert code == 0, err
    assert _keys(s3_endpoint, bucket) == {"ds/a.txt", "ds/index.json"}
