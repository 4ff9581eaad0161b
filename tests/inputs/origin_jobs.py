"""Real small jobs, and the check that every document's origin points at the text its ids came from
(issue 29 item 1): used by tests/inputs/test_lookup.py and tests/shard/test_origins.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from conftest import sample_tokenizer_at

from shardprep.api import plan_job
from shardprep.demo_data import write_sample_corpus
from shardprep.job.finalize import finalize
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.sources import plan_sources
from shardprep.job.state import job_state, load_job
from shardprep.job.task import run_task
from shardprep.shard.reader import iter_shard_documents
from shardprep.shard.sidecar import Sidecar

BAD_LINES = '{"text": "fine document"}\n\n{"text": \n{"body": "x"}\n[1, 2]\n{"text": "last \\u00e9 one"}\n'


def run_job(root: Path, inputs: list[Path], tokenizer: Path, options: TokenizeOptions | None = None,
            target: int | None = None, threads: int = 1, *, do_finalize: bool = True) -> Path:
    """Plan, run every task (on ``threads`` CPUs: more than one forks encoding workers for a fast backend) and
    finalize; the output directory."""
    out = root / "out"
    plan_job(inputs, out, tokenizer, options or TokenizeOptions(), PlanOptions(target, one_file_per_task=target is None))
    for t in job_state(out).missing:
        run_task(out, t, threads=threads)
    if do_finalize:
        finalize(out)
    return out


def run_demo_job(root: Path, threads: int = 1, **options: Any) -> Path:
    """The demo corpus (txt, jsonl, jsonl.gz) with bad lines, cut into tasks that split files."""
    corpus = _demo_corpus(root / "corpus")
    (corpus / "bad.jsonl").write_text(BAD_LINES, encoding="utf-8")
    tok = sample_tokenizer_at(root / "tok" / "tokenizer.json")
    return run_job(root, [corpus], tok, TokenizeOptions(**{"chunk_tokens": 2048, **options}), 12 << 10, threads)


_DEMO_CORPUS: dict[str, bytes] = {}


def _demo_corpus(directory: Path) -> Path:
    """``write_sample_corpus``'s files (6 x 150 documents, ~20 KB each: a 12 KiB task splits them), generated
    once per process and written again (the files are the same for the same seed)."""
    if not _DEMO_CORPUS:
        write_sample_corpus(directory, files=6, docs_per_file=150, seed=3)
        _DEMO_CORPUS.update({f.name: f.read_bytes() for f in sorted(directory.iterdir())})
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in _DEMO_CORPUS.items():
        (directory / name).write_bytes(data)
    return directory


def sidecars(out: Path) -> list[tuple[Path, Sidecar]]:
    return [(out / p.name.replace(".json", ".tar"), Sidecar.parse(p.read_bytes(), p))
            for p in sorted(out.glob("shard-*.json"))]


def text_ids(out: Path) -> Any:
    """The task's own encoding of a text: its backend's ``hf`` reference, with the job's BOS/EOS."""
    from shardprep.tokenizer.backend import BACKENDS

    job = load_job(out)
    opts, tok = job.options, job.tokenizer
    hf = BACKENDS["hf"]((out / "tokenizer.json").read_text(encoding="utf-8"), opts.allow_special_tokens)

    def encode(text: str) -> list[int]:
        flat, _ = hf.encode_batch([text])
        ids = flat.tolist()
        return ([tok.bos_id] if opts.add_bos else []) + ids + ([tok.eos_id] if opts.add_eos else [])
    return encode


def check_every_document(out: Path, encode: Any = None) -> int:
    """For every document of every shard: its origin read back (``job.sources.document_record``) and encoded
    as the task encodes gives exactly its ids; the number of documents checked."""
    from shardprep.job.sources import document_record

    sources = plan_sources(out)
    encode = encode or by_text(text_ids(out))
    checked = 0
    for shard, sidecar in sidecars(out):
        origins = sidecar.origins
        assert origins is not None and len(origins) == sidecar.documents
        for d, ids in enumerate(iter_shard_documents(shard, sidecar)):
            source = document_record(sources, int(origins.input[d]), int(origins.offset[d]))
            assert encode(source) == ids.tolist(), (shard.name, d, origins[d], source)
            checked += 1
    assert checked == sum(s.documents for _, s in sidecars(out))
    return checked


def same_documents_and_origins(out: Path, checked: Path) -> int:
    """``out`` wrote the shards ``checked`` wrote (byte for byte) with the same origins: what
    ``check_every_document`` proved of ``checked`` holds for ``out``; the number of documents compared."""
    ours, theirs = sidecars(out), sidecars(checked)
    assert [p.name for p, _ in ours] == [p.name for p, _ in theirs]
    for (shard, sidecar), (other, reference) in zip(ours, theirs):
        assert shard.read_bytes() == other.read_bytes(), shard.name
        assert sidecar.origins == reference.origins, shard.name
    return sum(s.documents for _, s in ours)


def by_text(encode_text: Any) -> Any:
    return lambda source: encode_text(source.text)


def lines_match(out: Path) -> int:
    """Where a line is counted, the input's line of that number starts at the document's offset (after a
    BOM on line 1); the number of documents checked."""
    sources = plan_sources(out)
    starts: dict[int, np.ndarray] = {}
    checked = 0
    for _, sidecar in sidecars(out):
        o = sidecar.origins
        assert o is not None
        for d in np.flatnonzero(o.line > 0).tolist():
            i = int(o.input[d])
            if i not in starts:
                a = np.frombuffer(_decompressed(sources.inputs[i].path), dtype=np.uint8)
                starts[i] = np.concatenate(([0], np.flatnonzero(a == 10) + 1))
            at = int(starts[i][int(o.line[d]) - 1])
            assert int(o.offset[d]) in (at, at + 3 if at == 0 else at), (sources.inputs[i].path, o[d])
            checked += 1
    return checked


def _decompressed(path: str) -> bytes:
    import gzip

    raw = Path(path).read_bytes()
    if path.endswith(".gz"):
        return gzip.decompress(raw)
    if path.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    return raw
