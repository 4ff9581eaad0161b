"""Issue 31, item 13: what a task log says about attempts (``job/logs.py``), as ``status`` and ``report``
show it, for a job read straight from object storage, a local job and a task that failed once and was
resumed.  A task reading remote inputs logs ``task N: remote inputs: ...``, which the old start pattern
took for a second attempt: ``report`` said two attempts and drew a tick from that line to the end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import run_cli
from s3_server import aws_env, make_bucket, s3_client

from shardprep.cli.main import main
from shardprep.job.logs import parse_task_log

DOCS = "".join(f"document {i} with a few words in it\n" for i in range(400))


def _inputs(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for name in ("a.txt", "b.txt"):
        (directory / name).write_text(DOCS)
    return directory


def _numbers(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _check_once(out: Path, capsys) -> None:
    """Both tasks ran once: one attempt each in report and status, bars from the start line to the end."""
    code, report = _numbers(capsys, "report", str(out))
    assert code == 0
    rows = report["tasks"]["per_task"]
    assert [r["attempts"] for r in rows] == [1, 1] and report["tasks"]["retried"] == 0
    for row in rows:
        text = (out / "logs" / f"task-{row['task']:05d}.log").read_text()
        first = parse_task_log(row["task"], text.splitlines()[0] + "\n")
        assert row["started"] == pytest.approx(first.started)        # the bar starts at the attempt's start
        assert text.count("attempt start (pid ") == 1
    code, status = _numbers(capsys, "status", str(out))
    assert code == 0
    p = status["progress"]
    assert p["work_done"] == 1.0 and p["running"] == []
    assert p["parallelism"] is not None and 0 < p["parallelism"] <= 2.0 + 1e-9   # 2 tasks, 1 worker at a time


@pytest.mark.s3
@pytest.mark.slow
def test_a_job_read_from_object_storage_counts_one_attempt_per_task(s3_endpoint, sample_tokenizer, tmp_path, capsys):
    local = _inputs(tmp_path / "raw")
    bucket = make_bucket(s3_endpoint, "attempts")
    for f in sorted(local.iterdir()):
        s3_client(s3_endpoint).upload_file(str(f), bucket, f"raw/{f.name}")
    out = tmp_path / "out"
    run_cli("submit", "-i", f"s3://{bucket}/raw", "-o", out, "-t", sample_tokenizer, "--one-file-per-task",
            "--workers", "1", "--endpoint-url", s3_endpoint, "--no-progress", env=aws_env())
    assert all("remote inputs: " in p.read_text() for p in (out / "logs").glob("task-*.log"))
    _check_once(out, capsys)


def test_a_local_job_counts_one_attempt_per_task(sample_tokenizer, tmp_path, capsys):
    out = tmp_path / "out"
    run_cli("submit", "-i", _inputs(tmp_path / "raw"), "-o", out, "-t", sample_tokenizer, "--one-file-per-task",
            "--workers", "1", "--no-progress")
    _check_once(out, capsys)


def test_a_task_that_failed_then_was_resumed_counts_two_attempts(sample_tokenizer, tmp_path, capsys):
    raw = _inputs(tmp_path / "raw")
    out = tmp_path / "out"
    run_cli("plan", "-i", raw, "-o", out, "-t", sample_tokenizer, "--one-file-per-task")
    os.rename(raw / "b.txt", tmp_path / "b.txt")            # task 1's input gone: it fails (exit 3)
    run_cli("submit", "--resume", out, "--workers", "1", "--no-progress", check=3)
    code, status = _numbers(capsys, "status", str(out))
    assert code == 5 and status["missing"] == [1]
    os.rename(tmp_path / "b.txt", raw / "b.txt")            # back, same size and mtime: the plan holds again
    run_cli("submit", "--resume", out, "--workers", "1", "--no-progress")
    code, report = _numbers(capsys, "report", str(out))
    assert [r["attempts"] for r in report["tasks"]["per_task"]] == [1, 2] and report["tasks"]["retried"] == 1
    log = parse_task_log(1, (out / "logs" / "task-00001.log").read_text())
    assert (log.attempts, log.status) == (2, "done") and log.started > log.first_started


def test_old_logs_without_the_marker_are_still_read():
    """A log written before the attempt marker: each ``task N: INPUTS`` line opens an attempt, but neither
    the backend line nor the remote-inputs line does."""
    t = "2026-01-02 03:04:0{},000 INFO shardprep.job.task: task 2{}\n"
    text = (t.format(1, ": s3://b/raw/a.txt[0:None]") + t.format(2, ": backend {'name': 'hf'}, 1 thread(s)")
            + t.format(3, " failed: boom") + t.format(4, ": s3://b/raw/a.txt[0:None]")
            + t.format(5, ": remote inputs: 3 request(s), 0 of them retries after transient errors, 10 bytes")
            + t.format(6, " done: 1 documents"))
    log = parse_task_log(2, text)
    assert (log.attempts, log.status, log.duration_s) == (2, "done", pytest.approx(2.0))
