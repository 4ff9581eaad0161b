"""`stage` refuses a destination that cannot hold a directory tree with one line (issue 13 item 10) and
warns about keys that differ only by letter case (item 12).  Real CLI, real S3 API (moto)."""

from __future__ import annotations

import pytest
from helpers import run_cli
from s3_server import aws_env, make_bucket, s3_client

from shardprep.errors import EXIT_USAGE

pytestmark = pytest.mark.s3


@pytest.fixture
def bucket(s3_endpoint) -> str:
    name = make_bucket(s3_endpoint, "guards")
    s3_client(s3_endpoint).put_object(Bucket=name, Key="raw/a.txt", Body=b"a document\n")
    return name


@pytest.mark.parametrize("where", ["dest", "parent"])
def test_stage_into_a_file_is_one_line_error(tmp_path, s3_endpoint, bucket, where):
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a directory")
    dest = blocker if where == "dest" else blocker / "sub"
    r = run_cli("stage", f"s3://{bucket}/raw/", dest, "--endpoint-url", s3_endpoint, check=EXIT_USAGE,
                env=aws_env())
    needle = f"DEST {blocker} is a file" if where == "dest" else f"DEST {dest}: its parent {blocker} is a file"
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert blocker.read_text() == "a file, not a directory"


def test_keys_differing_only_by_case_are_staged_with_a_warning(tmp_path, s3_endpoint, bucket):
    c = s3_client(s3_endpoint)
    c.put_object(Bucket=bucket, Key="raw/Data/Part.txt", Body=b"upper\n")
    c.put_object(Bucket=bucket, Key="raw/data/part.txt", Body=b"lower\n")
    dest = tmp_path / "dest"
    r = run_cli("stage", f"s3://{bucket}/raw/", dest, "--endpoint-url", s3_endpoint, env=aws_env())
    assert "1 group(s) of keys under" in r.stderr and "differ only by letter case" in r.stderr
    assert "Data/Part.txt / data/part.txt" in r.stderr
    assert (dest / "Data" / "Part.txt").read_bytes() == b"upper\n" and (dest / "data" / "part.txt").read_bytes() == b"lower\n"
