"""Issue 31, item 5 of the review: credentials never reach a log.

``shardprep -v`` with ``s3://`` inputs printed botocore's DEBUG request dumps, which carry the access key id
(``Authorization: AWS4-HMAC-SHA256 Credential=AKIA...``) and the session token (``X-Amz-Security-Token``),
and a normal run printed botocore's INFO chatter ("Found credentials in environment variables.").  Against
moto on 127.0.0.1, with recognisable fake credentials: neither value appears in stdout, stderr or the task
logs, with or without ``-v``, and a normal run prints no botocore line at all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import run_cli
from s3_server import aws_env, make_bucket, s3_client

from shardprep.logsafe import RedactSecrets

pytestmark = [pytest.mark.s3]

KEY_ID = "AKIAFAKEKEYID4242XYZ"            # the AKIA + 16 shape of a real access key id
SECRET = "fakeSecretAccessKey/4242+xyzXYZ0123456789"
TOKEN = "FwoGZXIvYXdzEFAKESESSIONTOKEN4242xyz//////////"
CREDS = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN}


def _leaks(text: str) -> list[str]:
    return [name for name, value in (("key id", KEY_ID), ("secret", SECRET), ("session token", TOKEN))
            if value in text]


@pytest.fixture
def s3_input(s3_endpoint) -> str:
    bucket = make_bucket(s3_endpoint, "secrets")
    s3_client(s3_endpoint).put_object(Bucket=bucket, Key="raw/a.txt", Body=b"hello world\nsecond document\n" * 20)
    return f"s3://{bucket}/raw/"


def test_verbose_plan_and_tasks_log_no_credentials(s3_endpoint, s3_input, sample_tokenizer, tmp_path: Path):
    out = tmp_path / "out"
    env = aws_env({**CREDS, "AWS_ENDPOINT_URL": s3_endpoint})
    plan = run_cli("-v", "plan", "--input", s3_input, "--output", out, "--tokenizer", sample_tokenizer, env=env)
    task = run_cli("-v", "run-task", out, "--task-id", "0", env=env)     # what a Slurm task's log receives
    for name, proc in (("plan", plan), ("run-task", task)):
        assert "INFO shardprep" in proc.stderr, name        # shardprep's own lines are still there
        assert not _leaks(proc.stdout + proc.stderr), (name, _leaks(proc.stdout + proc.stderr))
        assert "botocore" not in proc.stderr and "urllib3" not in proc.stderr, name
    logs = "".join(p.read_text() for p in (out / "logs").glob("*"))
    assert logs and not _leaks(logs)


def test_a_normal_run_prints_no_botocore_chatter(s3_endpoint, s3_input, sample_tokenizer, tmp_path: Path):
    out = tmp_path / "out"
    env = aws_env({**CREDS, "AWS_ENDPOINT_URL": s3_endpoint})
    proc = run_cli("submit", "--input", s3_input, "--output", out, "--tokenizer", sample_tokenizer,
                   "--workers", "1", "--no-progress", env=env)
    text = proc.stdout + proc.stderr + "".join(p.read_text() for p in (out / "logs").glob("*"))
    assert "Found credentials" not in text and "Found endpoint" not in text and "botocore" not in text, text
    assert not _leaks(text)


def test_the_redacting_filter_masks_what_a_request_dump_carries(monkeypatch):
    """The filter on shardprep's handlers is the second line of defence: a record that does carry a
    header dump (another library's logger, a message quoting one) is masked before it is written."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    dump = (f"Sending http request: <AWSPreparedRequest headers={{'Authorization': b'AWS4-HMAC-SHA256 "
            f"Credential={KEY_ID}/20240101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=abc123', "
            f"'X-Amz-Security-Token': b'{TOKEN}'}}> url=https://x/?X-Amz-Credential={KEY_ID}%2F2024&"
            f"X-Amz-Signature=deadbeef&X-Amz-Security-Token={TOKEN}&x=1 secret {SECRET}")
    record = logging.LogRecord("botocore.endpoint", logging.DEBUG, __file__, 1, "%s", (dump,), None)
    assert RedactSecrets().filter(record)
    text = record.getMessage()
    assert not _leaks(text), text
    assert "deadbeef" not in text and "abc123" not in text and "x=1" in text
