"""Helpers for tests: run the real CLI (in process, or as a process of its own), read shards back, tokenize independently."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from inprocess import run_in_process


def run_cli(*args: str | os.PathLike, check: bool | int = True, env: dict | None = None,
            timeout: float = 300, process: bool = False) -> subprocess.CompletedProcess:
    """Run ``shardprep ARGS`` and return the completed process (text output).

    In this process by default (``inprocess.run_in_process``: the same exit code and output as a fresh
    process, without its start-up); ``process=True`` runs ``python -m shardprep`` for what needs a process
    of its own (start-up, signals, the environment before numpy loads), and so does a call given ``env``
    (fsspec's stores and botocore keep what they read of it per process).  ``check=True`` asserts exit 0; an
    int asserts that exit code; False asserts nothing.
    """
    argv = [str(a) for a in args]
    if process or env:      # an environment of its own: libraries read some of it once per process
        cmd = [sys.executable, "-m", "shardprep", *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=timeout)
    else:
        proc = run_in_process(argv, env)
    expected = 0 if check is True else check
    if expected is not False and proc.returncode != expected:
        raise AssertionError(f"shardprep {' '.join(argv)} exited {proc.returncode}, expected {expected}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def cli(*args: str | os.PathLike) -> tuple[int, str, str]:
    """``shardprep ARGS`` in this process, checked by the caller: (exit code, stdout, stderr)."""
    proc = run_cli(*args, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def write_slow_text(path: Path, repeats: int = 6) -> Path:
    """A ~7 MB text file (24,000 documents) whose task runs for seconds with ``--backend hf`` on one CPU:
    long enough to interrupt it mid-write (kill, pre-timeout signal, Ctrl-C).  ``repeats``: ~1.2 MB each."""
    from shardprep.demo_data import sample_documents

    docs = sample_documents(4000, seed=11)
    with open(path, "w") as f:
        for rep in range(repeats):
            f.write("\n".join(f"{rep} {t}" for t in docs) + "\n")
    return path


def planned_with_slurm_record(tmp_path: Path, tokenizer: Path, options: dict, job_id: str, *, tasks: int = 3,
                              finalize: dict | None = None) -> Path:
    """OUTPUT of a planned job of ``tasks`` one-line inputs, recorded in ``slurm/jobs.json`` as submitted in
    array ``job_id`` (and ``finalize``, a finalize record) with Slurm ``options`` (``SlurmOptions.to_dict()``),
    without Slurm: for the status view read from logs (write ``OUTPUT/logs/<job_id>_<task>.out`` yourself)."""
    from shardprep.executor.slurm.jobs import ArrayRecord, FinalizeRecord, SubmissionRecorder

    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(tasks):
        (inp / f"{i}.txt").write_text(f"doc {i}\n")
    out = tmp_path / "out"
    run_cli("plan", "--one-file-per-task", "-i", inp, "-o", out, "-t", tokenizer)
    (out / "logs").mkdir(exist_ok=True)
    ids = f"0-{tasks - 1}"
    rec = SubmissionRecorder(out, executor="slurm", tasks=ids, options=options)
    rec.add_array(ArrayRecord(job_id, ids, ids, "logs/{job}_{index}.out", offset=0))
    if finalize:
        rec.set_finalize(FinalizeRecord(**finalize))
    return out


def shard_documents(output: Path) -> list[list[int]]:
    """Every document of a finalized output, in index order, read through the sidecars' chunk tables."""
    from shardprep.shard.index import read_index
    from shardprep.shard.reader import iter_shard_documents
    from shardprep.shard.sidecar import Sidecar

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


def reference_tokenizer(path: Path | str, *, specials_as_text: bool = True):
    """The oracle: plain ``tokenizers``' own parse of ``path`` (not shardprep's), no padding or
    truncation, special-token strings in text encoded as text (``specials_as_text``) or matched.  Kept per
    test process by path, size and modification time (a parse of a 128k vocabulary costs ~0.2 s, and the
    suite asks for the same shared families file after file): callers encode with it, never change it."""
    stat = os.stat(path)
    return _reference_tokenizer(str(path), stat.st_size, stat.st_mtime_ns, specials_as_text)


@functools.lru_cache(maxsize=32)
def _reference_tokenizer(path: str, size: int, mtime_ns: int, specials_as_text: bool):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    tok.encode_special_tokens = specials_as_text
    return tok


def reference_ids(tokenizer: Path, texts: list[str], eos: int | None) -> list[list[int]]:
    """Each document tokenized independently with plain ``tokenizers`` (special strings as text)."""
    tok = reference_tokenizer(tokenizer)
    out = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        out.append(ids + ([eos] if eos is not None else []))
    return out


def eos_id(tokenizer: Path) -> int:
    return reference_tokenizer(tokenizer).token_to_id("<|endoftext|>")

