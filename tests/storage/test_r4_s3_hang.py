"""Issue 31, item 9: an S3 endpoint that accepts connections and never answers.

``plan --input s3://...`` was silent for 617 s: botocore's 60 s read timeout, five attempts, and the bucket's
versioning query (whose failure was taken for "not versioned") waited through all of them before the
listing waited through them again.  Now: a warning naming the endpoint within seconds, each request
bounded by ``--read-timeout`` x ``--max-attempts``, one wait (not two), and exit 7 naming the endpoint.

The endpoint is a listening socket on 127.0.0.1 that never reads: the kernel completes each TCP handshake
(the backlog holds them), so a client connects, sends its request and waits for an answer that never comes.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest
from helpers import run_cli
from s3_server import aws_env, make_bucket, s3_client

from shardprep.storage.s3 import ClientOptions, make_client

pytestmark = [pytest.mark.s3]


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock


def connections(sock: socket.socket) -> int:
    """How many connections were made to ``sock`` (each waits in the backlog until accepted)."""
    sock.setblocking(False)
    n = 0
    while True:
        try:
            sock.accept()[0].close()
        except BlockingIOError:
            return n
        n += 1


def test_plan_against_an_endpoint_that_never_answers_exits_7_naming_it(silent, sample_tokenizer, tmp_path: Path):
    silent_endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    env = aws_env({"AWS_ENDPOINT_URL": silent_endpoint})
    started = time.monotonic()
    proc = run_cli("plan", "--input", "s3://bucket/x/", "--output", tmp_path / "out", "--tokenizer",
                   sample_tokenizer, "--read-timeout", "1", "--max-attempts", "2", check=7, env=env, timeout=120)
    elapsed = time.monotonic() - started
    # 2 attempts x 1 s + at most 1 s of backoff, once (the versioning query's failure is the listing's),
    # plus the interpreter's start: far below the 4 such waits the old code spent
    assert elapsed < 30, elapsed
    lines = proc.stderr.strip().splitlines()
    assert f"waiting for S3 endpoint {silent_endpoint}" in proc.stderr, proc.stderr
    assert "no answer yet" in proc.stderr and "--read-timeout" in proc.stderr
    error = lines[-1]
    assert error.startswith("shardprep plan: error: ") and silent_endpoint in error, lines
    assert "timeout" in error.lower() and "--read-timeout" in error, error
    assert "Traceback" not in proc.stderr
    assert connections(silent) == 2        # --max-attempts requests in all: no second wait for the listing


def test_default_timeouts_are_bounded_and_reach_the_client():
    options = ClientOptions()
    config = make_client(options).meta.config
    assert (config.connect_timeout, config.read_timeout) == (options.connect_timeout, options.read_timeout)
    assert config.retries == {"mode": "standard", "total_max_attempts": options.max_attempts}
    # one request's worst case against a silent endpoint: every attempt's wait plus botocore's backoff
    # (standard mode: at most 2**n s before retry n) stays under two minutes
    worst = options.max_attempts * options.read_timeout + sum(2 ** n for n in range(options.max_attempts - 1))
    assert worst < 120, worst


def test_timeouts_are_options_recorded_for_the_tasks(s3_endpoint, sample_tokenizer, tmp_path: Path):
    bucket = make_bucket(s3_endpoint, "hang")
    s3_client(s3_endpoint).put_object(Bucket=bucket, Key="raw/a.txt", Body=b"hello world\n" * 10)
    out = tmp_path / "out"
    run_cli("plan", "--input", f"s3://{bucket}/raw/", "--output", out, "--tokenizer", sample_tokenizer,
            "--endpoint-url", s3_endpoint, "--read-timeout", "45", "--connect-timeout", "3", env=aws_env())
    s3 = json.loads((out / "job.json").read_text())["storage"]["s3"]
    assert (s3["read_timeout"], s3["connect_timeout"]) == (45.0, 3.0)
    # submit --resume reaches the inputs as planned: another timeout is refused, not dropped
    proc = run_cli("submit", "--resume", out, "--read-timeout", "5", check=2, env=aws_env())
    assert "--read-timeout 5" in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--read-timeout", "--connect-timeout"])
def test_a_timeout_that_is_not_positive_is_refused_naming_it(flag, tmp_path: Path, sample_tokenizer):
    proc = run_cli("plan", "--input", "s3://bucket/x/", "--output", tmp_path / "out", "--tokenizer",
                   sample_tokenizer, flag, "0", check=2, env=aws_env())
    assert flag in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
