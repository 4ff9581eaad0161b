"""Inputs that misbehave around a job (issue 13): symlink loops, files that change while their task runs,
suspicious (binary) content, and the exit codes bad input gets from every entry point.  Each test drives
the CLI as a subprocess and fails on the code before the fix."""

from __future__ import annotations

import gzip
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import plan_inputs, run_cli

from shardprep.errors import EXIT_INPUT


def _submit(inp, out, tok, *extra, check=True):
    return run_cli("submit", "--one-file-per-task", "-i", inp, "-o", out, "-t", tok, "--no-progress", *extra, check=check)


def _default_sigint() -> None:
    """Children start with SIGINT's default action even when pytest runs in a background shell."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _planned_paths(out: Path) -> list[str]:
    return [i.path for i in plan_inputs(out)]


# ------------------------------------------------------------------------------------------ symlinks

def _looping_tree(root: Path) -> Path:
    d = root / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("one document\nanother one\n")
    (d / "sub" / "b.txt").write_text("a third document\n")
    (d / "sub" / "up").symlink_to("..")          # a loop: d/sub/up/sub/up/...
    (d / "alias.txt").symlink_to("a.txt")        # the same file under a second name
    return d


def test_symlink_loop_is_not_followed_and_each_file_is_planned_once(tmp_path, sample_tokenizer):
    d = _looping_tree(tmp_path)
    out = tmp_path / "o"
    proc = _submit(d, out, sample_tokenizer)
    assert _planned_paths(out) == [str(d / "a.txt"), str(d / "sub" / "b.txt")]
    assert orjson.loads((out / "index.json").read_bytes())["totals"]["documents"] == 3
    assert f"symlink loop(s) not followed: {d / 'sub' / 'up'} -> {d}" in proc.stderr
    assert f"{d / 'alias.txt'} (same as {d / 'a.txt'})" in proc.stderr

    # a recursive glob follows links as well: same plan, same warning
    out2 = tmp_path / "o2"
    proc = _submit(f"{d}/**/*.txt", out2, sample_tokenizer)
    assert _planned_paths(out2) == _planned_paths(out)
    assert "symlink loop(s) not followed" in proc.stderr


def test_symlink_loop_is_an_input_error_under_strict(tmp_path, sample_tokenizer):
    d = _looping_tree(tmp_path)
    proc = _submit(d, tmp_path / "o", sample_tokenizer, "--strict", check=EXIT_INPUT)
    assert f"symlink loop in the inputs: {d / 'sub' / 'up'} -> {d} (--strict)" in proc.stderr
    assert not (tmp_path / "o" / "job.json").exists()


# ------------------------------------------------------------------------ inputs changing mid-task

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


def _write_big(path: Path, mib: int) -> None:
    """Text of hard-to-compress random words (so a .gz stays nearly as big), one document per line."""
    rng = random.Random(5)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        for _ in range(mib * 1024):
            f.write(" ".join("".join(rng.choices(string.ascii_letters, k=rng.randint(2, 9)))
                             for _ in range(170)) + "\n")


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
    _write_big(path, 12)     # the task reads (and prefetches) 1 MiB blocks: stopped long before the end
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


# ------------------------------------------------------------------------------ suspicious content

def test_binary_or_utf16_input_is_named_in_a_warning_by_submit_and_doctor(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "junk.txt").write_bytes(random.Random(0).randbytes(20_000))          # a binary file named .txt
    (raw / "notes.txt").write_text("plain notes, written in UTF-16\n" * 50, encoding="utf-16")
    (raw / "real.txt").write_text("a real document\nand another one\n\nafter a blank line\n")
    out = tmp_path / "o"
    proc = _submit(raw, out, sample_tokenizer)                                   # warned, not fatal
    for name in ("junk.txt", "notes.txt"):
        assert f"input {raw / name} looks binary or mis-encoded" in proc.stderr
    assert "NUL byte(s)" in proc.stderr and "% of its" in proc.stderr
    sidecars = {Path(s["inputs"][0]["path"]).name: s
                for s in (orjson.loads(p.read_bytes()) for p in sorted(out.glob("shard-*.json")))}
    assert "looks binary or mis-encoded" in sidecars["junk.txt"]["warnings"][0]
    assert "warnings" not in sidecars["real.txt"]          # sidecars of normal inputs are unchanged
    assert "looks binary" in (out / "logs" / "task-00000.log").read_text()

    proc = run_cli("doctor", "-t", sample_tokenizer, "-o", tmp_path / "d", "-i", raw, "--json", check=False)
    report = orjson.loads(proc.stdout)
    (check,) = [c for c in report["checks"] if c["name"] == "input"]
    assert check["verdict"] == "warn" and "look binary or mis-encoded" in check["message"]
    assert any(str(raw / "junk.txt") in w for w in check["details"]["suspicious_inputs"])
