"""The order of an epoch: a pure function of (seed, epoch) and the dataset's sizes.

The epoch's *stream* is every shard in a seeded permutation; inside each shard its chunks (samples) in a
seeded permutation; inside each chunk its documents in a seeded permutation.  A *unit* is a row of
``seq_len`` stream tokens (pack mode) or one stream document (pad/doc mode).  Finally a shuffle buffer
permutes units inside consecutive blocks of ``block`` units.

Every permutation has its own generator seeded from ``[seed, epoch, kind, *index]``, so any piece (one
shard's chunk order, one chunk's document order, one block) is computed on its own, in any process, in
any order, without computing the others.  That is what makes the order independent of world size and
worker count, lets a worker open only the sidecars of the shards it touches, and makes resume exact.

Nothing here reads files or knows about ranks; ``distribute`` splits the units, ``dataset`` reads them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

# Domain tags: numpy's SeedSequence pads short entropy with zeros, so [seed, epoch, 3] and
# [seed, epoch, 3, 0] would collide without a tag that says which permutation is meant.
KIND_SHARDS = 1
KIND_CHUNKS = 2
KIND_DOCS = 3
KIND_BLOCK = 4
KIND_MIX = 5          # the mixture schedule's tie order (loader/schedule.py)


def permutation(n: int, *, seed: int, epoch: int, kind: int, index: tuple[int, ...] = (),
                shuffle: bool = True) -> np.ndarray:
    """A seeded permutation of ``range(n)`` (int64); the identity when ``shuffle`` is False."""
    if not shuffle or n <= 1:
        return np.arange(n, dtype=np.int64)
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be >= 0, got seed={seed} epoch={epoch}")
    seq = np.random.SeedSequence([int(seed), int(epoch), kind, *(int(i) for i in index)])
    return np.random.Generator(np.random.PCG64(seq)).permutation(n).astype(np.int64, copy=False)


def doc_order(n_docs: int, *, seed: int, epoch: int, shard: int, chunk: int, shuffle: bool) -> np.ndarray:
    """Order of a chunk's documents in the stream: element j is the chunk-local index of stream doc j."""
    return permutation(n_docs, seed=seed, epoch=epoch, kind=KIND_DOCS, index=(shard, chunk), shuffle=shuffle)


@dataclass(frozen=True)
class Piece:
    """``n`` consecutive stream units taken from one chunk, starting at ``start`` in the chunk's stream order."""

    shard: int
    chunk: int
    start: int
    n: int


