"""The corpus of the remote-input tests (issue 22) and its local reference output, as fixtures (registered in
``conftest.py``), with the two comparisons those tests make."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import eos_id, reference_ids, run_cli, shard_documents

TASK_BYTES = "96K"          # big.txt (~300 KB) is cut into several ranges; the small files are packed
SHAPE = ("--target-task-bytes", TASK_BYTES, "--force-small-tasks")
RUN = (*SHAPE, "--no-progress")


def write_corpus(directory: Path, seed: int = 5) -> list[str]:
    """The four inputs; returns every document, in no particular order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardprep.demo_data import sample_documents

    docs = [d.replace("\n", " ") for d in sample_documents(1400, seed=seed)]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "small.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:100]))
    (directory / "big.txt").write_text("".join(d + "\n" for d in docs[100:1000]))
    with gzip.open(directory / "c.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps({"text": d}) + "\n" for d in docs[1000:1200]))
    pq.write_table(pa.table({"text": docs[1200:]}), directory / "d.parquet", row_group_size=50)
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[str]]:
    """The four inputs in a directory, and their documents."""
    directory = tmp_path_factory.mktemp("remote-corpus") / "raw"
    return directory, write_corpus(directory)


@pytest.fixture(scope="module")
def local_output(tmp_path_factory, corpus, sample_tokenizer) -> Path:
    """The corpus tokenized from its local files: what every remote run must equal."""
    out = tmp_path_factory.mktemp("local") / "out"
    run_cli("submit", "--input", corpus[0], "--output", out, "--tokenizer", sample_tokenizer, *RUN)
    return out


def same_shards(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.glob("shard-*.tar"))
    assert names and names == sorted(p.name for p in b.glob("shard-*.tar"))
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def every_document_once(out: Path, docs: list[str], tokenizer: Path) -> None:
    got = sorted(map(tuple, shard_documents(out)))
    assert got == sorted(map(tuple, reference_ids(tokenizer, docs, eos_id(tokenizer))))
