"""An input that changes while its task reads it (issue 13): the task is stopped mid-read with SIGSTOP, the
file appended to or truncated, and the task must fail naming the input, leaving no shard.  A task process of
its own, watched through /proc and signalled: the e2e tier."""

from __future__ import annotations

import functools
import gzip
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.errors import EXIT_INPUT


def _default_sigint() -> None:
    """Children start with SIGINT's default action even when pytest runs in a background shell."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _fd_of(pid: int, path: Path) -> int | None:
    """The descriptor under which process ``pid`` has ``path`` open (Linux /proc), or None."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == str(path):
                return int(fd.name)
        except OSError:  # closed meanwhile
            continue
    return None


def _fd_position(pid: int, fd: int) -> int:
    for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("pos:"):
            return int(line.split()[1])
    raise AssertionError(f"no position in /proc/{pid}/fdinfo/{fd}")


@functools.cache
def _big_text(mib: int) -> bytes:
    """Text of hard-to-compress random words (so a .gz stays nearly as big), one document per line: the
    same for every case, drawn once."""
    rng = random.Random(5)
    return "".join(" ".join("".join(rng.choices(string.ascii_letters, k=rng.randint(2, 9))) for _ in range(170)) + "\n"
                   for _ in range(mib * 1024)).encode()


def _write_big(path: Path, mib: int) -> None:
    path.write_bytes(gzip.compress(_big_text(mib), 1) if path.suffix == ".gz" else _big_text(mib))


def _stop_mid_read(proc: subprocess.Popen, path: Path, timeout: float = 120) -> None:
    """SIGSTOP the task once it has ``path`` open with unread bytes left (so the change lands mid-read)."""
    deadline = time.monotonic() + timeout
    while (fd := _fd_of(proc.pid, path)) is None:
        assert proc.poll() is None, f"task ended before it opened {path}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"task never opened {path}"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGSTOP)
    assert _fd_position(proc.pid, fd) < path.stat().st_size, "task read the whole input before it was stopped"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux /proc to see the task's read position")
@pytest.mark.parametrize("name,change", [("in.txt", "append"), ("in.txt", "truncate"), ("in.txt.gz", "append")])
def test_input_changed_while_its_task_reads_it_fails_the_task(tmp_path, sample_tokenizer, name, change):
    path = tmp_path / name
    _write_big(path, 5)      # the task reads (and prefetches) 1 MiB blocks: stopped long before the end
    out = tmp_path / "o"
    run_cli("plan", "--one-file-per-task", "-i", path, "-o", out, "-t", sample_tokenizer, "--backend", "hf")
    proc = subprocess.Popen([sys.executable, "-m", "shardprep", "run-task", str(out), "--task-id", "0", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        _stop_mid_read(proc, path)
        if change == "append":
            with open(path, "ab") as f:
                f.write(gzip.compress(b"appended later\n") if name.endswith(".gz") else b"appended later\n")
        else:
            os.truncate(path, path.stat().st_size // 2)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == EXIT_INPUT, err
    assert f"input {path} changed while its task was reading it" in err
    assert not (out / "shard-00000.tar").exists() and not (out / "shard-00000.json").exists()
    assert not list(out.glob(".shard-*"))
