"""Nothing is lost or half-written when a task dies: SIGKILL mid-write leaves no final-named shard and a
re-run is byte-identical; the pre-timeout signal (SIGUSR1) stops at a safe point with exit 75."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli, write_slow_text

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_REQUEUE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    return write_slow_text(tmp_path_factory.mktemp("big") / "big.txt")


def _start_task(out: Path) -> subprocess.Popen:
    """The task as a child with default signal dispositions (a background shell may have ignored SIGINT)."""
    return subprocess.Popen([sys.executable, "-m", "shardprep", "run-task", str(out), "--task-id", "0",
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_partial(out: Path, proc: subprocess.Popen, timeout: float = 60) -> Path:
    """Until the task writes its temporary shard: it is mid-write from then until its final rename, and its
    stop handlers are installed (they come first), so a signal now interrupts real work."""
    deadline = time.monotonic() + timeout
    while not (temps := list(out.glob(".shard-00000.tar.*.tmp"))):
        assert proc.poll() is None, f"task ended before it could be interrupted: {proc.communicate()}"
        assert time.monotonic() < deadline, "no partial shard appeared"
        time.sleep(0.01)
    return temps[0]


def test_sigkill_mid_write_then_rerun_is_byte_identical(tmp_path, big_input, sample_tokenizer):
    ref = tmp_path / "ref"
    run_cli("submit", "-i", big_input, "-o", ref, "-t", sample_tokenizer, "--chunk-tokens", "2000", "--backend", "hf", "--no-progress")

    out = tmp_path / "killed"
    run_cli("plan", "-i", big_input, "-o", out, "-t", sample_tokenizer, "--chunk-tokens", "2000", "--backend", "hf")
    proc = _start_task(out)
    partial = _wait_for_partial(out, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert partial.exists()  # the dead task's temporary file ...
    assert not (out / "shard-00000.tar").exists() and not (out / "shard-00000.json").exists()  # ... no final name
    status = run_cli("status", out, check=5)
    assert "missing:  1  [0]" in status.stdout

    run_cli("submit", "--resume", out, "--no-progress")
    assert not partial.exists()  # stale temporary removed by the re-run
    assert (out / "shard-00000.tar").read_bytes() == (ref / "shard-00000.tar").read_bytes()
    run_cli("verify", out)


def test_pre_timeout_signal_stops_safely_with_requeue_code(tmp_path, big_input, sample_tokenizer):
    out = tmp_path / "o"
    run_cli("plan", "-i", big_input, "-o", out, "-t", sample_tokenizer, "--chunk-tokens", "2000", "--backend", "hf")
    proc = _start_task(out)
    _wait_for_partial(out, proc)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_REQUEUE, err
    assert "stopped on SIGUSR1 at a safe point" in err
    assert not list(out.glob(".shard-*")) and not (out / "shard-00000.tar").exists()
    # requeued: the same command completes the task
    run_cli("run-task", out, "--task-id", "0")
    run_cli("finalize", out)
    run_cli("verify", out)


def test_final_shard_without_sidecar_is_redone(tmp_path, sample_tokenizer):
    """A task killed between renaming its shard and writing its sidecar left an unconfirmed shard."""
    f = tmp_path / "in.txt"
    f.write_text("\n".join(sample_documents(50)) + "\n")
    out = tmp_path / "o"
    run_cli("submit", "-i", f, "-o", out, "-t", sample_tokenizer, "--no-progress")
    good = (out / "shard-00000.tar").read_bytes()
    os.unlink(out / "shard-00000.json")
    (out / "shard-00000.tar").write_bytes(good[:1000])  # looks like a shard, is not confirmed
    assert "[0]" in run_cli("status", out, check=5).stdout
    run_cli("submit", "--resume", out, "--no-progress")
    assert (out / "shard-00000.tar").read_bytes() == good
