"""A full output file system (issue 13 item 8): the temporary shard is removed (the disk is not left at
100%) and the error is one line naming the file and the space left, exit 8, from `submit` and `run-task`
alike.  Runs on a real tmpfs of 1-2 MiB; skipped where this process cannot mount one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_ENVIRONMENT


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


FULL_SHARD_FS_BYTES = 1 << 20


def test_disk_full_removes_the_temporary_and_names_file_and_space(tmp_path, mount_tmpfs, sample_tokenizer):
    small_fs = mount_tmpfs(FULL_SHARD_FS_BYTES)
    text = tmp_path / "big.txt"
    text.write_text("\n".join(sample_documents(4000, seed=3) * 3) + "\n")   # a shard of ~1.6 MB
    out = small_fs / "out"
    proc = run_cli("submit", "-i", text, "-o", out, "-t", sample_tokenizer, "--backend", "hf", "--no-progress",
                   check=EXIT_ENVIRONMENT)
    assert f"no space left on device writing {out / 'shard-00000.tar'} (" in proc.stderr
    assert "bytes free of" in proc.stderr and "the temporary file was removed" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(out.glob(".*.tmp")) and not (out / "shard-00000.tar").exists()
    assert _free(small_fs) > FULL_SHARD_FS_BYTES // 2     # the space is given back

    proc = run_cli("run-task", out, "--task-id", "0", check=EXIT_ENVIRONMENT)   # as a Slurm task runs it
    assert f"no space left on device writing {out / 'shard-00000.tar'}" in proc.stderr
    assert not list(out.glob(".*.tmp"))


def _fill(directory: Path) -> None:
    """Write until the file system refuses another byte."""
    with open(directory / "filler", "wb", buffering=0) as f:
        with pytest.raises(OSError):
            while True:
                f.write(b"x" * 4096)


@pytest.mark.parametrize("mode", ["flock", "exclusive"])
def test_full_disk_when_taking_the_output_lock_is_one_line_and_leaves_no_lock_file(tmp_path, small_fs, mode,
                                                                                    sample_tokenizer, monkeypatch):
    """Issue 23 item 7: plan/submit/finalize take the output lock first; on a completely full disk its owner
    record cannot be written.  One line naming the lock file (exit 8), and no empty lock file left."""
    text = tmp_path / "in.txt"
    text.write_text("\n".join(sample_documents(50, seed=1)) + "\n")
    out = small_fs / "out"
    run_cli("plan", "-i", text, "-o", out, "-t", sample_tokenizer)
    _fill(small_fs)
    # the lock reads its mode at each acquisition (storage.lock._lock_mode): the CLI runs in this process
    monkeypatch.setenv("SHARDPREP_LOCK_MODE", mode)
    for args in (("plan", "-i", text, "-o", out, "-t", sample_tokenizer),
                 ("submit", "-i", text, "-o", out, "-t", sample_tokenizer, "--no-progress"),
                 ("submit", "--resume", out, "--no-progress"), ("finalize", out)):
        proc = run_cli(*args, check=EXIT_ENVIRONMENT)
        assert f"no space left on device writing {out / '.shardprep.lock'} (" in proc.stderr, proc.stderr
        assert "no lock file was left behind" in proc.stderr and "Traceback" not in proc.stderr
        assert not (out / ".shardprep.lock").exists()
    new = small_fs / "new"
    proc = run_cli("plan", "-i", text, "-o", new, "-t", sample_tokenizer, check=EXIT_ENVIRONMENT)
    assert "no space left on device" in proc.stderr and "Traceback" not in proc.stderr
    assert not new.exists()                           # the directory it created is removed again
