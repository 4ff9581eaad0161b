"""One task on several CPUs (:class:`ParallelEncoder`): its items cut into pieces that worker processes
read and encode, while the task writes their ids in order.

Why processes: gigatoken holds the GIL for a whole ``encode_batch`` call and the readers are Python, so
threads of one process cannot run two blocks at once (measured: two threads took twice as long).  The
workers are forked once the tokenizer is loaded, so they start in milliseconds and share its memory.

Why the shard does not change: pieces are contiguous ranges of the task's items (text cut at line or
paragraph starts, as the planner cuts, row ranges for parquet and Arrow), every piece is read with the
task's own reader, and the task writes the pieces' ids in piece order.  Skips, their examples (line
numbers made absolute with each piece's line count), the suspicious-input warning (per item, from its
pieces' counts) and the samples for the exactness check are merged in the same order.

How the ids come back: in shared memory (``job.slots``, which also holds the worker processes: a dead
worker fails the task naming it, and they are stopped together), the pipe carrying only counts, skips and
samples.

A compressed input cannot be cut: it is one piece, read by one worker.  ``--strict`` tasks run inline
(the first bad line must stop the task where it is, with its exact location).
"""

from __future__ import annotations

import builtins
import os
import signal
from collections import deque
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator

import numpy as np

from shardprep import errors
from shardprep.errors import ShardprepError
from shardprep.inputs.batches import ReadCount, piece_batches
from shardprep.inputs.health import ItemWatch
from shardprep.inputs.readers import MAX_EXAMPLES, ReadOptions, SkipExample, SkipLog, WorkItem
from shardprep.job.encode import Boundaries, Encoded, Encoding, Sampler, StopFlag, encoded_batch
from shardprep.job.resources import die_with_parent, peak_rss_bytes
from shardprep.job.slots import PieceIds, Slots, Workers
from shardprep.shard.format import DTYPES
from shardprep.shard.origins import DocOrigins
from shardprep.shard.writer import narrow_ids
from shardprep.storage.objects import READS, ReadCounts
from shardprep.tokenizer.backend import Backend

MIN_PIECE = 4 << 20
MAX_PIECE = 32 << 20
PIECES_PER_WORKER = 8        # enough pieces that the last one does not leave the other workers idle
IN_FLIGHT = 2                # pieces queued per worker: one encoding, one waiting
SPARE_SLOTS = 1              # slots per worker beyond IN_FLIGHT: for a piece done ahead of its turn


@dataclass(frozen=True)
class Piece:
    """A contiguous part of item ``item`` of the task: ``work`` is its own range."""

    index: int
    item: int
    input: Any               # the item's InputFile
    work: WorkItem
    slot: int = -1           # where in shared memory its ids go (set when it is sent)


@dataclass
class PieceResult:
    """What a worker made of a piece (its ids and lengths are in its slot, or follow on the pipe)."""

    index: int
    documents: int = 0
    tokens: int = 0
    lines: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[SkipExample] = field(default_factory=list)
    nul_bytes: int = 0
    sampler: Sampler | None = None
    reads: ReadCounts | None = None                       # remote inputs: requests, retries, bytes
    error: tuple[str, str, str | None] | None = None     # (exception class, message, hint)
    worker: int = 0                                      # the worker's pid and its peak RSS so far
    peak_rss: int = 0
    in_slot: bool = False                                # ids and lengths in the piece's slot (else piped)
    origins: DocOrigins | None = None                    # its documents' (lines relative to the piece's start)


