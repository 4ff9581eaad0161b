"""The whole job's progress (``job.progress``): throughput so far and the ETA of the job as a whole, the
same numbers in ``status`` (text and --json) and ``report --json``.

Unit tests feed synthetic sidecars and logs and check exact numbers; the CLI tests run a real local job,
then make it incomplete (a shard and its sidecar removed, its log cut to a start line: a running task)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson
import pytest
from helpers import run_cli
from report_helpers import read_json, task_input_bytes, write_corpus

from shardprep.job.logs import parse_task_log, read_task_log, read_task_logs
from shardprep.job.progress import activity, estimate

T0 = "2026-01-02 03:04:05"
EPOCH0 = time.mktime(time.strptime(T0, "%Y-%m-%d %H:%M:%S"))    # logs are in local time
PLANNED = [100, 200, 300, 400]


@dataclass(frozen=True)
class Done:
    tokens: int
    elapsed_s: float | None


def stamp(seconds: float) -> str:
    """The log timestamp ``seconds`` after T0 (``logging``'s asctime: local time, milliseconds)."""
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(EPOCH0 + whole)) + f",{millis:03d}"


def task_log(task: int, start: float, end: float | None = None, failed: bool = False) -> str:
    text = f"{stamp(start)} INFO shardprep.job.task: task {task}: /d/f{task}.txt[0:None]\n"
    if end is not None:
        word = "failed: bad input" if failed else "done: 1 documents"
        text += f"{stamp(end)} INFO shardprep.job.task: task {task} {word}\n"
    return text


def logs_of(**texts: str) -> dict:
    return {int(k[1:]): parse_task_log(int(k[1:]), v) for k, v in texts.items()}


DONE = {0: Done(50, 2.0), 1: Done(100, 3.0)}
LOGS = logs_of(t0=task_log(0, 0.0, 2.5), t1=task_log(1, 1.0, 5.0), t2=task_log(2, 5.5))


def test_running_job_rate_and_eta_from_wall_time_since_the_first_start():
    running, pending = activity(DONE, LOGS, None)
    assert (running, pending) == ([2], 0)
    p = estimate(4, PLANNED, DONE, LOGS, EPOCH0 + 10.0, running=running, pending=pending)
    assert (p.tasks, p.done, p.running, p.input_bytes, p.done_bytes, p.tokens) == (4, 2, (2,), 1000, 300, 150)
    assert p.started_at == pytest.approx(EPOCH0) and p.finished_at is None
    assert p.elapsed_s == pytest.approx(10.0)
    assert p.work_done == pytest.approx(0.3)
    assert p.input_bytes_per_s == pytest.approx(30.0)        # 300 planned bytes done in 10 s of wall time
    assert p.tokens_per_s == pytest.approx(15.0)
    assert p.tasks_per_min == pytest.approx(12.0)
    assert p.task_s == pytest.approx(5.0) and p.parallelism == pytest.approx(0.5)
    assert p.eta_s == pytest.approx(700 / 30.0)              # 700 bytes left at 30 B/s
    assert "700 B of input left at 30 B/s" in p.eta_basis and "1 running" in p.eta_basis
    d = p.to_dict()
    assert d["eta_s"] == p.eta_s and d["input_bytes_per_s"] == p.input_bytes_per_s and d["running"] == [2]


@dataclass
class Queue:
    """The Slurm view as the estimate reads it (``executor.slurm.state.SlurmView.ids``)."""

    by_state: dict[str, list[int]]

    def ids(self, state: str) -> list[int]:
        return self.by_state.get(state, [])


def test_slurm_pending_tasks_keep_the_job_active():
    running, pending = activity(DONE, {}, Queue({"running": [], "pending": [2, 3]}))
    logs = logs_of(t0=task_log(0, 0.0, 2.5), t1=task_log(1, 1.0, 5.0))
    p = estimate(4, PLANNED, DONE, logs, EPOCH0 + 20.0, running=running, pending=pending)
    assert (p.running, p.pending, p.elapsed_s) == ((), 2, pytest.approx(20.0))   # the queue wait counts
    assert p.eta_s == pytest.approx(700 / 15.0) and "0 running, 2 pending" in p.eta_basis


