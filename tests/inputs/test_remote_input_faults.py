"""Faults while tokenizing straight from object storage (issue 22), against moto and the HTTP server behind
``FaultProxy``: an object replaced after planning, the server killed mid-task, injected 503 SlowDown answers,
and permanent errors (403, 404).  Nothing half-written is ever published, the exit codes are the documented
ones (docs/failures.md), and a resume redoes only what failed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import plan_tasks, run_cli
from remote_corpus import SHAPE, every_document_once, same_shards, write_corpus
from remote_servers import free_port
from s3_server import FaultProxy, make_bucket, s3_client

from shardprep.errors import EXIT_INPUT, EXIT_TRANSFER

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def upload(endpoint: str, local: Path, *, versioned: bool = False) -> str:
    bucket = make_bucket(endpoint, "faults")
    client = s3_client(endpoint)
    if versioned:
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for f in sorted(local.iterdir()):
        client.upload_file(str(f), bucket, f"raw/{f.name}")
    return f"s3://{bucket}/raw"


def one_error_line(stderr: str) -> str:
    """The command's error: one line, no traceback."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, stderr
    return errors[0]


def no_half_shards(out: Path) -> None:
    assert not list(out.glob(".shard-*")), list(out.glob(".*"))
    for shard in out.glob("shard-*.tar"):
        assert shard.with_suffix(".json").exists(), shard


@pytest.mark.parametrize("versioned", [False, True], ids=["plain", "versioned"])
def test_object_replaced_after_planning_fails_its_tasks_then_a_replan_resumes(s3_endpoint, corpus, sample_tokenizer,
                                                                              tmp_path, versioned):
    url = upload(s3_endpoint, corpus[0], versioned=versioned)
    out = tmp_path / "out"
    plan = ("--input", url, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE, "--endpoint-url", s3_endpoint)
    run_cli("plan", *plan)
    changed = tmp_path / "changed"
    docs = write_corpus(changed, seed=9)
    bucket = url.split("/")[2]
    s3_client(s3_endpoint).upload_file(str(changed / "big.txt"), bucket, "raw/big.txt")

    failed = run_cli("submit", "--resume", out, "--no-progress", check=EXIT_INPUT)
    line = one_error_line(failed.stderr)
    assert f"input {url}/big.txt changed after it was planned" in failed.stderr, line
    big = [t.index for t in plan_tasks(out) if any(i.input.path.endswith("big.txt") for i in t.items)]
    assert big and not any((out / f"shard-{t:05d}.tar").exists() for t in big)
    no_half_shards(out)
    assert not (out / "index.json").exists()

    for name in ("small.jsonl", "c.jsonl.gz", "d.parquet"):       # the rest of the corpus changes too, then
        s3_client(s3_endpoint).upload_file(str(changed / name), bucket, f"raw/{name}")
    run_cli("plan", *plan, "--overwrite")                         # the same command plans the new versions
    run_cli("submit", "--resume", out)
    every_document_once(out, docs, sample_tokenizer)


