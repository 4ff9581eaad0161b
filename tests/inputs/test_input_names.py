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


def test_non_utf8_file_names_are_planned_and_read_exactly(tmp_path, sample_tokenizer):
    """Names that are not valid UTF-8 exist (a Latin-1 file system, an old archive): the plan records their
    bytes, each task opens the very same file (two names that look alike when escaped stay two files),
    the same command is the same plan again, and people see ``\\xNN``."""
    import os

    from helpers import eos_id, plan_tasks, reference_ids, shard_documents

    raw = tmp_path / "raw"
    names = [b"caf\xe9.txt", b"caf\\xe9.txt", b"d\xff/inner.txt", b"plain.txt"]      # 2: a literal backslash
    for i, name in enumerate(names):
        path = os.path.join(os.fsencode(raw), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(("\n".join(sample_documents(25, seed=10 + i)) + "\n").encode())
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    assert "done: 4 shard(s)" in proc.stdout and "Traceback" not in proc.stderr
    planned = [os.fsencode(item.input.path) for task in plan_tasks(out) for item in task.items]
    assert sorted(planned) == sorted(os.path.join(os.fsencode(raw), n) for n in names)
    texts = []
    for path in planned:
        with open(path, "rb") as f:
            texts += [t for t in f.read().decode().split("\n") if t]
    assert shard_documents(out) == reference_ids(sample_tokenizer, texts, eos_id(sample_tokenizer))
    again = run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    assert "to run: none" in again.stdout
    shown = run_cli("plan", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer).stdout
    assert f"{raw}/caf\\xe9.txt" in shown and f"{raw}/d\\xff/inner.txt" in shown
    assert f"{raw}/caf\\xe9.txt" in (out / "logs" / "task-00000.log").read_text() + \
        (out / "logs" / "task-00001.log").read_text()
    run_cli("verify", out)
    assert run_cli("status", out).returncode == 0