def test_stopped_job_has_throughput_until_its_last_end_and_no_eta():
    logs = logs_of(t0=task_log(0, 0.0, 2.5), t1=task_log(1, 1.0, 5.0), t2=task_log(2, 5.5, 6.0, failed=True))
    running, pending = activity(DONE, logs, None)
    p = estimate(4, PLANNED, DONE, logs, EPOCH0 + 1000.0, running=running, pending=pending)
    assert running == [] and p.elapsed_s == pytest.approx(6.0)   # the failure's end: the last activity
    assert p.input_bytes_per_s == pytest.approx(50.0)
    assert p.eta_s is None and "nothing running or pending" in p.eta_basis


def test_complete_job_ends_at_its_last_task_and_first_attempts_count():
    logs = logs_of(t0=task_log(0, 0.0, 1.0) + task_log(0, 2.0, 4.0),    # requeued: two attempts
                   t1=task_log(1, 1.0, 5.0), t2=task_log(2, 3.0, 7.0), t3=task_log(3, 4.0, 8.0))
    assert logs[0].first_started == pytest.approx(EPOCH0) and logs[0].started == pytest.approx(EPOCH0 + 2)
    done = {t: Done(10 * (t + 1), 1.0) for t in range(4)}
    p = estimate(4, PLANNED, done, logs, EPOCH0 + 99.0, running=[], pending=0)
    assert p.finished_at == pytest.approx(EPOCH0 + 8.0) and p.elapsed_s == pytest.approx(8.0)
    assert (p.eta_s, p.eta_basis, p.work_done) == (0.0, "every task is done", 1.0)
    assert p.input_bytes_per_s == pytest.approx(125.0) and p.tasks_per_min == pytest.approx(30.0)


@pytest.mark.parametrize("done, logs, planned, why", [
    ({}, LOGS, PLANNED, "no task is done yet"),
    (DONE, {}, PLANNED, "no task logs"),
    (DONE, LOGS, [], "planned input of the done tasks is unknown"),
])
def test_no_eta_says_why(done, logs, planned, why):
    p = estimate(4, planned, done, logs, EPOCH0 + 10.0, running=[2], pending=0)
    assert p.eta_s is None and why in p.eta_basis
    if not logs:
        assert p.elapsed_s is None and p.tokens_per_s is None and p.input_bytes_per_s is None


def test_a_long_log_is_read_as_its_first_stamp_and_its_tail(tmp_path):
    """A packed task's first line can list thousands of inputs: status reads only a bounded tail."""
    inputs = ", ".join(f"/d/f{i:05d}.txt[0:None]" for i in range(5000))
    text = (f"{stamp(0.0)} INFO shardprep.job.task: task 3: {inputs}\n"
            f"{stamp(1.0)} ERROR shardprep.job.task: task 3 failed: stopped on SIGUSR1\n"
            f"{stamp(60.0)} INFO shardprep.job.task: task 3: {inputs}\n"
            f"{stamp(61.0)} INFO shardprep.job.task: task 3: backend {{'name': 'hf'}}, 1 thread(s)\n"
            f"{stamp(65.0)} INFO shardprep.job.task: task 3 done: 7 documents\n")
    (tmp_path / "task-00003.log").write_text(text)
    (tmp_path / "task-00004.log").write_text(task_log(4, 70.0))
    (tmp_path / "4_7.out").write_text("not a task log")
    whole = read_task_log(tmp_path / "task-00003.log", 3)
    tail = read_task_log(tmp_path / "task-00003.log", 3, tail_bytes=4096)
    assert len(text) > 2 * 4096
    assert (whole.first_started, whole.ended, whole.status, whole.attempts) == (
        pytest.approx(EPOCH0), pytest.approx(EPOCH0 + 65), "done", 2)
    assert (tail.first_started, tail.ended, tail.status) == (whole.first_started, whole.ended, "done")
    assert tail.started == pytest.approx(EPOCH0 + 61)     # the tail starts inside the long line
    logs = read_task_logs(tmp_path, 4096)
    assert sorted(logs) == [3, 4] and logs[4].status == "running"
    assert read_task_logs(tmp_path / "absent") == {}


# --- the CLI: status and report on a real local job -------------------------------------------------------
@pytest.fixture(scope="module")
def job(tmp_path_factory, sample_tokenizer):
    tmp = tmp_path_factory.mktemp("progress")
    out = tmp / "out"
    run_cli("submit", "--one-file-per-task", "--executor", "local", "--workers", "2", "--no-progress",
            "--backend", "hf", "--input", write_corpus(tmp / "raw"), "--output", out, "--tokenizer", sample_tokenizer)
    return out


