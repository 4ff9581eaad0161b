"""What ``plan``/``submit`` check before anything is queued (issue 23, items 10 and 11).

A missing text field or column is refused at plan time on a sample of every input, naming the keys or
columns the input has (it used to surface in the array tasks, after sbatch); the task-time warning for a
field missing deeper in a file names the keys instead of calling the file binary.  The task list reads in
words ("1 task (id 0)"), and a ``--target-task-bytes`` that is surely a forgotten unit is refused unless
forced.
"""

from __future__ import annotations

import gzip
import json

import pytest
from helpers import run_cli

from shardprep.errors import EXIT_INPUT, EXIT_USAGE


def _jsonl(key: str, n: int = 40) -> str:
    return "".join(json.dumps({"id": i, key: f"document number {i}"}) + "\n" for i in range(n))


def _inputs_without_text(tmp_path):
    """One input of each kind whose text sits under "content"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    made = {}
    for name in ("a.jsonl", "b.jsonl.gz", "c.parquet", "d.arrow"):
        d = tmp_path / name.split(".")[0]
        d.mkdir()
        made[name] = d / name
    made["a.jsonl"].write_text(_jsonl("content"))
    with gzip.open(made["b.jsonl.gz"], "wt") as f:
        f.write(_jsonl("content"))
    table = pa.table({"id": list(range(40)), "content": [f"document {i}" for i in range(40)]})
    pq.write_table(table, made["c.parquet"])
    with pa.OSFile(str(made["d.arrow"]), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return made


def test_a_missing_text_field_is_refused_before_anything_is_queued(tmp_path, sample_tokenizer):
    """jsonl, jsonl.gz, parquet and arrow: exit 3 at plan time naming what the input has; no job.json, no
    sbatch (--dry-run keeps a regression from queueing jobs on the shared cluster)."""
    for name, path in _inputs_without_text(tmp_path).items():
        out = tmp_path / f"out-{name}"
        for cmd in (("plan",), ("submit", "--executor", "slurm", "--dry-run")):
            proc = run_cli(*cmd, "-i", path, "-o", out, "-t", sample_tokenizer, check=EXIT_INPUT)
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and str(path) in lines[0] and "--text-field" in lines[0], proc.stderr
            what = "keys seen: id, content" if "jsonl" in name else "columns: id, content"
            assert what in lines[0] and "#SBATCH" not in proc.stdout
            assert not out.exists()
        run_cli("plan", "-i", path, "-o", out, "-t", sample_tokenizer, "--text-field", "content")


def test_one_input_without_the_field_among_good_ones_is_named(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"good-{i}.jsonl").write_text(_jsonl("text"))
    (raw / "odd.jsonl").write_text(_jsonl("body"))
    (raw / "notes.txt").write_text("txt inputs have no field\n")
    proc = run_cli("submit", "-i", raw, "-o", tmp_path / "out", "-t", sample_tokenizer, check=EXIT_INPUT)
    assert f"{raw / 'odd.jsonl'}: none of its first 40 JSON object(s) has a string field 'text' (keys seen: id, " \
           "body)" in proc.stderr


def test_a_field_missing_deeper_in_a_file_is_named_by_its_keys_not_as_binary(tmp_path, sample_tokenizer):
    """The head has the field (plan-time check passes); most lines lack it: the task warns with the keys."""
    f = tmp_path / "mixed.jsonl"
    f.write_text(_jsonl("text", 5) + _jsonl("content", 60))
    out = tmp_path / "out"
    proc = run_cli("submit", "-i", f, "-o", out, "-t", sample_tokenizer, "--no-progress")
    warning = next(line for line in proc.stderr.splitlines() if "WARNING" in line and str(f) in line)
    assert "binary" not in warning and "lacks the text field in most lines" in warning
    assert "keys seen in its first lines: id, text, content" in warning and "missing_field 60" in warning
    sidecar = json.loads((out / "shard-00000.json").read_text())
    assert sidecar["documents"] == 5 and "lacks the text field" in sidecar["warnings"][0]


def test_the_task_list_is_counted_in_words(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("one document\n")
    one = run_cli("submit", "-i", raw, "-o", tmp_path / "one", "-t", sample_tokenizer, "--no-progress")
    assert "1 task(s), 0 done, to run: 1 task (id 0)" in one.stdout
    for i in range(1, 8):
        (raw / f"{i}.txt").write_text(f"document {i}\n")
    plan = run_cli("plan", "-i", raw, "-o", tmp_path / "eight", "-t", sample_tokenizer, "--one-file-per-task")
    assert "to run: 8 tasks (ids 0-7)" in plan.stdout
    again = run_cli("submit", "-i", raw, "-o", tmp_path / "eight", "-t", sample_tokenizer, "--one-file-per-task",
                    "--no-progress")
    assert "to run: 8 tasks (ids 0-7)" in again.stdout


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_a_tiny_target_task_bytes_is_refused_unless_forced(tmp_path, sample_tokenizer, command):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("".join(f"document {i}\n" for i in range(200)))
    out = tmp_path / "out"
    proc = run_cli(command, "-i", raw, "-o", out, "-t", sample_tokenizer, "--target-task-bytes", "8", check=EXIT_USAGE)
    assert "--target-task-bytes 8 means 8 bytes of input per task, under the 1.0 MiB floor" in proc.stderr
    assert "suffixes K, M, G" in proc.stderr and "--force-small-tasks" in proc.stderr and not out.exists()
    run_cli(command, "-i", raw, "-o", out, "-t", sample_tokenizer, "--target-task-bytes", "1M")
    quiet = ("--no-progress",) if command == "submit" else ()
    forced = run_cli(command, "-i", raw, "-o", tmp_path / "forced", "-t", sample_tokenizer, "--target-task-bytes",
                     "512", "--force-small-tasks", *quiet)
    assert "tasks (ids 0-" in forced.stdout
    helptext = run_cli(command, "--help").stdout
    assert "suffixes K, M, G" in " ".join(helptext.split()) and "--force-small-tasks" in helptext
