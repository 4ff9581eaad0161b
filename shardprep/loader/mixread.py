"""A mixture's pass: each position's source and unit from the schedule, read through per-source readers.

Position ``p`` of loader epoch ``e`` is global position ``g = e * length + p``; the schedule gives its
source ``i`` and draw ``k`` (counted from the segment's origin), the segment the source's seq ``s``, and
``s`` is position ``s % units_i`` of source epoch ``s // units_i`` (that epoch's own shard, chunk, document
and block order, exactly as a single-source loader with the same seed reads it).  A pure function of
``(e, p)``: any rank or worker computes any position on its own.

Each source keeps the readers of its two most recent source epochs (a batch can straddle a small
source's epoch boundary); memory is bounded by ``2 * cache_bytes`` per source.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import cast

import numpy as np

from shardprep.loader.assemble import Row, RowFormat, assemble
from shardprep.loader.epoch import EpochReader, ReadOptions
from shardprep.loader.mixture import Mixture
from shardprep.shard.sidecar import ChunkTable

KEEP_EPOCHS = 2


class MixturePass:
    """Batches of mixture positions for loader epoch ``epoch``; ``close`` releases every reader."""

    def __init__(self, mix: Mixture, epoch: int, fmt: RowFormat, opts: list[ReadOptions],
                 tables: list[dict[int, ChunkTable]]):
        self.mix, self.fmt, self.opts, self.tables = mix, fmt, opts, tables
        self._base = epoch * mix.length - mix.segment.origin
        self._units = mix.units
        self._readers: list[OrderedDict[int, EpochReader]] = [OrderedDict() for _ in mix.indexes]

    def _reader(self, source: int, epoch: int) -> EpochReader:
        cache = self._readers[source]
        er = cache.get(epoch)
        if er is None:
            er = cache[epoch] = EpochReader(self.mix.indexes[source], int(self._units[source]), epoch,
                                            self.opts[source], self.tables[source])
            if len(cache) > KEEP_EPOCHS:
                cache.popitem(last=False)[1].close()
        else:
            cache.move_to_end(epoch)
        return er

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source, seq)`` of each position of this pass."""
        src, draw = self.mix.schedule.locate(np.asarray(positions, dtype=np.int64) + self._base)
        seg = self.mix.segment
        if not any(seg.pending) and not any(seg.fresh):
            return src, draw
        seqs = np.empty_like(draw)
        for i in np.unique(src).tolist():
            sel = src == i
            seqs[sel] = seg.seqs(i, draw[sel])
        return src, seqs

    def batch(self, positions: np.ndarray) -> dict:
        src, seqs = self.locate(positions)
        per = self._units[src]
        epochs, inner = seqs // per, seqs % per
        rows: list[Row | None] = [None] * len(src)
        keys = src * (1 << 40) + epochs          # group rows by (source, source epoch): one units() call each
        for key in np.unique(keys).tolist():
            at = np.flatnonzero(keys == key)
            er = self._reader(key >> 40, key & ((1 << 40) - 1))
            for j, u in zip(at.tolist(), er.units(inner[at]).tolist()):
                rows[j] = (er, u)
        out = assemble(self.fmt, cast(list[Row], rows), positions)     # every row was filled above
        if self.fmt.extras.doc_info:
            out["source_ids"] = src
        if self.fmt.mode == "doc":
            out["source"] = self.mix.names[int(src[0])]
        return out

    def close(self) -> None:
        for cache in self._readers:
            for er in cache.values():
                er.close()
            cache.clear()