def test_server_killed_mid_task_fails_it_cleanly_and_a_resume_redoes_only_it(s3_endpoint, corpus, local_output,
                                                                          sample_tokenizer, tmp_path):
    url = upload(s3_endpoint, corpus[0])
    port = free_port()
    out = tmp_path / "out"
    with FaultProxy(s3_endpoint, port=port) as proxy:
        run_cli("plan", "--input", url, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE,
                "--endpoint-url", proxy.url, "--max-attempts", "2")
        tasks = plan_tasks(out)
        last = tasks[-1]
        others = {i.input.path for t in tasks[:-1] for i in t.items}
        mine = [i.input.path for i in last.items if i.input.path not in others]
        assert mine, "the last task reads an object of its own"
        hold = proxy.hold("/raw/" + mine[-1].rsplit("/", 1)[1], methods=("GET",))
        proc = subprocess.Popen([sys.executable, "-m", "shardprep", "submit", "--resume", str(out), "--workers", "1",
                                 "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert hold.arrived.wait(timeout=240), "the last task never asked for its object"
            proxy.kill()
            _, stderr = proc.communicate(timeout=240)
        finally:
            proc.kill()
    assert proc.returncode == EXIT_TRANSFER, stderr
    line = one_error_line(stderr)                 # the task's worker processes read its objects side by side
    assert f"task {last.index}: TransferError: " in line and any(i.input.path in line for i in last.items), line
    assert not (out / f"shard-{last.index:05d}.tar").exists()
    no_half_shards(out)
    finished = {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*.tar")}
    assert len(finished) == len(tasks) - 1

    with FaultProxy(s3_endpoint, port=port) as proxy:           # the server is back at the same address
        resumed = run_cli("submit", "--resume", out, "--no-progress")
        assert f"to run: 1 task (id {last.index})" in resumed.stdout, resumed.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*.tar") if p.name in finished} == finished
    same_shards(local_output, out)


@pytest.mark.parametrize("store", ["s3", "http"])
def test_injected_503s_are_retried_counted_and_change_nothing(request, store, corpus, local_output, sample_tokenizer,
                                                              tmp_path):
    backend = request.getfixturevalue(f"{store}_backend")
    url = backend.put_dir(corpus[0])
    out = tmp_path / "out"
    with FaultProxy(backend.endpoint) as proxy:
        where, _ = backend.reach(url, proxy.url)
        if store == "http":                         # no listings: the objects by name
            listing = tmp_path / "inputs.txt"
            listing.write_text("".join(f"{where}/{p.name}\n" for p in sorted(corpus[0].iterdir())))
            inputs = ["--input", f"@{listing}"]
        else:
            inputs = ["--input", where, "--endpoint-url", proxy.url]
        run_cli("plan", *inputs, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE)
        proxy.fail("big.txt", times=4, status=503, code="SlowDown")
        run_cli("submit", "--resume", out, "--no-progress")
        slowed = [r for r in proxy.log if r.status == 503]
    assert len(slowed) == 4
    same_shards(local_output, out)
    stats = [json.loads(p.read_text())["stats"]["remote"] for p in sorted(out.glob("shard-*.json"))]
    assert sum(s["retries"] for s in stats) == 4, stats
    logged = [line for p in (out / "logs").glob("task-*.log") for line in p.read_text().splitlines()
              if "remote inputs:" in line]
    assert len(logged) == len(stats) and sum(int(line.split(", ")[1].split()[0]) for line in logged) == 4, logged


def test_missing_object_fails_its_task_with_one_line(s3_endpoint, corpus, sample_tokenizer, tmp_path):
    url = upload(s3_endpoint, corpus[0])
    out = tmp_path / "out"
    run_cli("plan", "--input", url, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE,
            "--endpoint-url", s3_endpoint)
    s3_client(s3_endpoint).delete_object(Bucket=url.split("/")[2], Key="raw/d.parquet")
    failed = run_cli("submit", "--resume", out, check=EXIT_INPUT)
    line = one_error_line(failed.stderr)
    assert f"input {url}/d.parquet is missing" in failed.stderr and "NoSuchKey" in failed.stderr, line
    no_half_shards(out)


def test_access_denied_fails_at_once_with_the_url_and_the_cause(s3_endpoint, corpus, sample_tokenizer, tmp_path):
    url = upload(s3_endpoint, corpus[0])
    out = tmp_path / "out"
    with FaultProxy(s3_endpoint) as proxy:
        run_cli("plan", "--input", url, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE,
                "--endpoint-url", proxy.url)
        proxy.fail("d.parquet", status=403, code="AccessDenied")
        failed = run_cli("submit", "--resume", out, "--workers", "1", check=EXIT_TRANSFER)
        denied = [r for r in proxy.requests_for("d.parquet", "GET") if r.status == 403]
    line = one_error_line(failed.stderr)
    assert f"{url}/d.parquet" in line and "AccessDenied (HTTP 403)" in line, line
    assert len(denied) == 1, denied                       # never retried
    no_half_shards(out)


def test_plan_names_a_missing_bucket_or_prefix(s3_endpoint, sample_tokenizer, tmp_path):
    bucket = make_bucket(s3_endpoint, "empty")
    for url, what in ((f"s3://{bucket}/nothing/here", "does not exist"),
                      (f"s3://no-such-bucket-{bucket}/raw/", "does not exist"),
                      (f"s3://{bucket}/raw/*.jsonl", "matches no objects")):
        failed = run_cli("plan", "--input", url, "--output", tmp_path / "out", "--tokenizer", sample_tokenizer,
                         "--endpoint-url", s3_endpoint, check=EXIT_INPUT)
        assert what in one_error_line(failed.stderr) and url.rstrip("/") in failed.stderr


def test_doctor_lists_the_url_and_reads_one_object_or_says_why_not(s3_endpoint, corpus, sample_tokenizer, tmp_path):
    url = upload(s3_endpoint, corpus[0])
    args = ("doctor", "--tokenizer", sample_tokenizer, "--output", tmp_path / "out", "--input", url, "--json")
    report = json.loads(run_cli(*args, "--endpoint-url", s3_endpoint, check=False).stdout)
    (check,) = [c for c in report["checks"] if c["name"] == "input"]
    assert check["verdict"] in ("ok", "warn") and check["details"]["files"] == 4, check
    assert f"4 remote object(s) listed, 64.0 KiB of {url}/big.txt read from here" in check["message"]
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/raw/big.txt", status=403, code="AccessDenied")
        report = json.loads(run_cli(*args, "--endpoint-url", proxy.url, check=EXIT_INPUT).stdout)
    (check,) = [c for c in report["checks"] if c["name"] == "input"]
    assert check["verdict"] == "fail" and "AccessDenied (HTTP 403)" in check["message"], check


def test_resume_refuses_s3_options_other_than_the_plans(s3_endpoint, corpus, sample_tokenizer, tmp_path):
    url = upload(s3_endpoint, corpus[0])
    out = tmp_path / "out"
    run_cli("plan", "--input", url, "--output", out, "--tokenizer", sample_tokenizer, *SHAPE,
            "--endpoint-url", s3_endpoint)
    refused = run_cli("submit", "--resume", out, "--endpoint-url", "http://127.0.0.1:9", check=2)
    line = one_error_line(refused.stderr)
    assert "--endpoint-url http://127.0.0.1:9: the frozen plan reaches its inputs as it was planned" in line, line
    run_cli("submit", "--resume", out, "--endpoint-url", s3_endpoint, "--no-progress")    # the plan's own: fine
    files = tmp_path / "files"                    # a plan of files reaches no store: nothing to refuse
    run_cli("plan", "--input", corpus[0] / "small.jsonl", "--output", files, "--tokenizer", sample_tokenizer)
    run_cli("submit", "--resume", files, "--endpoint-url", "http://127.0.0.1:9", "--no-progress")