class Layout:
    """Items of known sizes placed one after another in a given order; maps offsets back to items.

    ``order[slot]`` is the item at that slot; ``starts[slot]`` its first offset.  Zero-size items take no
    room and are never returned by :meth:`locate`.
    """

    def __init__(self, sizes: np.ndarray, order: np.ndarray):
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.order = np.asarray(order, dtype=np.int64)
        self.starts = np.zeros(len(self.order) + 1, dtype=np.int64)
        np.cumsum(self.sizes[self.order], out=self.starts[1:])
        self.total = int(self.starts[-1])
        self._starts = self.starts.tolist()     # scalar lookups via bisect: no numpy call overhead per row
        self._order = self.order.tolist()

    def locate_one(self, offset: int) -> tuple[int, int, int]:
        """Scalar :meth:`locate` for ``0 <= offset < total`` (unchecked: callers validate ranges)."""
        slot = bisect_right(self._starts, offset) - 1
        return slot, self._order[slot], offset - self._starts[slot]

    def locate(self, offsets: np.ndarray | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slot, item, offset within item)`` for offsets in ``[0, total)`` (vectorized)."""
        off = np.asarray(offsets, dtype=np.int64)
        if off.size and (int(off.min()) < 0 or int(off.max()) >= self.total):
            raise IndexError(f"offset out of range [0, {self.total})")
        slot = np.searchsorted(self.starts, off, side="right") - 1
        return slot, self.order[slot], off - self.starts[slot]


class EpochStream:
    """The stream of one epoch over a dataset: shards, then chunks, then documents, each permuted.

    ``shard_sizes`` are per-shard totals (tokens for pack, documents for pad/doc), known from index.json.
    ``chunk_sizes(shard)`` returns that shard's per-chunk sizes in file order; it is called (and cached)
    only for shards that are actually touched, because in a real dataset it means reading a sidecar.
    """

    def __init__(self, shard_sizes: np.ndarray, chunk_sizes: Callable[[int], np.ndarray], *, seed: int,
                 epoch: int, shuffle: bool):
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), bool(shuffle)
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        self.shards = Layout(sizes, permutation(len(sizes), seed=seed, epoch=epoch, kind=KIND_SHARDS,
                                                shuffle=shuffle))
        self.total = self.shards.total
        self._chunk_sizes = chunk_sizes
        self._chunk_layouts: dict[int, Layout] = {}

    def chunk_layout(self, shard: int) -> Layout:
        lay = self._chunk_layouts.get(shard)
        if lay is None:
            sizes = np.asarray(self._chunk_sizes(shard), dtype=np.int64)
            expected = int(self.shards.sizes[shard])
            if int(sizes.sum()) != expected:
                raise ValueError(f"shard {shard}: chunk sizes sum to {int(sizes.sum())}, index says {expected}")
            order = permutation(len(sizes), seed=self.seed, epoch=self.epoch, kind=KIND_CHUNKS, index=(shard,),
                                shuffle=self.shuffle)
            lay = self._chunk_layouts[shard] = Layout(sizes, order)
        return lay

    def locate(self, offset: int) -> Piece:
        """The chunk holding stream unit ``offset`` (a one-unit piece)."""
        if not 0 <= offset < self.total:
            raise IndexError(f"offset {offset} outside the stream [0, {self.total})")
        _, shard, inner = self.shards.locate_one(offset)
        _, chunk, pos = self.chunk_layout(shard).locate_one(inner)
        return Piece(shard, chunk, pos, 1)

    def pieces(self, start: int, length: int) -> list[Piece]:
        """Stream units ``[start, start + length)`` as per-chunk pieces, in stream order."""
        if start < 0 or length < 0 or start + length > self.total:
            raise IndexError(f"range [{start}, {start + length}) outside the stream [0, {self.total})")
        out: list[Piece] = []
        pos, end = start, start + length
        shard_starts = self.shards._starts
        while pos < end:
            slot, shard, inner = self.shards.locate_one(pos)
            shard_end = shard_starts[slot + 1]
            lay = self.chunk_layout(shard)
            stop = min(end, shard_end) - shard_starts[slot]       # where to stop, as an offset in the shard
            while inner < stop:
                cslot, chunk, cpos = lay.locate_one(inner)
                take = min(stop, lay._starts[cslot + 1]) - inner
                out.append(Piece(shard, chunk, cpos, take))
                inner += take
            pos = min(end, shard_end)
        return out


class BlockShuffle:
    """A shuffle buffer without a buffer: positions are permuted inside blocks of ``block`` units.

    Unlike a streaming shuffle buffer it is a fixed function of (seed, epoch), so it survives resume and
    does not depend on how ranks or workers split the work; a block covers a contiguous stream range, so
    reading stays local (one block touches a handful of chunks).
    """

    def __init__(self, n_units: int, block: int, *, seed: int, epoch: int, shuffle: bool, cache: int = 8):
        self.n = int(n_units)
        self.block = max(1, int(block))
        self.seed, self.epoch = int(seed), int(epoch)
        self.active = bool(shuffle) and self.block > 1
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = max(1, cache)

    def _perm(self, b: int) -> np.ndarray:
        perm = self._cache.get(b)
        if perm is None:
            size = min(self.block, self.n - b * self.block)
            perm = permutation(size, seed=self.seed, epoch=self.epoch, kind=KIND_BLOCK, index=(b,))
            self._cache[b] = perm
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(b)
        return perm

    def unit(self, position: int) -> int:
        """Scalar :meth:`units` for ``0 <= position < n`` (unchecked; a mixture maps its rows one by one)."""
        if not self.active:
            return position
        base = position - position % self.block
        return base + int(self._perm(base // self.block)[position - base])

    def units(self, positions: np.ndarray) -> np.ndarray:
        """The stream unit shown at each shuffled position (vectorized)."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self.n):
            raise IndexError(f"position out of range [0, {self.n})")
        if not self.active:
            return pos.copy()
        if pos.size and pos[0] // self.block == pos[-1] // self.block and bool((pos[1:] >= pos[:-1]).all()):
            base = int(pos[0] // self.block) * self.block       # a sorted batch inside one block
            return base + self._perm(base // self.block)[pos - base]
        blocks = pos // self.block
        out = np.empty_like(pos)
        for b in np.unique(blocks).tolist():
            sel = blocks == b
            base = b * self.block
            out[sel] = base + self._perm(b)[pos[sel] - base]
        return out
