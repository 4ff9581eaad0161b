"""Helpers of the issue 31 tests on finished outputs (``test_r4_index_contract``, ``test_r4_upload_verify``,
``test_r4_repair``): a small finalized output, a JSON record edited in place, the CLI in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import orjson
from helpers import run_cli

from shardprep.demo_data import sample_documents


def finished_output(root: Path, tokenizer: Path, *, docs: int, seed: int, tasks: int = 3) -> Path:
    """A finalized output of ``tasks`` one-file tasks of ``docs`` sample documents each, under ``root``."""
    corpus = root / "in"
    corpus.mkdir()
    for i in range(tasks):
        (corpus / f"part-{i}.txt").write_text("\n".join(sample_documents(docs, seed=seed + i)) + "\n")
    out = root / "out"
    run_cli("submit", "--one-file-per-task", "-i", corpus, "-o", out, "-t", tokenizer, "--chunk-tokens", "512",
            "--no-progress")
    return out


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    """Rewrite the JSON record at ``path`` with ``change`` applied (a hand edit)."""
    d = orjson.loads(path.read_bytes())
    change(d)
    path.write_bytes(orjson.dumps(d, option=orjson.OPT_INDENT_2) + b"\n")
