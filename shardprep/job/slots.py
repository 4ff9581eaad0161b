"""Shared memory a task's encoding workers put their pieces' ids in (``job.parallel``).

Each piece is sent with a free slot of an anonymous shared mapping made before the fork; the worker copies
each block's ids and document lengths there as it goes (:class:`PieceIds`), and the pipe carries only the
piece's counts, skips and samples.  Through a pipe every
id was copied four times (into one array, into bytes, into and out of the kernel) in 64 KiB writes that
woke the task, whose CPUs the workers share: one 256 MB task on 2 CPUs took 1.47 s with the pipe, 1.28 s
with the slots and ``meanwhile`` (median of 5, docs/benchmarks.md).  A piece whose ids outgrow a slot (a
compressed input is one piece) still goes through the pipe.  A slot is given out again only once the task
has written its ids (``ShardWriter.release`` copies what the writer keeps of them).

:class:`Workers` holds the worker processes with the slots: a worker that dies while the task needs it (a
kill, the OOM killer) fails the task with one line naming the task, the worker's pid and the signal
(exit 5, as a killed local worker), and stopping them takes one deadline for all, not one per worker.
"""

from __future__ import annotations

import dataclasses
import mmap
import multiprocessing
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

import numpy as np

from shardprep.errors import IncompleteError
from shardprep.job.resources import describe_exit

STOP_GRACE = 2.0             # seconds the workers have, all together, to leave once told to


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


class Workers:
    """A task's forked encoding workers (each runs ``target(conn, *args, slots)``), the pieces each one
    holds and the shared slots their ids come back in."""

    def __init__(self, n: int, target: Callable[..., None], args: tuple[Any, ...], slots: Slots, task: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.slots, self.task = slots, task
        self.free = deque(range(self.slots.count))
        self.sent: dict[int, int] = {}                          # piece index -> its slot
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        self.held: list[deque[int]] = []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=(child, *args, self.slots), daemon=True,
                               name="shardprep-encode")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
            self.held.append(deque())

    def close(self, finished: bool) -> None:
        """Stop every worker: once the task has all its pieces, each is told to leave (None) and given
        ``STOP_GRACE`` seconds, all of them together; otherwise (a stop, an error) all are killed at once:
        they ignore SIGTERM, hold no file and nothing of theirs is kept."""
        for conn in self.conns if finished else ():
            try:
                conn.send(None)
            except OSError:
                pass
        stop_processes(self.procs, STOP_GRACE if finished else 0.0)
        for conn in self.conns:
            conn.close()

    def send(self, k: int, piece: Any) -> None:
        """Give ``piece`` to worker ``k`` with a free slot."""
        self.held[k].append(piece.index)
        self.sent[piece.index] = self.free.popleft()
        try:
            self.conns[k].send(dataclasses.replace(piece, slot=self.sent[piece.index]))
        except OSError:
            raise self.died(k) from None

    def died(self, k: int) -> IncompleteError:
        """The error for worker ``k`` gone while the task still needed it (killed from outside, e.g. by the
        OOM killer), naming the task, the worker's pid and how it ended."""
        proc = self.procs[k]
        proc.join(timeout=STOP_GRACE)        # its pipe is closed: it is gone or going; its exit says how
        code = proc.exitcode
        how = "closed its pipe" if code is None else f"was {describe_exit(code)}" if code < 0 else describe_exit(code)
        return IncompleteError(f"task {self.task} (encoding worker pid {proc.pid}) {how}; its temporary shard "
                               f"was removed", hint="if the kernel's OOM killer did it (dmesg), give the task "
                               "more memory or fewer --threads, then rerun the task (`shardprep submit --resume`)")


def stop_processes(procs: Sequence[Any], grace: float) -> None:
    """Wait up to ``grace`` seconds, one deadline for all of them, for ``procs`` to end; then kill every one
    still alive (all of them before waiting on any) and reap them.

    Why one deadline: waiting for each in turn with a timeout of its own made a stop last about
    ``grace`` seconds per busy worker (a pre-timeout signal must stop the task in seconds)."""
    deadline = time.monotonic() + grace
    alive = [p for p in procs if p.is_alive()]
    while alive and (left := deadline - time.monotonic()) > 0:
        wait([p.sentinel for p in alive], timeout=left)
        alive = [p for p in alive if p.is_alive()]
    for proc in alive:
        proc.kill()
    for proc in procs:
        proc.join()
