"""Helpers for the loader tests: uneven real datasets, legacy tars, and a brute-force reference stream."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import orjson

from shardprep.loader.locate import DocRef

if TYPE_CHECKING:
    from shardprep.loader import ShardDataset


def write_uneven_corpus(directory: Path, docs_per_file: list[int], *, seed: int = 0) -> Path:
    """One .txt file per entry, with that many generated documents (one per line)."""
    from shardprep.demo_data import sample_documents

    directory.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(docs_per_file):
        docs = sample_documents(n, seed=seed * 100 + i)
        (directory / f"part-{i:03d}.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    return directory


def make_dataset(root: Path, tokenizer: Path, docs_per_file: list[int], *, chunk_tokens: int = 1500,
                 layout: str = "pack", seed: int = 0) -> Path:
    """A finalized shardprep output with one shard per entry of ``docs_per_file``."""
    from shardprep.api import tokenize_directory

    corpus = write_uneven_corpus(root / "corpus", docs_per_file, seed=seed)
    return tokenize_directory(corpus, root / "out", tokenizer, workers=1, chunk_tokens=chunk_tokens, layout=layout, one_file_per_task=True)


def as_format_1(output: Path, dest: Path) -> Path:
    """A copy of the finalized ``output`` as a release before format 3 wrote it: sidecars and index.json of
    format 1, without ``origins`` and without the inputs' plan numbers (the shards' bytes are unchanged)."""
    import shutil

    shutil.copytree(output, dest)
    for path in dest.glob("shard-*.json"):
        side = json.loads(path.read_text())
        side.pop("origins")
        side["format_version"] = 1
        side["inputs"] = [{k: v for k, v in i.items() if k != "input"} for i in side["inputs"]]
        path.write_text(json.dumps(side, indent=2))
    index = json.loads((dest / "index.json").read_text())
    index["format_version"] = 1
    (dest / "index.json").write_text(json.dumps(index, indent=2))
    return dest


def documents_by_shard(output: Path) -> list[list[list[int]]]:
    """Every document, grouped by shard in index order, each shard's documents in file order."""
    from shardprep.shard.index import read_index
    from shardprep.shard.reader import iter_shard_documents
    from shardprep.shard.sidecar import Sidecar

    out = []
    for entry in read_index(output).shards:
        sidecar = Sidecar.parse((output / entry.sidecar).read_bytes(), output / entry.sidecar)
        out.append([d.tolist() for d in iter_shard_documents(output / entry.name, sidecar)])
    return out


def reference_stream(output: Path, *, seed: int, epoch: int, shuffle: bool) -> tuple[list[int], list[int]]:
    """The epoch's documents in stream order, built naively: ``(global doc ids, concatenated tokens)``.

    Uses only the public permutation function and the sidecars, not EpochStream/ChunkReader, so it checks
    them independently: shards permuted, then each shard's chunks, then each chunk's documents.
    """
    from shardprep.loader.order import KIND_CHUNKS, KIND_SHARDS, doc_order, permutation

    index = orjson.loads((output / "index.json").read_bytes())
    by_shard = documents_by_shard(output)
    base = np.concatenate([[0], np.cumsum([len(d) for d in by_shard])])
    ids: list[int] = []
    tokens: list[int] = []
    for shard in permutation(len(by_shard), seed=seed, epoch=epoch, kind=KIND_SHARDS, shuffle=shuffle).tolist():
        docs_per_chunk = orjson.loads((output / index["shards"][shard]["sidecar"]).read_bytes())["chunks"]["docs"]
        first = np.concatenate([[0], np.cumsum(docs_per_chunk)])
        for chunk in permutation(len(docs_per_chunk), seed=seed, epoch=epoch, kind=KIND_CHUNKS, index=(shard,),
                                 shuffle=shuffle).tolist():
            for d in doc_order(docs_per_chunk[chunk], seed=seed, epoch=epoch, shard=shard, chunk=chunk,
                               shuffle=shuffle).tolist():
                doc = int(first[chunk]) + d
                ids.append(int(base[shard]) + doc)
                tokens.extend(by_shard[shard][doc])
    return ids, tokens


