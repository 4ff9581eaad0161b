"""Document lengths from the shards themselves, exact when cheap and a stated sample when not.

In the doc layout every sample is one document and the sidecar's chunk table already holds its length:
exact, no shard read.  In the pack layout the lengths live in each chunk's ``doclens`` member; reading
them is one small ranged read per chunk (``shard.reader.read_doclens``, never the tokens), and past
``max_chunks`` chunks the report reads an evenly spaced subset across the whole job (first and last
chunk included) and says so on the page, so a 10,000-shard job costs the same as a 200-chunk one.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shardprep.report import DEFAULT_MAX_CHUNKS
from shardprep.report.collect import Output, Sidecar
from shardprep.shard.reader import read_doclens
from shardprep.storage.locations import StorageOptions, join, open_source

_READ_THREADS = 8


@dataclass(frozen=True)
class DocLengths:
    lengths: np.ndarray     # int64, tokens per document (BOS/EOS included), in no particular order
    chunks_read: int        # chunks whose lengths were read (0 in doc layout: the sidecars hold them)
    chunks_total: int
    documents_total: int    # documents in the done shards (what ``lengths`` samples when not exact)

    @property
    def exact(self) -> bool:
        return self.lengths.size == self.documents_total


def chunk_picks(counts: list[int], max_chunks: int) -> list[tuple[int, int]]:
    """``(shard position, chunk)`` pairs: every chunk when there are at most ``max_chunks``, else
    ``max_chunks`` evenly spaced over the job's chunks in task order (deterministic)."""
    total = int(sum(counts))
    if total <= max_chunks:
        flat = np.arange(total)
    else:
        flat = np.unique(np.linspace(0, total - 1, max_chunks).round().astype(np.int64))
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    shard = np.searchsorted(starts, flat, side="right") - 1
    return [(int(s), int(f - starts[s])) for s, f in zip(shard, flat, strict=True)]


def _read_shard(location: str, side: Sidecar, chunks: list[int], storage: StorageOptions | None) -> list[np.ndarray]:
    src = open_source(join(location, side.shard), storage=storage)
    try:
        return [read_doclens(src, side.chunks.chunk(c)) for c in chunks]
    finally:
        src.close()


def doc_lengths(out: Output, max_chunks: int = DEFAULT_MAX_CHUNKS) -> DocLengths:
    """Document lengths of the done shards of ``out`` (see the module docstring for when it samples)."""
    done = out.done
    n_docs = sum(s.documents for s in done)
    counts = [len(s.chunks) for s in done]
    if out.layout == "doc":
        lengths = np.concatenate([s.chunks.tokens_array for s in done]) if done else np.zeros(0, np.int64)
        return DocLengths(lengths.astype(np.int64), 0, sum(counts), n_docs)
    by_shard: dict[int, list[int]] = defaultdict(list)
    for shard, chunk in chunk_picks(counts, max_chunks):
        by_shard[shard].append(chunk)
    with ThreadPoolExecutor(_READ_THREADS) as pool:
        parts = pool.map(lambda item: _read_shard(out.location, done[item[0]], item[1], out.storage),
                         by_shard.items())
        arrays = [a for part in parts for a in part]
    lengths = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    return DocLengths(lengths, sum(len(c) for c in by_shard.values()), sum(counts), n_docs)
