"""One writer per output directory (issue 13, item 7): a second submit into a directory in use is refused
with a message naming the holder, the first completes; locks of dead processes never block; the O_EXCL
fallback (file systems without flock, e.g. Lustre mounted -o noflock) judges staleness by pid."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_PLAN_CONFLICT, OutputInUseError
from shardprep.storage import lock as lockmod
from shardprep.storage.lock import LOCK_FILE, LockOwner, output_lock

HOLDER = """
import sys, time
from shardprep.storage.lock import output_lock
with output_lock(sys.argv[1], command="holder-under-test"):
    print("held", flush=True)
    time.sleep(120)
"""


def _corpus(directory: Path, files: int = 4, docs: int = 300) -> Path:
    directory.mkdir()
    for i in range(files):
        (directory / f"p{i}.txt").write_text("\n".join(sample_documents(docs, seed=40 + i)) + "\n")
    return directory


def _wait_for(condition, what: str, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _start_holder(directory: Path, env: dict | None = None) -> subprocess.Popen:
    """A separate process holding the lock of ``directory`` until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout.readline().strip() == "held"
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def no_flock(monkeypatch):
    """flock fails as on Lustre mounted -o noflock (ENOSYS): the O_EXCL lock file is used."""
    import fcntl

    def refuse(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", refuse)


# ------------------------------------------------------------------------------------ through the CLI

def test_second_submit_into_a_directory_in_use_is_refused_and_the_first_completes(tmp_path, sample_tokenizer):
    raw = _corpus(tmp_path / "raw")
    out = tmp_path / "out"
    args = ("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    first = subprocess.Popen([sys.executable, "-m", "shardprep", *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / "job.json").exists(), "the first submit to write its plan", first)
        os.kill(first.pid, signal.SIGSTOP)      # keep it mid-run, whatever the machine's speed
        second = run_cli(*args, check=EXIT_PLAN_CONFLICT)
        os.kill(first.pid, signal.SIGCONT)
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
        assert f"{out} is in use by another shardprep run" in second.stderr
        assert f"pid {first.pid} on {socket.gethostname()}" in second.stderr and "shardprep submit -i" in second.stderr
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:            # only when an assertion above failed
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    assert first.returncode == 0, err
    run_cli("verify", out)
    assert not (out / LOCK_FILE).exists()                    # released, and no leftover


def test_stale_lock_file_of_a_dead_process_is_taken_over(tmp_path, sample_tokenizer, monkeypatch):
    """With the O_EXCL lock file (forced as on a Lustre client without flock): a record of a dead pid on
    this host is stale and taken over; a live one refuses; one from another host refuses with the file
    to remove."""
    (tmp_path / "in.txt").write_text("hello world\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {"SHARDPREP_LOCK_MODE": "exclusive"}
    plan = ("plan", "-i", tmp_path / "in.txt", "-o", out, "-t", sample_tokenizer)
    # the mode is read per call: the dead and the remote owner are judged in this process; the live owner
    # (this pid) by a process of its own, as another command would meet it
    monkeypatch.setenv(lockmod.MODE_ENV, "exclusive")

    record = LockOwner(socket.gethostname(), _dead_pid(), time.time() - 600, None, "shardprep submit (killed)",
                       "exclusive", "t1")
    (out / LOCK_FILE).write_bytes(record.to_bytes())
    proc = run_cli(*plan)
    assert "took over the stale lock" in proc.stderr and "is no longer running" in proc.stderr
    assert not (out / LOCK_FILE).exists()

    live = LockOwner(socket.gethostname(), os.getpid(), time.time(), lockmod._process_start(os.getpid()),
                     "pytest", "exclusive", "t2")
    (out / LOCK_FILE).write_bytes(live.to_bytes())
    proc = run_cli(*plan, env=env, check=EXIT_PLAN_CONFLICT)
    assert f"`pytest` (pid {os.getpid()} on {socket.gethostname()}" in proc.stderr

    remote = LockOwner("other-node-17", 4242, time.time() - 7200, None, "shardprep submit", "exclusive", "t3")
    (out / LOCK_FILE).write_bytes(remote.to_bytes())
    proc = run_cli(*plan, check=EXIT_PLAN_CONFLICT)
    assert "pid 4242 on other-node-17" in proc.stderr and "2h00m ago" in proc.stderr
    assert f"if it is no longer running there, remove {out / LOCK_FILE}" in proc.stderr
    assert (out / LOCK_FILE).read_bytes() == remote.to_bytes()      # not ours to remove


def test_a_failed_plan_leaves_no_directory_behind(tmp_path, sample_tokenizer):
    proc = run_cli("plan", "-i", tmp_path / "nope.txt", "-o", tmp_path / "new" / "out", "-t", sample_tokenizer,
                   check=3)
    assert "does not exist" in proc.stderr
    assert not (tmp_path / "new" / "out").exists()


# ------------------------------------------------------------------------------------- flock (default)

def test_flock_lock_of_a_killed_holder_is_free(tmp_path):
    out = tmp_path / "out"
    holder = _start_holder(out)
    with pytest.raises(OutputInUseError, match=f"`holder-under-test` \\(pid {holder.pid} on "):
        with output_lock(out):
            pass
    holder.kill()                        # SIGKILL: no release code runs, the record stays behind
    holder.wait()
    assert orjson.loads((out / LOCK_FILE).read_bytes())["pid"] == holder.pid
    with output_lock(out):               # the kernel released the flock with the process
        assert orjson.loads((out / LOCK_FILE).read_bytes())["pid"] == os.getpid()
    assert not (out / LOCK_FILE).exists()


def test_lock_is_reentrant_in_one_process_and_waits_when_asked(tmp_path, caplog):
    out = tmp_path / "out"
    with output_lock(out):
        with output_lock(out):           # plan_job inside submit
            pass
        assert (out / LOCK_FILE).exists()
    holder = _start_holder(out)
    try:
        with caplog.at_level("INFO", logger="shardprep.storage.lock"):
            with pytest.raises(OutputInUseError):
                with output_lock(out, wait_s=0.25):    # one poll (POLL_S) is enough to wait
                    pass
        assert "waiting for" in caplog.text and "holder-under-test" in caplog.text   # it waited, then refused
    finally:
        holder.kill()
        holder.wait()
    with output_lock(out, wait_s=30):
        pass


def test_flock_honours_a_live_exclusive_record(tmp_path):
    """A node without flock holds the lock as an O_EXCL file; a node with flock must not take it."""
    out = tmp_path / "out"
    holder = _start_holder(out, env={"SHARDPREP_LOCK_MODE": "exclusive"})
    try:
        assert orjson.loads((out / LOCK_FILE).read_bytes())["mode"] == "exclusive"
        with pytest.raises(OutputInUseError, match="holder-under-test"):
            with output_lock(out):
                pass
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------- O_EXCL fallback (units)

def test_without_flock_the_lock_file_is_used_and_removed(tmp_path, no_flock):
    out = tmp_path / "out"
    with output_lock(out, command="unit"):
        record = LockOwner.from_bytes((out / LOCK_FILE).read_bytes())
        assert (record.mode, record.pid, record.command) == ("exclusive", os.getpid(), "unit")
        assert record.process_start == lockmod._process_start(os.getpid())
    assert not (out / LOCK_FILE).exists()


def test_without_flock_a_live_holder_refuses_and_its_death_frees_the_lock(tmp_path, no_flock):
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        rec = LockOwner(socket.gethostname(), child.pid, time.time(), lockmod._process_start(child.pid), "child",
                        "exclusive", "c1")
        (out / LOCK_FILE).write_bytes(rec.to_bytes())
        with pytest.raises(OutputInUseError, match=f"pid {child.pid}"):
            with output_lock(out):
                pass
    finally:
        child.kill()
        child.wait()
    with output_lock(out):
        assert LockOwner.from_bytes((out / LOCK_FILE).read_bytes()).pid == os.getpid()


def test_without_flock_a_reused_pid_is_stale(tmp_path, no_flock):
    out = tmp_path / "out"
    out.mkdir()
    # our own (live) pid, but recorded with another process start time: the holder died and the pid was reused
    rec = LockOwner(socket.gethostname(), os.getppid(), time.time(), 12345.0, "old", "exclusive", "r1")
    (out / LOCK_FILE).write_bytes(rec.to_bytes())
    assert "now belongs to another process" in lockmod.stale_reason(rec, out / LOCK_FILE)
    with output_lock(out):
        pass


def test_without_flock_an_unreadable_record_is_stale_only_when_old(tmp_path, no_flock):
    path = tmp_path / LOCK_FILE
    path.write_bytes(b"")
    assert lockmod.stale_reason(None, path) is None                      # a taker may be writing it now
    old = time.time() - lockmod.UNREADABLE_STALE_S - 5
    os.utime(path, (old, old))
    assert "unreadable" in lockmod.stale_reason(None, path)
    with output_lock(tmp_path):
        pass


def test_breaking_a_stale_lock_never_removes_a_fresh_one(tmp_path):
    """Two processes judged the same lock stale; the slower one must not delete what the faster created."""
    path = tmp_path / LOCK_FILE
    fresh = LockOwner("h", 1, time.time(), None, "winner", "exclusive", "fresh").to_bytes()
    path.write_bytes(fresh)
    lockmod._break_stale(path, b'{"the": "stale record it judged"}', "test")
    assert path.read_bytes() == fresh
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]
    lockmod._break_stale(path, fresh, "test")
    assert not path.exists()


def test_unknown_lock_mode_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDPREP_LOCK_MODE", "nfs")
    with pytest.raises(Exception, match="SHARDPREP_LOCK_MODE='nfs'"):
        with output_lock(tmp_path / "out"):
            pass
    assert not (tmp_path / "out").exists()
