"""Helpers for tests: run the real CLI as a subprocess, read shards back, tokenize independently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path



def run_cli(*args: str | os.PathLike, check: bool | int = True, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m shardprep ARGS`` and return the completed process (text output).

    ``check=True`` asserts exit 0; an int asserts that exit code; False asserts nothing.
    """
    cmd = [sys.executable, "-m", "shardprep", *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
    expected = 0 if check is True else check
    if expected is not False and proc.returncode != expected:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}, expected {expected}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def shard_documents(output: Path) -> list[list[int]]:
    """Every document of a finalized output, in index order, read through the sidecars' chunk tables."""
    from shardprep.job.finalize import read_index
    from shardprep.job.schema import Sidecar
    from shardprep.shard.reader import iter_shard_documents

    docs: list[list[int]] = []
    for entry in read_index(output).shards:
        sidecar = Sidecar.parse((output / entry.sidecar).read_bytes(), output / entry.sidecar)
        docs.extend(d.tolist() for d in iter_shard_documents(output / entry.name, sidecar))
    return docs


def plan_tasks(output: Path):
    """The frozen plan's tasks (``job.schema.Task``), read through the task table like a task reads them."""
    from shardprep.job.plan_files import TaskTable
    from shardprep.job.state import load_job

    with TaskTable(output, load_job(output)) as table:
        return list(table)


def plan_inputs(output: Path):
    """The plan's distinct inputs (``InputFile``) in plan order."""
    return list({it.input.path: it.input for task in plan_tasks(output) for it in task.items}.values())


def reference_ids(tokenizer: Path, texts: list[str], eos: int | None) -> list[list[int]]:
    """Each document tokenized independently with plain ``tokenizers`` (special strings as text)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.encode_special_tokens = True
    out = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        out.append(ids + ([eos] if eos is not None else []))
    return out


def eos_id(tokenizer: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer)).token_to_id("<|endoftext|>")

