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

import numpy as np

from shardprep.loader.assemble import Row, RowFormat, assemble
from shardprep.loader.epoch import EpochReader, ReadOptions
from shardprep.loader.layout import Doc
from shardprep.loader.mixture import Mixture
from shardprep.shard.sidecar import ChunkTable

KEEP_EPOCHS = 2


class MixturePass:
    """Batches of mixture positions for loader epoch ``epoch``; ``close`` releases every reader."""

    def __init__(self, mix: Mixture, epoch: int, fmt: RowFormat, opts: list[ReadOptions],
                 tables: list[dict[int, ChunkTable]]):
        self.mix, self.fmt, self.opts, self.tables = mix, fmt, opts, tables
        self._base = epoch * mix.length - mix.segment.origin
        self._units = mix.units.tolist()
        self._schedule, self._segment = mix.schedule, mix.segment
        self._readers: list[OrderedDict[int, EpochReader]] = [OrderedDict() for _ in mix.indexes]

    def _reader(self, source: int, epoch: int) -> EpochReader:
        cache = self._readers[source]
        er = cache.get(epoch)
        if er is None:
            er = cache[epoch] = EpochReader(self.mix.indexes[source], self._units[source], epoch,
                                            self.opts[source], self.tables[source])
            if len(cache) > KEEP_EPOCHS:
                cache.popitem(last=False)[1].close()
        else:
            cache.move_to_end(epoch)
        return er

    def locate_one(self, position: int) -> tuple[int, int]:
        """``(source, seq)`` of one position of this pass."""
        src, draw = self._schedule.locate_one(position + self._base)
        return src, self._segment.seq(src, draw)

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`locate_one` of many positions, as arrays."""
        found = [self.locate_one(p) for p in np.asarray(positions).tolist()]
        return np.array([s for s, _ in found], dtype=np.int64), np.array([q for _, q in found], dtype=np.int64)

    def batch(self, positions: np.ndarray) -> dict:
        rows: list[Row] = []
        sources = []
        for p in positions.tolist():         # a handful of rows: plain Python beats numpy's per-call cost
            src, seq = self.locate_one(p)
            epoch, inner = divmod(seq, self._units[src])
            er = self._reader(src, epoch)
            rows.append((er, er.block.unit(inner)))
            sources.append(src)
        out = assemble(self.fmt, rows, positions)
        if self.fmt.extras.doc_info:
            out["source_ids"] = np.array(sources, dtype=np.int64)
        if isinstance(self.fmt.layout, Doc):
            out["source"] = self.mix.names[sources[0]]
        return out

    def close(self) -> None:
        for cache in self._readers:
            for er in cache.values():
                er.close()
            cache.clear()