def status_json(out, check=True) -> dict:
    return orjson.loads(run_cli("status", out, "--json", check=check).stdout)


def log_times(out) -> list[tuple[float, float]]:
    """(first line's time, last line's time) of every task log, read here without shardprep's parser."""
    def epoch(line: str) -> float:
        return time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000

    texts = [p.read_text().splitlines() for p in sorted((out / "logs").glob("task-*.log"))]
    assert len(texts) == 4 and all(" done: " in lines[-1] for lines in texts)
    return [(epoch(lines[0]), epoch(lines[-1])) for lines in texts]


def test_status_of_a_finished_job_shows_throughput_and_agrees_with_report(job):
    s = status_json(job)
    p, times = s["progress"], log_times(job)
    planned = [task_input_bytes(job, t) for t in range(4)]
    assert (p["tasks"], p["done"], p["running"], p["work_done"], p["eta_s"]) == (4, 4, [], 1.0, 0.0)
    assert p["input_bytes"] == p["done_bytes"] == sum(planned) == read_json(job / "job.json")["summary"]["input_bytes"]
    assert p["tokens"] == s["totals"]["tokens"]
    assert p["started_at"] == pytest.approx(min(a for a, _ in times))
    assert p["finished_at"] == pytest.approx(max(b for _, b in times))
    assert p["elapsed_s"] == pytest.approx(p["finished_at"] - p["started_at"])
    assert p["input_bytes_per_s"] == pytest.approx(sum(planned) / p["elapsed_s"])
    assert p["tokens_per_s"] == pytest.approx(p["tokens"] / p["elapsed_s"])
    assert p["tasks_per_min"] == pytest.approx(4 * 60 / p["elapsed_s"])
    text = run_cli("status", job).stdout
    assert "progress: 100.0% of the planned input" in text and "throughput so far:" in text
    assert "tasks/min" in text and "ETA: done" in text
    report = orjson.loads(run_cli("report", job, "--json").stdout)["progress"]
    assert {k: report[k] for k in p} == p


def test_incomplete_job_with_a_running_task_shows_an_eta(job, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(job, out)
    for name in ("index.json", "shard-00003.tar", "shard-00003.json"):
        (out / name).unlink()
    log = out / "logs" / "task-00003.log"
    log.write_text(log.read_text().splitlines()[0] + "\n")       # started, no end line yet: running
    s = status_json(out, check=5)
    p = s["progress"]
    planned = [task_input_bytes(out, t) for t in range(4)]
    assert (p["done"], p["running"], p["pending"], p["done_bytes"]) == (3, [3], 0, sum(planned[:3]))
    assert p["elapsed_s"] == pytest.approx(s["generated_at"] - p["started_at"])     # still going: up to now
    rate = sum(planned[:3]) / p["elapsed_s"]
    assert p["input_bytes_per_s"] == pytest.approx(rate)
    assert p["eta_s"] == pytest.approx(planned[3] / rate) and "1 running" in p["eta_basis"]
    text = run_cli("status", out, check=5).stdout
    assert "ETA: ~" in text and "of input left" in text
    report = orjson.loads(run_cli("report", out, "--json").stdout)
    r = report["progress"]
    assert r["elapsed_s"] == pytest.approx(report["generated_at"] - r["started_at"])
    assert r["eta_s"] == pytest.approx(planned[3] / (sum(planned[:3]) / r["elapsed_s"]))
    now_free = ("tasks", "done", "running", "pending", "input_bytes", "done_bytes", "tokens", "task_s",
                "started_at", "finished_at", "work_done")
    assert {k: r[k] for k in now_free} == {k: p[k] for k in now_free}
    # no log for it any more (as if never started) and nothing running: no ETA, and the numbers agree
    log.unlink()
    s = status_json(out, check=5)
    assert s["progress"]["eta_s"] is None and "nothing running" in s["progress"]["eta_basis"]
    r = orjson.loads(run_cli("report", out, "--json").stdout)["progress"]
    assert {k: r[k] for k in s["progress"]} == s["progress"]
    assert "ETA: none (nothing running or pending" in run_cli("status", out, check=5).stdout
