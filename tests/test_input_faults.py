"""Inputs that misbehave around a job (issue 13): symlink loops, files that change while their task runs,
suspicious (binary) content, and the exit codes bad input gets from every entry point.  Each test drives
the CLI as a subprocess and fails on the code before the fix."""

from __future__ import annotations

from pathlib import Path

import orjson
from helpers import run_cli

from shardprep.errors import EXIT_INPUT


def _submit(inp, out, tok, *extra, check=True):
    return run_cli("submit", "-i", inp, "-o", out, "-t", tok, "--no-progress", *extra, check=check)


def _planned_paths(out: Path) -> list[str]:
    return [i["path"] for i in orjson.loads((out / "job.json").read_bytes())["inputs"]]


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
