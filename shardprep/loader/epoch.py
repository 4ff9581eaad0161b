"""One dataset in one epoch, as a worker reads it: its stream, its shuffle blocks and a chunk reader.

``ShardDataset`` reads one of these per pass; a mixture keeps one per source and source epoch it is in
(a small source repeats, so its epochs advance while a large one's do not).  A shuffled position of the
epoch becomes a stream unit with ``units``; the assembly (``assemble``) reads that unit's tokens through
``stream`` and ``reader``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardprep.loader.chatrows import ChatRows
from shardprep.loader.index import DatasetIndex
from shardprep.loader.order import BlockShuffle, EpochStream
from shardprep.loader.reader import ChunkReader
from shardprep.shard.sidecar import ChunkTable


@dataclass(frozen=True)
class ReadOptions:
    """What decides a dataset's order and reading, the same for every epoch (and, in a mixture, source);
    ``packed``: units are rows of stream tokens (``Pack``), else documents; ``rows``: units are packed rows
    of whole conversations (``Pack`` over chat data, ``chatrows``), read from chunks in file order."""

    packed: bool
    seed: int
    shuffle: bool
    block: int
    cache_bytes: int
    rows: ChatRows | None = field(default=None, compare=False)     # holds arrays: left out of ==


class EpochReader:
    """Dataset ``index`` in epoch ``epoch`` with ``num_units`` units; ``tables`` caches sidecars across epochs."""

    def __init__(self, index: DatasetIndex, num_units: int, epoch: int, opts: ReadOptions,
                 tables: dict[int, ChunkTable]):
        self.index, self.epoch = index, epoch
        self.reader = ChunkReader(index, seed=opts.seed, epoch=epoch, shuffle=opts.shuffle,
                                  packed=opts.packed, cache_bytes=opts.cache_bytes, tables=tables)
        self.rows = opts.rows
        # chat packing: the stream's pieces are packing windows of rows; their packings are cached per epoch
        self.packings: OrderedDict[tuple[int, int], Any] = OrderedDict()
        if self.rows is not None:
            rows = self.rows
            self.stream = EpochStream(rows.shard_rows, lambda s: rows.window_rows[s], seed=opts.seed, epoch=epoch,
                                      shuffle=opts.shuffle)
        else:
            unit = "tokens" if opts.packed else "docs"
            sizes = index.shard_tokens if unit == "tokens" else index.shard_docs
            self.stream = EpochStream(sizes, lambda s: self.reader.chunk_sizes(s, unit), seed=opts.seed,
                                      epoch=epoch, shuffle=opts.shuffle)
        self.block = BlockShuffle(num_units, opts.block, seed=opts.seed, epoch=epoch, shuffle=opts.shuffle)

    def units(self, positions: np.ndarray) -> np.ndarray:
        """The stream unit at each shuffled position of the epoch."""
        return self.block.units(positions)

    def close(self) -> None:
        self.reader.close()