def piece_bytes(items: Any, workers: int) -> int:
    """How many bytes of input a piece holds: about ``PIECES_PER_WORKER`` per worker, 4-32 MiB."""
    total = sum(it.nbytes for it in items)
    return min(MAX_PIECE, max(MIN_PIECE, total // max(1, workers * PIECES_PER_WORKER)))


def plan_pieces(items: Any, opts: ReadOptions, workers: int) -> list[Piece]:
    """The task's items cut into pieces of :func:`piece_bytes` each."""
    from shardprep.job.cutting import aligned_boundary

    step = piece_bytes(items, workers)
    pieces: list[Piece] = []
    for k, it in enumerate(items):
        inp, work = it.input, it.work
        if inp.tabular or not inp.splittable:
            for w in _row_pieces(inp, work, step) if inp.tabular else [work]:
                pieces.append(Piece(len(pieces), k, inp, w))
            continue
        end = inp.size if work.end is None else work.end
        cuts = [work.start]
        while cuts[-1] + step < end:
            cut = aligned_boundary(inp, cuts[-1] + step, opts.txt_mode == "paragraph" and inp.format == "txt")
            if cut >= end:
                break
            cuts.append(cut)
        cuts.append(end)
        first = None if work.first_line is None else 1       # lines of later pieces: relative, made absolute later
        for s, e in zip(cuts, cuts[1:]):
            pieces.append(Piece(len(pieces), k, inp, replace(work, start=s, end=e, first_line=first)))
    return pieces


def piece_shares(items: Any, pieces: list[Piece]) -> list[int]:
    """Each piece's planned input bytes (the task's progress): its item's ``nbytes`` shared out by the
    pieces' extents (bytes, or rows of a table); they add up to the task's planned input bytes."""
    extents = [(p.work.end if p.work.end is not None else p.input.size if p.work.unit == "bytes"
                else p.input.rows or 1) - p.work.start for p in pieces]
    shares = [0] * len(pieces)
    by_item: dict[int, list[int]] = {}
    for p in pieces:
        by_item.setdefault(p.item, []).append(p.index)
    for k, mine in by_item.items():
        it = items[k]
        total, given = max(1, sum(extents[i] for i in mine)), 0
        for n, i in enumerate(mine):
            shares[i] = it.nbytes - given if n == len(mine) - 1 else it.nbytes * extents[i] // total
            given += shares[i]
    return shares


def _row_pieces(inp: Any, work: WorkItem, step: int) -> list[WorkItem]:
    """Row ranges of about ``step`` bytes (by the file's bytes per row)."""
    rows = inp.rows if work.end is None else work.end
    if not rows or rows <= work.start:
        return [work]
    per_row = max(1, inp.size // max(1, inp.rows or rows))
    n = max(1, min((rows - work.start) * per_row // step, rows - work.start))
    bounds = [work.start + (rows - work.start) * i // n for i in range(n + 1)]
    return [replace(work, start=s, end=e, first_line=s + 1) for s, e in zip(bounds, bounds[1:]) if e > s]


# -- in a worker ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Setup:
    """What every worker encodes with (the task's, inherited by the fork): ``dtype`` the shard's, ``sample``
    whether it keeps samples for the check."""

    read: ReadOptions
    backend: Backend
    bounds: Boundaries
    dtype: str
    sample: bool


def _encode_piece(piece: Piece, setup: _Setup, slots: Slots) -> tuple[PieceResult, tuple[bytes, bytes] | None]:
    skips = SkipLog()
    count = ReadCount()
    reads = READS.snapshot()
    sampler = Sampler() if setup.sample else None
    out = PieceIds(slots, piece.slot)
    origins: list[DocOrigins | None] = []
    for batch in piece_batches(piece.input, piece.work, setup.read, skips, count,
                               block_bytes=setup.backend.block_bytes):
        flat, lengths = encoded_batch(batch, setup.backend, setup.bounds, sampler)
        out.add(narrow_ids(flat, setup.dtype), lengths)
        origins.append(batch.origins())
    piped = out.piped()
    result = PieceResult(piece.index, out.docs, out.tokens, count.lines, skips.counts, skips.examples,
                         skips.nul_bytes, sampler, READS.snapshot().since(reads), worker=os.getpid(),
                         peak_rss=peak_rss_bytes(), in_slot=piped is None,
                         origins=None if None in origins else DocOrigins.concat(origins))  # type: ignore[arg-type]
    return result, piped


def _worker(conn: Connection, setup: _Setup, slots: Slots) -> None:
    """Encode pieces until told to stop (None); signals are the task's to act on."""
    die_with_parent(signal.SIGKILL)
    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    while True:
        piece = conn.recv()
        if piece is None:
            return
        try:
            result, piped = _encode_piece(piece, setup, slots)
        except Exception as e:
            message = e.args[0] if isinstance(e, ShardprepError) and e.args else str(e)
            conn.send(PieceResult(piece.index, error=(type(e).__name__, message, getattr(e, "hint", None))))
            continue
        conn.send(result)
        for part in piped or ():
            conn.send_bytes(part)


# -- in the task --------------------------------------------------------------------------------------------
def _reraise(name: str, message: str, hint: str | None) -> None:
    """A worker's exception, raised again here as the same class (a ShardprepError keeps its exit code)."""
    cls = getattr(errors, name, None) or getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, ShardprepError):
        raise cls(message, hint=hint)
    if isinstance(cls, type) and issubclass(cls, Exception):
        raise cls(message)
    raise RuntimeError(f"{name}: {message}")


def _receive(pool: Workers, k: int, slot: int) -> tuple[PieceResult, np.ndarray, np.ndarray]:
    """Worker ``k``'s next result; its pipe broken (the worker died) is ``Workers.died``'s error, and an error
    the worker met is raised again here."""
    conn = pool.conns[k]
    try:
        result: PieceResult = conn.recv()
        piped = None if result.error is not None or result.in_slot else (conn.recv_bytes(), conn.recv_bytes())
    except (EOFError, OSError):
        raise pool.died(k) from None
    if result.error is not None:
        _reraise(*result.error)
    if piped is None:
        return (result, *pool.slots.take(slot, result.tokens, result.documents))
    return result, np.frombuffer(piped[0], pool.slots.dtype), np.frombuffer(piped[1], np.int64)


def _results(pieces: list[Piece], pool: Workers, stop: StopFlag,
             meanwhile: Callable[[], None] | None) -> Iterator[tuple[Piece, PieceResult, np.ndarray, np.ndarray]]:
    """(piece, result, ids, lengths) in piece order, keeping every worker busy.  The ids may lie in the
    piece's slot: the caller is done with them when it asks for the next piece.

    A piece is sent in order, to a worker with fewer than ``IN_FLIGHT`` pieces, when a slot is free; the
    piece the caller waits for is always sent already (it is the first not yet written), so a full set of
    slots only ever waits for it."""
    todo = deque(range(len(pieces)))
    done: dict[int, tuple[PieceResult, np.ndarray, np.ndarray]] = {}

    def dispatch() -> None:
        for k in range(len(pool.conns)):
            while todo and pool.free and len(pool.held[k]) < IN_FLIGHT:
                pool.send(k, pieces[todo.popleft()])

    dispatch()
    if meanwhile is not None:
        meanwhile()
    for want in range(len(pieces)):
        while want not in done:
            stop.check(pool.task)
            conns = [c for c, h in zip(pool.conns, pool.held) if h]
            ready = wait(conns + [p.sentinel for p in pool.procs], timeout=0.2)
            for k, conn in enumerate(pool.conns):
                if conn in ready:
                    index = pool.held[k][0]
                    done[index] = _receive(pool, k, pool.sent[index])
                    pool.held[k].popleft()
                elif pool.procs[k].sentinel in ready:     # (after its last result, if it sent one)
                    raise pool.died(k)
            dispatch()
        yield (pieces[want], *done.pop(want))
        pool.free.append(pool.sent.pop(want))
        dispatch()


class _Merge:
    """The pieces' skips, line numbers, warnings and samples folded into the task's, in order."""

    def __init__(self, items: Any, skips: SkipLog, sampler: Sampler | None) -> None:
        self.items, self.skips, self.sampler = items, skips, sampler
        self.item = -1
        self.lines_before = 0
        self.kept = 0
        self.watch: ItemWatch | None = None

    def _switch(self, k: int) -> None:
        self.finish()
        self.item, self.lines_before, self.kept = k, 0, 0
        self.watch = ItemWatch(self.skips)

    def add(self, piece: Piece, result: PieceResult) -> DocOrigins | None:
        """Fold in ``result``; return its documents' origins with their lines made absolute."""
        if piece.item != self.item:
            self._switch(piece.item)
        first_line = self.items[piece.item].work.first_line
        origins = result.origins
        if origins is not None and first_line is not None and not piece.input.tabular:
            counted = origins.line > 0
            origins.line[counted] += first_line + self.lines_before - 1
        for example in result.examples:
            if len(self.skips.examples) >= MAX_EXAMPLES:
                break
            line = example.line
            if line is not None and not piece.input.tabular and first_line is not None:
                line = first_line + self.lines_before + line - 1
            self.skips.examples.append(replace(example, line=line))
        for reason, n in result.counts.items():
            self.skips.counts[reason] += n
        self.skips.nul_bytes += result.nul_bytes
        self.lines_before += result.lines
        self.kept += result.documents
        if self.sampler is not None and result.sampler is not None:
            self.sampler.merge(result.sampler)
        if result.reads is not None:
            READS.merge(result.reads)
        return origins

    def finish(self) -> None:
        if self.watch is not None:
            it = self.items[self.item]
            self.watch.finish(it.input, it.work, self.kept, self.skips)
            self.watch = None


class ParallelEncoder:
    """``job.encode.Encoder`` for a fast backend on several CPUs: ``processes`` forked workers (fewer when
    the task has fewer pieces).  ``meanwhile`` is run by the task once the workers have their first pieces
    (it would otherwise wait for their ids: the task loads the hf reference for the check)."""

    def __init__(self, processes: int, meanwhile: Callable[[], None] | None = None) -> None:
        self.processes, self.meanwhile = processes, meanwhile

    def encode(self, enc: Encoding) -> Encoded:
        items, writer = enc.work.items, enc.writer
        pieces = plan_pieces(items, enc.read, self.processes)
        n = min(self.processes, len(pieces))
        step = piece_bytes(items, self.processes)   # room for as many ids as bytes read, a length per 8 bytes
        slots = Slots(n * (IN_FLIGHT + SPARE_SLOTS), step, step // 8, np.dtype(DTYPES[writer.dtype_name]))
        setup = _Setup(enc.read, enc.backend, enc.bounds, writer.dtype_name, enc.sampler is not None)
        pool = Workers(n, _worker, (setup,), slots, enc.work.index)
        merge = _Merge(items, enc.skips, enc.sampler)
        shares = piece_shares(items, pieces)
        peaks: dict[int, int] = {}
        finished = False
        try:
            for piece, result, flat, lengths in _results(pieces, pool, enc.stop, self.meanwhile):
                origins = merge.add(piece, result)
                peaks[result.worker] = max(peaks.get(result.worker, 0), result.peak_rss)
                writer.add(flat, lengths, origins=origins)
                writer.release()                  # its slot is given out again
                enc.progress(result.documents, result.tokens, shares[piece.index])
            merge.finish()
            finished = True
        finally:
            pool.close(finished)
        return Encoded(workers_rss=sum(peaks.values()))
