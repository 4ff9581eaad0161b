"""Inputs that misbehave around a job (issue 13): symlink loops, files that change while their task runs,
suspicious (binary) content, and the exit codes bad input gets from every entry point.  Each test drives
the CLI as a subprocess and fails on the code before the fix."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import orjson
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
