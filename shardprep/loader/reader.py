"""Decoded chunks for one worker: sidecars, open shards and a small LRU of chunks in stream order.

Consecutive rows of a pack batch (and consecutive batches of a worker) fall in the same few chunks
because a shuffle block covers a contiguous stream range, so keeping the last few decoded chunks means
each chunk is read and permuted about once per worker and epoch.  A decoded chunk is tied to an epoch
(its document order is), so a reader lives for one pass.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from shardprep.errors import InputDataError, ShardprepError
from shardprep.loader.index import DatasetIndex
from shardprep.loader.order import doc_order
from shardprep.shard.reader import read_trained
from shardprep.shard.sidecar import ChunkTable
from shardprep.storage.store import ByteSource

log = logging.getLogger(__name__)


@dataclass
class DecodedChunk:
    """One chunk's tokens and documents; ``doc(j)`` is the chunk's j-th document in stream order.

    ``packed`` chunks (pack mode) hold their tokens already in stream order, so a row is a slice;
    otherwise tokens stay in file order and documents are looked up through ``order``.
    """

    tokens: np.ndarray
    starts: np.ndarray      # document boundaries in ``tokens``, len = docs + 1
    order: np.ndarray       # chunk-local (file-order) index of stream document j
    packed: bool
    trained: np.ndarray | None = None   # chat chunks: True per trained token, laid out like ``tokens``

    @property
    def nbytes(self) -> int:
        return int(self.tokens.nbytes) + (0 if self.trained is None else int(self.trained.nbytes))

    def _span(self, j: int) -> slice:
        """Where stream document ``j`` lies in ``tokens`` (and ``trained``)."""
        i = j if self.packed else int(self.order[j])
        return slice(self.starts[i], self.starts[i + 1])

    def doc(self, j: int) -> np.ndarray:
        return self.tokens[self._span(j)]

    def doc_trained(self, j: int) -> np.ndarray | None:
        """The trained mask of :meth:`doc` ``j`` (None: not chat data)."""
        return None if self.trained is None else self.trained[self._span(j)]


def permute_documents(tokens: np.ndarray, lens: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens with documents rearranged into ``order``, and the new boundaries.

    Long documents: one concatenate of slices (memcpy speed).  Many short documents (tens of thousands
    per chunk, where a Python list of slices would dominate): one vectorized gather.
    """
    starts = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    new_lens = lens[order]
    new_starts = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(new_lens, out=new_starts[1:])
    if len(lens) * 64 <= len(tokens):
        src = starts.tolist()
        return np.concatenate([tokens[src[o]:src[o + 1]] for o in order.tolist()]), new_starts
    shift = np.repeat(starts[:-1][order] - new_starts[:-1], new_lens)
    shift += np.arange(len(shift), dtype=np.int64)
    return tokens[shift], new_starts


def check_token_ids(tokens: np.ndarray, vocab_size: int | None, where: str, key: str, chunk: int | None = None) -> None:
    """Refuse ids the tokenizer cannot have produced (a flipped byte in a shard read without
    ``verify=True``): one ``max`` per decoded sample, about 1% of decoding it.  ``vocab_size`` None: not
    known (legacy tars), nothing checked.  The loader and ``shardprep.wds`` both check with this."""
    if vocab_size is not None and tokens.size and int(tokens.max()) >= vocab_size:
        where_in = f"sample {key}" + ("" if chunk is None else f" (chunk {chunk})")
        raise InputDataError(f"corrupt shard {where}: {where_in} holds token id {int(tokens.max())} >= vocab size "
                             f"{vocab_size}", hint="run `shardprep verify` and re-run the task that wrote it")


