"""Issue 31, item 8: one encoding worker of a task run with ``--threads N`` (``job/parallel.py``, the
workers held by ``job/slots.py``'s ``Workers``) killed from outside.

Before: a ``ConnectionResetError`` traceback (exit 1), and stopping the workers waited up to 2 s for each
in turn.  Now: one line naming the task, the worker's pid and the signal, exit 5 (as a killed local
worker), no shard under a final name, and ``submit --resume`` reruns the task byte-identical; stopping
takes one deadline for all the workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from helpers import run_cli, write_slow_text

from shardprep.errors import EXIT_INCOMPLETE
from shardprep.job.slots import STOP_GRACE, Slots, Workers, stop_processes


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    """~23 MB of text: pieces for three workers, and long enough to kill one mid-task."""
    return write_slow_text(tmp_path_factory.mktemp("big") / "big.txt", repeats=20)


@pytest.mark.slow
def test_a_killed_encoding_worker_fails_its_task_in_one_line_and_a_resume_is_byte_identical(
        tmp_path, big_input, sample_tokenizer):
    pytest.importorskip("gigatoken")     # tasks use encoding workers with a fast backend only
    ref = tmp_path / "ref"
    run_cli("submit", "-i", big_input, "-o", ref, "-t", sample_tokenizer, "--no-progress")
    out = tmp_path / "killed"
    run_cli("plan", "-i", big_input, "-o", out, "-t", sample_tokenizer)
    proc = subprocess.Popen([sys.executable, "-m", "shardprep", "run-task", str(out), "--task-id", "0",
                             "--threads", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    task = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while len(workers := task.children()) < 3:
        assert proc.poll() is None, f"the task ended before its workers started: {proc.communicate()}"
        assert time.monotonic() < deadline, "no encoding workers appeared"
        time.sleep(0.01)
    victim = workers[0].pid
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)

    assert proc.returncode == EXIT_INCOMPLETE, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert f"task 0 (encoding worker pid {victim}) was killed by SIGKILL" in errors[0]
    assert not (out / "shard-00000.tar").exists() and not (out / "shard-00000.json").exists()
    assert not list(out.glob(".shard-*")), "a temporary shard was left behind"
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers), "a worker outlived its task"

    run_cli("submit", "--resume", out, "--no-progress")
    assert (out / "shard-00000.tar").read_bytes() == (ref / "shard-00000.tar").read_bytes()


# --- stopping the workers: one deadline for all ------------------------------------------------------------
def _stubborn(conn: object, slots: object) -> None:
    """A worker that neither reads its pipe nor lets SIGTERM end it (as one busy with a large piece)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(60)


def _workers(n: int) -> Workers:
    return Workers(n, _stubborn, (), Slots(1, 8, 8, np.dtype(np.uint16)), task=0)


@pytest.mark.parametrize("finished", [True, False])
def test_stopping_four_stubborn_workers_takes_one_deadline_not_four(finished):
    pool = _workers(4)
    started = time.monotonic()
    pool.close(finished)
    took = time.monotonic() - started
    assert not any(p.is_alive() for p in pool.procs)
    assert all(p.exitcode == -signal.SIGKILL for p in pool.procs)
    if finished:      # told to leave, then killed at one shared deadline (one at a time: 4 x STOP_GRACE)
        assert STOP_GRACE * 0.9 <= took < STOP_GRACE * 2.5, took
    else:             # a stop or an error: killed at once
        assert took < STOP_GRACE, took


class _Fake:
    """A process that records what is done to it."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls, self.alive = name, calls, True

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.calls.append(f"kill {self.name}")
        self.alive = False

    def join(self, timeout: float | None = None) -> None:
        self.calls.append(f"join {self.name}")


def test_every_worker_is_signalled_before_any_is_waited_for():
    calls: list[str] = []
    stop_processes([_Fake(n, calls) for n in "abcd"], grace=0.0)
    assert calls == ["kill a", "kill b", "kill c", "kill d", "join a", "join b", "join c", "join d"]
