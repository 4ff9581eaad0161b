"""Which files are inputs (issue 23 items 6 and 8): shardprep's own outputs never are, however they are
reached (a directory walk, a glob), and a file whose name is not valid UTF-8 is planned and read exactly
(the very same file), through the real CLI."""

from __future__ import annotations

from pathlib import Path

from helpers import run_cli

from shardprep.demo_data import sample_documents


def _corpus(directory: Path, files: int = 3, docs: int = 120) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (directory / f"part-{i}.jsonl").write_text(
            "".join('{"text": "%s"}\n' % t.replace('"', "'") for t in sample_documents(docs, seed=i)))
    return directory


def test_output_inside_an_input_directory_is_never_an_input(tmp_path, sample_tokenizer):
    data = _corpus(tmp_path / "data")
    out = data / "shards"
    run_cli("submit", "-i", data, "-o", out, "-t", sample_tokenizer, "--no-progress")
    # the same command again: plan/tasks.jsonl (and the shards) are not inputs, so it is the same plan
    again = run_cli("submit", "-i", data, "-o", out, "-t", sample_tokenizer, "--no-progress")
    assert "to run: none" in again.stdout
    assert again.stderr.count(f"left out 1 shardprep output directory (never inputs): {out}") == 1
    # a glob reaching into the output and an output directory named explicitly
    glob = run_cli("plan", "-i", f"{data}/**/*.jsonl", "-o", out, "-t", sample_tokenizer)
    assert "nothing (all done)" in glob.stdout
    alone = run_cli("plan", "-i", out, "-o", tmp_path / "other", "-t", sample_tokenizer, check=3)
    assert f"no input files found in {out}" in alone.stderr and "Traceback" not in alone.stderr