class ChunkReader:
    """Reads chunks of ``index`` for epoch ``(seed, epoch)``; caches tables, open shards and chunks."""

    def __init__(self, index: DatasetIndex, *, seed: int, epoch: int, shuffle: bool, packed: bool,
                 cache_bytes: int = 64 << 20, max_open: int = 16, tables: dict[int, ChunkTable] | None = None):
        self.index = index
        self.seed, self.epoch, self.shuffle, self.packed = seed, epoch, shuffle, packed
        self.cache_bytes = cache_bytes
        self.max_open = max_open
        self.tables = tables if tables is not None else {}
        self._sources: OrderedDict[int, ByteSource] = OrderedDict()
        self._chunks: OrderedDict[tuple[int, int], DecodedChunk] = OrderedDict()
        self._cached = 0
        self.reads = 0          # chunks decoded (for tests and the benchmark)
        vocab = index.tokenizer.vocab_size if index.tokenizer is not None else None   # None: legacy tars
        self._vocab_size = vocab if vocab is not None and vocab > 0 else None

    def table(self, shard: int) -> ChunkTable:
        t = self.tables.get(shard)
        if t is None:
            t = self.tables[shard] = self.index.chunk_table(shard)
        return t

    def chunk_sizes(self, shard: int, unit: str) -> np.ndarray:
        t = self.table(shard)
        return t.tokens_array if unit == "tokens" else t.docs_array

    def _source(self, shard: int) -> ByteSource:
        src = self._sources.get(shard)
        if src is None:
            src = self._sources[shard] = self.index.open(shard)
            if len(self._sources) > self.max_open:
                _, old = self._sources.popitem(last=False)
                old.close()
        else:
            self._sources.move_to_end(shard)
        return src

    def chunk(self, shard: int, chunk: int) -> DecodedChunk:
        key = (shard, chunk)
        dc = self._chunks.get(key)
        if dc is not None:
            self._chunks.move_to_end(key)
            return dc
        dc = self._decode(shard, chunk)
        self._chunks[key] = dc
        self._cached += dc.nbytes
        while self._cached > self.cache_bytes and len(self._chunks) > 1:
            _, old = self._chunks.popitem(last=False)
            self._cached -= old.nbytes
        return dc

    def _decode(self, shard: int, chunk: int) -> DecodedChunk:
        table = self.table(shard)
        where = self.index.location(self.index.shards[shard].name)
        try:
            tokens, lens = self.index.read(self._source(shard), table, chunk)
            trained = self._trained(shard, table, chunk, lens, len(tokens))
        except ShardprepError:
            raise
        except (EOFError, OSError, ValueError) as e:
            raise InputDataError(f"corrupt or truncated shard {where}: sample {table.key[chunk]}: {e}",
                                 hint="run `shardprep verify` and re-run the task that wrote it") from None
        if len(lens) != table.docs[chunk] or int(lens.sum()) != len(tokens):
            raise InputDataError(f"corrupt shard {where}: sample {table.key[chunk]}: document lengths sum to "
                                 f"{int(lens.sum())} for {len(tokens)} tokens ({len(lens)} documents, sidecar "
                                 f"says {int(table.docs[chunk])})", hint="run `shardprep verify`")
        self._check_ids(tokens, where, table.key[chunk], chunk)
        self.reads += 1
        order = doc_order(len(lens), seed=self.seed, epoch=self.epoch, shard=shard, chunk=chunk,
                          shuffle=self.shuffle)
        if self.packed and self.shuffle and len(lens) > 1:
            if trained is not None:         # the mask travels with its tokens
                trained, _ = permute_documents(trained, lens, order)
            tokens, starts = permute_documents(tokens, lens, order)
            return DecodedChunk(tokens, starts, order, packed=True, trained=trained)
        starts = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        # unshuffled (or single-document) chunks are already in stream order
        return DecodedChunk(tokens, starts, order, packed=self.packed, trained=trained)

    def _trained(self, shard: int, table: ChunkTable, chunk: int, lens: np.ndarray, n_tokens: int) -> np.ndarray | None:
        """A chat chunk's trained mask (one ranged read of its ranges), None for other data.  Read only once
        the lengths are known to add up: the ranges are checked against them."""
        if not table.chat or int(lens.sum()) != n_tokens:
            return None
        ranges = read_trained(self._source(shard), table.chunk(chunk), lens)
        return None if ranges is None else ranges.mask(lens)

    def _check_ids(self, tokens: np.ndarray, where: str, key: str, chunk: int) -> None:
        check_token_ids(tokens, self._vocab_size, where, key, chunk)

    def close(self) -> None:
        for src in self._sources.values():
            src.close()
        self._sources.clear()
        self._chunks.clear()
        self._cached = 0