def write_legacy_tars(directory: Path, docs: list[list[int]], per_tar: int, *, extra_member: bool = True) -> list[Path]:
    """Hand-written WebDataset layout: ``<key>.token_ids.json`` per document (plus a ``.txt`` member)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for t, start in enumerate(range(0, len(docs), per_tar)):
        path = directory / f"legacy-{t:03d}.tar"
        with tarfile.open(path, "w") as tf:
            for i, doc in enumerate(docs[start:start + per_tar]):
                members = {"token_ids.json": json.dumps(doc).encode()}
                if extra_member:
                    members["txt"] = f"document {start + i}".encode()
                for ext, payload in members.items():
                    info = tarfile.TarInfo(f"sample{start + i:06d}.{ext}")
                    info.size = len(payload)
                    tf.addfile(info, io.BytesIO(payload))
        paths.append(path)
    return paths


def build_wide_tokenizer(path: Path) -> Path:
    """A word-level tokenizer whose words have ids above 65535 (its shards are uint32); EOS ``<|endoftext|>`` = 0."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from shardprep.demo_data import sample_documents

    vocab = {"<|endoftext|>": 0, "[UNK]": 1}
    vocab.update({f"filler{i}": i for i in range(2, 66000)})
    for word in sorted({w for d in sample_documents(3000) for w in d.split()}):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|endoftext|>"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def mixture_sources(root: Path, tokenizer: Path) -> dict[str, Path]:
    """Three outputs of very different sizes: ``big`` ~105x the tokens of ``tiny`` (``mid`` in between)."""
    return {name: make_dataset(root / name, tokenizer, docs, seed=seed)
            for name, docs, seed in (("big", [300, 300, 250], 1), ("mid", [60, 40], 2), ("tiny", [8], 3))}


def run_torchrun(script: Path, nproc: int, *args: object, timeout: float = 150, check: bool = True):
    """``torchrun --standalone --nproc_per_node=nproc script args``; a timeout fails the test (a rank hung?).

    Returns the completed process; with ``check`` its exit status must be 0.
    """
    import pytest

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script),
           *map(str, args)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in {timeout}s (a rank hung?): {' '.join(cmd)}\n{e.stderr}")
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def torchrun_summary(proc) -> dict:
    """The JSON summary rank 0 of examples/train_ddp.py prints last."""
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


# The examples' progress line (examples/steplog.py): rank 0 prints it after step 1 and every --log-every steps.
STEP_LINE = re.compile(r"^step (\d+) \(epoch (\d+)\): ([\d,]+) tokens/s, loss (\d+\.\d+)$")


def step_lines(stdout: str) -> list[tuple[int, int, int, float]]:
    """(step, epoch, tokens/s, loss) of every progress line an example printed."""
    found = [STEP_LINE.match(line) for line in stdout.splitlines()]
    return [(int(m[1]), int(m[2]), int(m[3].replace(",", "")), float(m[4])) for m in found if m]


def check_step_lines(stdout: str, expected_steps: list[int]) -> None:
    """The progress lines name exactly ``expected_steps``, each once (rank 0 only), with a rate and a loss."""
    lines = step_lines(stdout)
    assert [s for s, *_ in lines] == expected_steps, stdout
    assert all(rate > 0 and loss > 0 for _, _, rate, loss in lines), lines


def records(record: Path, world: int) -> list[list[dict]]:
    """Every rank's batch records (examples/train_ddp.py ``--record``), in the order the rank trained on them."""
    return [[json.loads(line) for line in (record / f"rank{r}.jsonl").read_text().splitlines()] for r in range(world)]


def equal_steps(summary: dict) -> dict:
    """Every rank reports the same steps for every epoch; returns that {epoch: steps}."""
    per_rank = [r["steps"] for r in summary["ranks"]]
    assert all(s == per_rank[0] for s in per_rank), per_rank
    return per_rank[0]


# -- the inverse locate's ground truth (tests/loader/test_locate_*.py) ------------------------------------
def doc_refs(index, source: int, gids) -> set[DocRef]:
    """Global document numbers of one source (padding's -1 left out) -> DocRefs."""
    starts = np.asarray(index.shard_doc_start)
    out = set()
    for g in np.unique(np.asarray(gids)).tolist():
        if g >= 0:
            shard = int(np.searchsorted(starts, g, side="right") - 1)
            out.add(DocRef(source, shard, g - int(starts[shard])))
    return out


def forward(ds: ShardDataset, epoch: int) -> dict[DocRef, set[int]]:
    """Document -> the positions of ``epoch`` whose unit holds it, as the loader reads them."""
    rows = ds.open_pass(epoch)
    where: dict[DocRef, set[int]] = {}
    try:
        for p in range(ds.num_units):
            item = rows.batch(np.array([p], dtype=np.int64))
            source = int(item["source_ids"][0]) if "source_ids" in item else 0
            gids = [item["doc_id"]] if "doc_id" in item else item["doc_ids"]
            for ref in doc_refs(ds.sources[source], source, gids):
                where.setdefault(ref, set()).add(p)
    finally:
        rows.close()
    return where


def every_doc(ds: ShardDataset) -> Iterator[DocRef]:
    """Every document of every source, in index order."""
    for source, index in enumerate(ds.sources):
        for shard, n in enumerate(index.shard_docs.tolist()):
            for doc in range(n):
                yield DocRef(source, shard, doc)
