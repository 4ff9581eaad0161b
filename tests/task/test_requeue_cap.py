"""A task that cannot finish within --time is not requeued for ever (issue 13, item 5): at most
--max-requeues requeues (SLURM_RESTART_COUNT), then it fails with the advice to raise --time or use
smaller tasks, and `status` shows the attempts.  The batch script is run by bash with a stand-in task,
status is read from logs, and the whole cycle runs on the live cluster (skipped without Slurm)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import planned_with_slurm_record, run_cli, write_slow_text
from slurm_cluster import queue_states, submitted_job_ids, wait_for_jobs

from shardprep.errors import EXIT_INCOMPLETE, EXIT_REQUEUE
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.render import render_tokenize, template_text
from shardprep.executor.slurm.state import LogSummary, read_task_log
from shardprep.executor.slurm.submission import SubmissionPlan

ADVICE = "give it more time (--time) or split the work into smaller tasks (--target-task-bytes)"


def test_the_templates_default_cap_is_the_options_default():
    """By hand (no rendered export) the template falls back to its own default: it must be the same."""
    (default,) = re.findall(r"\$\{SHARDPREP_MAX_REQUEUES:-(\d+)\}", template_text("tokenize"))
    assert int(default) == SlurmOptions().max_requeues
    assert f"# default: {SlurmOptions().max_requeues} (--max-requeues)" in template_text("tokenize")


# --- the batch script, run by bash with a task that always stops at its time limit ----------------------

def _run_script(tmp_path: Path, restarts: int, opts: SlurmOptions) -> tuple[subprocess.CompletedProcess, Path]:
    bindir = tmp_path / f"bin{restarts}"
    bindir.mkdir()
    fake_python = bindir / "fakepy"           # stands in for `python -m shardprep run-task`: stopped by USR1
    fake_python.write_text(f"#!/bin/bash\necho 'task stopped on SIGUSR1 at a safe point'\nexit {EXIT_REQUEUE}\n")
    fake_python.chmod(0o755)
    calls = tmp_path / f"scontrol{restarts}.args"
    scontrol = bindir / "scontrol"
    scontrol.write_text(f"#!/bin/bash\necho \"$@\" >> {calls}\n")
    scontrol.chmod(0o755)
    (array,) = SubmissionPlan.build([4], max_array_size=1001, indexing="offset").arrays
    text = render_tokenize(opts, tmp_path, array, environ={"PATH": f"{bindir}:/usr/bin:/bin"})
    script = tmp_path / f"t{restarts}.sbatch"
    script.write_text(text.replace(f"export SHARDPREP_PYTHON={sys.executable}", f"export SHARDPREP_PYTHON={fake_python}"))
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "77",
           "SLURM_RESTART_COUNT": str(restarts)}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60), calls


@pytest.mark.parametrize("restarts", [0, 1, 2])
def test_below_the_cap_the_script_requeues(tmp_path, restarts):
    proc, calls = _run_script(tmp_path, restarts, SlurmOptions())
    assert proc.returncode == EXIT_REQUEUE, proc.stdout + proc.stderr
    assert calls.read_text().split() == ["requeue", "77_0"]
    assert f"requeueing 77_0 (attempt {restarts + 2} of at most 4)" in proc.stdout


def test_at_the_cap_the_script_gives_up_with_advice(tmp_path):
    proc, calls = _run_script(tmp_path, 3, SlurmOptions())          # the 4th attempt hit the limit again
    assert proc.returncode == EXIT_INCOMPLETE, proc.stdout + proc.stderr
    assert not calls.exists()                                       # not requeued again
    assert "shardprep-task-gave-up: task=4 attempts=4 max_requeues=3" in proc.stdout
    assert "reached its time limit on attempt 4 of 4 and is not requeued again" in proc.stdout
    assert ADVICE in proc.stdout and f"shardprep submit --resume {tmp_path}" in proc.stdout
    proc, calls = _run_script(tmp_path, 0, SlurmOptions(max_requeues=0))   # --max-requeues 0: never requeue
    assert proc.returncode == EXIT_INCOMPLETE and not calls.exists()


# --- status, from the logs only --------------------------------------------------------------------------

def _attempt(job: str, task: int, n: int) -> str:
    return f"shardprep: task {task} = array element {job}_{task}, attempt {n}, on n1 at 2026-01-01T00:00:0{n}\n"


def test_status_shows_attempts_and_a_task_that_gave_up(tmp_path, sample_tokenizer):
    out = planned_with_slurm_record(tmp_path, sample_tokenizer, SlurmOptions(max_requeues=2).to_dict(), "55")
    stop = "shardprep-task-exit: task={t} status=75\nshardprep: requeueing 55_{t} (attempt {n} of at most 3)\n"
    logs = out / "logs"
    (logs / "55_1.out").write_text(_attempt("55", 1, 1) + stop.format(t=1, n=2) + _attempt("55", 1, 2)
                                   + stop.format(t=1, n=3) + _attempt("55", 1, 3)
                                   + "shardprep-task-exit: task=1 status=75\n"
                                   + "shardprep-task-gave-up: task=1 attempts=3 max_requeues=2\n"
                                   + f"shardprep: task 1 reached its time limit on attempt 3 of 3 ...: {ADVICE}\n")
    (logs / "55_2.out").write_text(_attempt("55", 2, 1) + stop.format(t=2, n=2) + _attempt("55", 2, 2))

    proc = run_cli("status", out, check=5, env={"PATH": os.path.dirname(sys.executable)})   # no Slurm tools
    assert "failed:        1  [1]" in proc.stdout
    assert "task 1 failed (reached its time limit on all 3 attempt(s): raise --time or use smaller tasks " \
           "(--target-task-bytes); element 55_1, attempt 3 of 3, log logs/55_1.out)" in proc.stdout
    assert "requeued: task 1 attempt 3 of 3, task 2 attempt 2 of 3" in proc.stdout
    assert ADVICE in proc.stdout                                        # the log tail carries the full advice
    status = orjson.loads(run_cli("status", out, "--json", check=5,
                                  env={"PATH": os.path.dirname(sys.executable)}).stdout)["slurm"]
    assert status["failed"] == [1]
    assert status["tasks"]["1"]["attempts"] == 3 and status["tasks"]["1"]["max_attempts"] == 3
    assert status["tasks"]["2"]["attempts"] == 2 and status["tasks"]["0"]["attempts"] == 0


def test_a_submitit_log_that_timed_out_too_many_times_reads_as_given_up(tmp_path):
    start = "submitit INFO (2026-01-01 00:00:00,000) - Starting with JobEnvironment(job_id=8_0, hostname=n1)\n"
    log = tmp_path / "8_0_0_log.out"
    log.write_text(start + "submitit WARNING (...) - Caught signal SIGUSR2 on n1: this job is timed-out.\n" + start
                   + "submitit INFO (...) - Job not requeued because: timed-out too many times.\n"
                   + "submitit ERROR (...) - Submitted job triggered an exception\n")
    assert read_task_log(log) == LogSummary(status=1, attempts=2, gave_up=True)


# --- live Slurm: USR1 (what Slurm sends --signal-seconds before the limit) on every attempt ---------------

@pytest.fixture(scope="module")
def slow_corpus(tmp_path_factory) -> Path:
    """One ~7 MB file: with the hf backend on one CPU its task runs for seconds, long enough to interrupt."""
    d = tmp_path_factory.mktemp("slow")
    write_slow_text(d / "big.txt")
    return d


def _wait_until(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slurm
@pytest.mark.slow
def test_live_task_stopped_at_every_attempt_gives_up_after_the_cap(tmp_path, slurm_cluster, slow_corpus,
                                                                 sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", slow_corpus, "-o", out, "-t", sample_tokenizer,
                   "--backend", "hf", "--chunk-tokens", "2000", "--time", "5", "--signal-seconds", "30",
                   "--mem", "500M", "--max-requeues", "1")
    array_id, finalize_id = submitted_job_ids(proc.stdout)
    log = out / "logs" / f"{array_id}_0.out"
    for attempt in (1, 2):
        # mid-write in this attempt: its start line is logged and its temporary shard exists
        _wait_until(lambda attempt=attempt: f"attempt {attempt}," in (log.read_text() if log.exists() else "")
                    and list(out.glob(".shard-00000.tar.*.tmp")), f"attempt {attempt} to write its shard")
        assert not (out / "shard-00000.json").exists(), "the task finished before it could be interrupted"
        subprocess.run(["scancel", "--signal=USR1", "--batch", f"{array_id}_0"], check=True)
        _wait_until(lambda attempt=attempt: log.read_text().count("shardprep-task-exit: task=0 status=75") == attempt,
                    f"attempt {attempt} to stop at a safe point")
    wait_for_jobs([array_id, finalize_id], timeout=150)

    text = log.read_text()
    assert text.count("shardprep: task 0 = array element") == 2                 # not requeued a third time
    assert f"requeueing {array_id}_0 (attempt 2 of at most 2)" in text
    assert "shardprep-task-gave-up: task=0 attempts=2 max_requeues=1" in text and ADVICE in text
    assert queue_states([array_id]).get(f"{array_id}_0") in (None, "FAILED")  # exit 5 (or already forgotten)
    assert not (out / "shard-00000.tar").exists() and not list(out.glob(".shard-00000.*"))
    assert not (out / "index.json").exists()                                   # finalize never ran
    status = run_cli("status", out, check=5)
    assert "failed:        1  [0]" in status.stdout and "reached its time limit on all 2 attempt(s)" in status.stdout
    assert "attempt 2 of 2" in status.stdout
    as_json = orjson.loads(run_cli("status", out, "--json", check=5).stdout)["slurm"]
    assert as_json["failed"] == [0] and as_json["tasks"]["0"]["attempts"] == 2
