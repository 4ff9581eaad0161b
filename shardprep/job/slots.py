"""Shared memory a task's encoding workers put their pieces' ids in (``job.parallel``).

Each piece is sent with a free slot of an anonymous shared mapping made before the fork; the worker copies
each block's ids and document lengths there as it goes (:class:`PieceIds`), and the pipe carries only the
piece's counts, skips and samples.  Through a pipe every
id was copied four times (into one array, into bytes, into and out of the kernel) in 64 KiB writes that
woke the task, whose CPUs the workers share: one 256 MB task on 2 CPUs took 1.47 s with the pipe, 1.28 s
with the slots and ``meanwhile`` (median of 5, docs/benchmarks.md).  A piece whose ids outgrow a slot (a
compressed input is one piece) still goes through the pipe.  A slot is given out again only once the task
has written its ids (``ShardWriter.release`` copies what the writer keeps of them).
"""

from __future__ import annotations

import mmap

import numpy as np


class Slots:
    """Shared memory for the pieces' ids and document lengths: ``count`` slots, mapped before the workers
    fork, each with room for ``tokens`` ids of ``dtype`` and ``docs`` lengths (int64).

    Only the pages a piece touches are ever backed by memory, so a slot can be sized for the largest
    piece without costing it.  The mapping goes when the last view of it does."""

    def __init__(self, count: int, tokens: int, docs: int, dtype: np.dtype) -> None:
        self.count, self.tokens, self.docs, self.dtype = count, tokens, docs, dtype
        self._ids_bytes = -(-tokens * dtype.itemsize // 8) * 8
        self.size = self._ids_bytes + docs * 8
        try:
            self._map = mmap.mmap(-1, max(1, count * self.size))  # anonymous and MAP_SHARED: seen by children
        except OSError:                                           # (strict overcommit): every piece by pipe
            self.tokens = self.docs = 0
            self._map = mmap.mmap(-1, 1)

    def take(self, slot: int, tokens: int, docs: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``tokens`` ids and ``docs`` lengths of ``slot`` (no copy: valid until the slot is given
        out again)."""
        base = slot * self.size
        return (np.frombuffer(self._map, dtype=self.dtype, count=tokens, offset=base),
                np.frombuffer(self._map, dtype=np.int64, count=docs, offset=base + self._ids_bytes))


class PieceIds:
    """A piece's ids and lengths, batch by batch, straight into its slot (nothing of a batch is kept once
    it is copied there); once they outgrow it, in memory, to go through the pipe."""

    def __init__(self, slots: Slots, slot: int) -> None:
        self.slots, self.slot = slots, slot
        self.tokens = self.docs = 0
        self._ids: list[np.ndarray] | None = None     # set when the slot is outgrown
        self._lens: list[np.ndarray] = []

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        tokens, docs = self.tokens + ids.size, self.docs + lengths.size
        if self._ids is None and (tokens > self.slots.tokens or docs > self.slots.docs):
            ids_so_far, lens_so_far = self.slots.take(self.slot, self.tokens, self.docs)
            self._ids, self._lens = [ids_so_far.copy()], [lens_so_far.copy()]
        if self._ids is None:
            all_ids, all_lens = self.slots.take(self.slot, tokens, docs)
            all_ids[self.tokens:] = ids
            all_lens[self.docs:] = lengths
        else:
            self._ids.append(ids)
            self._lens.append(lengths.astype(np.int64, copy=False))
        self.tokens, self.docs = tokens, docs

    def piped(self) -> tuple[bytes, bytes] | None:
        """The ids and lengths as bytes for the pipe; None when they are in the slot."""
        if self._ids is None:
            return None
        return np.concatenate(self._ids).tobytes(), np.concatenate(self._lens).tobytes()
