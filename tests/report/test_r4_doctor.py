"""``doctor`` agrees with ``submit`` and reads the txt inputs (issue 31, items 15d and 15e), in-process.

15d: for the same inputs and executor, doctor prints the sizing line ``submit`` prints (the same function,
the executor's task slots); it used to size with this machine's CPUs and no sampled shard ratio.
15e: txt inputs whose head is blank-line-separated paragraphs are a warning under ``--txt-mode line``.
"""

from __future__ import annotations

import json

import pytest
from helpers import cli

from shardprep.demo_data import sample_documents


def _input_check(capsys, *args: object) -> dict:
    code, out, _ = cli("doctor", *args, "--json")
    return next(c for c in json.loads(out)["checks"] if c["name"] == "input")


@pytest.fixture(autouse=True)
def _short_speed_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed check times its sample for TIMING_S (half a second) per doctor run: nothing here reads the
    rate, so it times a few milliseconds (as tests/report/test_doctor.py does)."""
    from shardprep.doctor import checks

    monkeypatch.setattr(checks, "TIMING_S", 0.01)


@pytest.fixture
def fake_partition(monkeypatch):
    """A Slurm partition of 64 CPUs on one node, as sinfo would say (nothing is submitted: --dry-run)."""
    from shardprep.executor.slurm import commands

    monkeypatch.setattr(commands, "partition_cpus", lambda partition: (64, "dev"))
    monkeypatch.setattr(commands, "largest_node_cpus", lambda partition: (64, "dev"))
    monkeypatch.setattr(commands, "max_array_size", lambda: (1001, "test"))


def test_doctor_prints_the_sizing_submit_chooses(tmp_path, sample_tokenizer, capsys, fake_partition):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"{i}.txt").write_text("\n".join(sample_documents(200, seed=i)) + "\n")
    out = tmp_path / "out"
    code, printed, _ = cli("submit", "--executor", "slurm", "--dry-run", "-i", raw, "-o", out,
                         "-t", sample_tokenizer)
    assert code == 0
    sizing = next(line for line in printed.splitlines() if line.startswith("sizing: "))
    assert "partition dev: 64 CPUs / --cpus-per-task" in sizing        # the executor's task slots
    check = _input_check(capsys, "-i", raw, "-o", out, "-t", sample_tokenizer, "--executor", "slurm")
    assert f"submit's {sizing} (" in check["message"], check["message"]
    assert check["details"]["default_tasks"] == int(sizing.split(" -> ")[1].split(" task")[0])


def test_doctor_warns_of_paragraphs_under_line_mode(tmp_path, sample_tokenizer, capsys):
    docs = sample_documents(120, seed=4)
    books, lines = tmp_path / "books", tmp_path / "lines"
    books.mkdir()
    lines.mkdir()
    (books / "book.txt").write_text("\n\n".join("\n".join(docs[i:i + 3]) for i in range(0, 120, 3)) + "\n")
    (lines / "docs.txt").write_text("\n".join(docs) + "\n")
    check = _input_check(capsys, "-i", books, "-o", tmp_path / "o", "-t", sample_tokenizer)
    assert check["verdict"] == "warn", check
    assert (f"{books / 'book.txt'} looks like paragraphs separated by blank lines: --txt-mode paragraph?"
            in check["message"])
    assert "--txt-mode paragraph" in check["fix"]
    assert _input_check(capsys, "-i", books, "-o", tmp_path / "o", "-t", sample_tokenizer,
                        "--txt-mode", "paragraph")["verdict"] == "ok"
    assert _input_check(capsys, "-i", lines, "-o", tmp_path / "o", "-t", sample_tokenizer)["verdict"] == "ok"
