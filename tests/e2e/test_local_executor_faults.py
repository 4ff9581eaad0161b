"""The local executor under signals (issue 13 items 6 and 10): workers die with a killed ``submit``, Ctrl-C
stops at once leaving only complete shards, and a killed worker is named with its task and signal.
Every test drives ``shardprep submit`` as a subprocess and acts on observable conditions (a temporary
shard on disk, the process tree), never on sleeps."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INCOMPLETE
from shardprep.storage.atomic import sha256_file

pytestmark = pytest.mark.slow
TASKS = 16
TEMP_RE = re.compile(r"^\.shard-(\d+)\.tar\.[^.]+\.(\d+)\.tmp$")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """16 inputs of ~1.4 MB: one task each, long enough (~0.5 s on one core) to be caught mid-write."""
    d = tmp_path_factory.mktemp("sixteen")
    for i in range(TASKS):
        (d / f"f{i:02d}.txt").write_text("\n".join(sample_documents(2500, seed=i) * 2) + "\n")
    return d


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_submit(corpus: Path, out: Path, tokenizer: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shardprep", "submit", "-i", str(corpus), "-o", str(out), "-t",
                             str(tokenizer), "--backend", "hf", "--no-progress", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def _temps(out: Path) -> list[Path]:
    return sorted(out.glob(".*.tmp")) if out.exists() else []


def _wait_mid_write(out: Path, proc: subprocess.Popen, timeout: float = 120) -> Path:
    """Until some task writes its temporary shard (the run is busy with real work)."""
    deadline = time.monotonic() + timeout
    while True:
        temps = [p for p in _temps(out) if TEMP_RE.match(p.name)]
        if temps:
            return temps[0]
        assert proc.poll() is None, f"submit ended before any task was writing: {proc.communicate()}"
        assert time.monotonic() < deadline, "no task ever started writing"
        time.sleep(0.01)


def _alive(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(procs: list[psutil.Process], timeout: float = 60) -> None:
    """Until none of ``procs`` runs (zombies waiting for a reaper count as gone)."""
    deadline = time.monotonic() + timeout
    while _alive(procs):
        assert time.monotonic() < deadline, f"processes still running: {_alive(procs)}"
        time.sleep(0.05)


@pytest.fixture
def family():
    """The test's ``submit`` process tree, recorded by the test; anything still alive at teardown (a
    regression) is killed so one failure does not leave orphans behind for the rest of the suite."""
    procs: list[psutil.Process] = []
    yield procs
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _only_complete_shards(out: Path) -> int:
    """No temporary file; every shard has a sidecar whose size and sha256 it matches.  Returns the count."""
    assert _temps(out) == []
    shards = sorted(out.glob("shard-*.tar"))
    for shard in shards:
        sidecar = orjson.loads(shard.with_suffix(".json").read_bytes())
        assert sidecar["bytes"] == shard.stat().st_size and sidecar["sha256"] == sha256_file(shard), shard
    return len(shards)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_a_killed_submit(tmp_path, corpus, sample_tokenizer, family, signum):
    out = tmp_path / "o"
    proc = _start_submit(corpus, out, sample_tokenizer)
    _wait_mid_write(out, proc)
    family += psutil.Process(proc.pid).children(recursive=True)
    assert len(family) >= 2, family
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    _wait_gone(family)
    assert _only_complete_shards(out) < TASKS      # they stopped; they did not finish the queue


def test_ctrl_c_stops_at_once_and_leaves_only_complete_shards(tmp_path, corpus, sample_tokenizer, family):
    out = tmp_path / "o"
    proc = _start_submit(corpus, out, sample_tokenizer)
    _wait_mid_write(out, proc)
    done_before = len(list(out.glob("shard-*.json")))
    family += psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    _wait_gone(family)
    # at most the two tasks already closing their shard may still finish: the queue is not drained
    assert _only_complete_shards(out) <= done_before + 2


def test_a_killed_worker_is_named_with_its_task_and_signal(tmp_path, corpus, sample_tokenizer, family):
    out = tmp_path / "o"
    proc = _start_submit(corpus, out, sample_tokenizer)
    temp = _wait_mid_write(out, proc)
    family += [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    task, pid = map(int, TEMP_RE.match(temp.name).groups())
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INCOMPLETE, err
    assert f"a local worker died: task {task} (worker pid {pid}) was killed by SIGKILL" in err
    assert "Traceback" not in err
    assert _only_complete_shards(out) < TASKS
