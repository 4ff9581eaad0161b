"""One task on several CPUs: its items cut into pieces that worker processes read and encode, while the
task writes their ids in order.

Why processes: gigatoken holds the GIL for a whole ``encode_batch`` call and the readers are Python, so
threads of one process cannot run two blocks at once (measured: two threads took twice as long).  The
workers are forked once the tokenizer is loaded, so they start in milliseconds and share its memory.

Why the shard does not change: pieces are contiguous ranges of the task's items (text cut at line or
paragraph starts, as the planner cuts, row ranges for parquet and Arrow), every piece is read with the
task's own reader, and the task writes the pieces' ids in piece order.  Skips, their examples (line
numbers made absolute with each piece's line count), the suspicious-input warning (per item, from its
pieces' counts) and the samples for the exactness check are merged in the same order.

A compressed input cannot be cut: it is one piece, read by one worker.  ``--strict`` tasks run inline
(the first bad line must stop the task where it is, with its exact location).
"""

from __future__ import annotations

import builtins
import multiprocessing
import os
import signal
from collections import deque
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any, Iterator

import numpy as np

from shardprep import errors
from shardprep.errors import ShardprepError
from shardprep.inputs.batches import ReadCount, item_batches
from shardprep.inputs.health import ItemWatch
from shardprep.inputs.readers import MAX_EXAMPLES, ReadOptions, SkipExample, SkipLog, WorkItem
from shardprep.job.encode import Boundaries, ProgressFn, Sampler, check_stop
from shardprep.job.resources import peak_rss_bytes
from shardprep.shard.format import DTYPES
from shardprep.shard.writer import ShardWriter, narrow_ids
from shardprep.storage.objects import READS, ReadCounts
from shardprep.tokenizer.backend import Backend, add_boundary_tokens

MIN_PIECE = 4 << 20
MAX_PIECE = 32 << 20
PIECES_PER_WORKER = 4        # enough pieces that a slow one does not leave the other workers idle
IN_FLIGHT = 2                # pieces queued per worker: one encoding, one waiting


@dataclass(frozen=True)
class Piece:
    """A contiguous part of item ``item`` of the task: ``work`` is its own range."""

    index: int
    item: int
    input: Any               # the item's InputFile
    work: WorkItem


@dataclass
class PieceResult:
    """What a worker made of a piece (the ids arrive beside it, as raw bytes)."""

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


def plan_pieces(items: Any, opts: ReadOptions, workers: int) -> list[Piece]:
    """The task's items cut into pieces: about ``PIECES_PER_WORKER`` per worker, 4-32 MiB each."""
    from shardprep.job.cutting import aligned_boundary

    total = sum(it.nbytes for it in items)
    step = min(MAX_PIECE, max(MIN_PIECE, total // max(1, workers * PIECES_PER_WORKER)))
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
def _die_with_parent() -> None:
    if not hasattr(os, "sched_getaffinity"):   # pragma: no cover - not Linux
        return
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover
        pass


def _encode_piece(piece: Piece, opts: ReadOptions, backend: Backend, bounds: Boundaries, dtype: str,
                  sample: bool) -> tuple[PieceResult, bytes, bytes]:
    skips = SkipLog()
    count = ReadCount()
    reads = READS.snapshot()
    sampler = Sampler() if sample else None
    ids: list[np.ndarray] = []
    lens: list[np.ndarray] = []
    for batch in item_batches(piece.input, piece.work, opts, skips, block_bytes=backend.block_bytes,
                              watch=False, count=count):
        flat, lengths = backend.encode(batch)
        if sampler is not None:
            sampler.take(batch, flat, lengths)
        flat, lengths = add_boundary_tokens(flat, lengths, bounds.bos, bounds.eos)
        ids.append(narrow_ids(flat, dtype))
        lens.append(lengths)
    flat_all = np.concatenate(ids) if ids else np.empty(0, np.uint32)
    len_all = np.concatenate(lens) if lens else np.empty(0, np.int64)
    result = PieceResult(piece.index, int(len_all.size), int(flat_all.size), count.lines, skips.counts,
                         skips.examples, skips.nul_bytes, sampler, READS.snapshot().since(reads),
                         worker=os.getpid(), peak_rss=peak_rss_bytes())
    return result, flat_all.tobytes(), len_all.astype(np.int64, copy=False).tobytes()


def _worker(conn: Connection, opts: ReadOptions, backend: Backend, bounds: Boundaries, dtype: str,
            sample: bool) -> None:
    """Encode pieces until told to stop (None); signals are the task's to act on."""
    _die_with_parent()
    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    while True:
        piece = conn.recv()
        if piece is None:
            return
        try:
            result, flat, lengths = _encode_piece(piece, opts, backend, bounds, dtype, sample)
        except Exception as e:
            message = e.args[0] if isinstance(e, ShardprepError) and e.args else str(e)
            conn.send(PieceResult(piece.index, error=(type(e).__name__, message, getattr(e, "hint", None))))
            continue
        conn.send(result)
        conn.send_bytes(flat)
        conn.send_bytes(lengths)


# -- in the task --------------------------------------------------------------------------------------------
class _Pool:
    """The forked workers and the pieces each one holds."""

    def __init__(self, n: int, args: tuple[Any, ...]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.procs = []
        self.held: list[deque[int]] = []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, *args), daemon=True, name="shardprep-encode")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
            self.held.append(deque())

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _reraise(name: str, message: str, hint: str | None) -> None:
    """A worker's exception, raised again here as the same class (a ShardprepError keeps its exit code)."""
    cls = getattr(errors, name, None) or getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, ShardprepError):
        raise cls(message, hint=hint)
    if isinstance(cls, type) and issubclass(cls, Exception):
        raise cls(message)
    raise RuntimeError(f"{name}: {message}")


def _receive(conn: Connection, dtype: str) -> tuple[PieceResult, np.ndarray, np.ndarray]:
    result: PieceResult = conn.recv()
    if result.error is not None:
        _reraise(*result.error)
    flat = np.frombuffer(conn.recv_bytes(), dtype=np.dtype(DTYPES[dtype]))
    lengths = np.frombuffer(conn.recv_bytes(), dtype=np.int64)
    return result, flat, lengths


def _results(pieces: list[Piece], pool: _Pool, dtype: str, stop: object, task: int) -> Iterator[tuple[Piece, PieceResult, np.ndarray, np.ndarray]]:
    """(piece, result, ids, lengths) in piece order, keeping every worker busy."""
    todo = deque(range(len(pieces)))
    done: dict[int, tuple[PieceResult, np.ndarray, np.ndarray]] = {}
    for k, conn in enumerate(pool.conns):
        for _ in range(IN_FLIGHT):
            if todo:
                pool.held[k].append(todo.popleft())
                conn.send(pieces[pool.held[k][-1]])
    for want in range(len(pieces)):
        while want not in done:
            check_stop(stop, task)
            ready = wait([c for c, h in zip(pool.conns, pool.held) if h], timeout=0.2)
            for k in [k for k, c in enumerate(pool.conns) if c in ready]:
                conn = pool.conns[k]
                try:
                    got = _receive(conn, dtype)
                except EOFError:
                    raise ShardprepError(f"task {task}: an encoding worker died") from None
                done[pool.held[k].popleft()] = got
                if todo:
                    pool.held[k].append(todo.popleft())
                    conn.send(pieces[pool.held[k][-1]])
        yield (pieces[want], *done.pop(want))


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

    def add(self, piece: Piece, result: PieceResult) -> None:
        if piece.item != self.item:
            self._switch(piece.item)
        first_line = self.items[piece.item].work.first_line
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

    def finish(self) -> None:
        if self.watch is not None:
            it = self.items[self.item]
            self.watch.finish(it.input, it.work, self.kept, self.skips)
            self.watch = None


def encode_parallel(items: Any, opts: ReadOptions, backend: Backend, bounds: Boundaries, writer: ShardWriter,
                    stop: object, task: int, progress: ProgressFn | None, sampler: Sampler | None,
                    skips: SkipLog, workers: int) -> int:
    """``job.encode.encode_inline`` for a task with ``workers`` CPUs (and a fast backend); returns the
    workers' peak RSS added up (the task's own memory is beside it)."""
    pieces = plan_pieces(items, opts, workers)
    pool = _Pool(min(workers, len(pieces)), (opts, backend, bounds, writer.dtype_name, sampler is not None))
    merge = _Merge(items, skips, sampler)
    peaks: dict[int, int] = {}
    try:
        for piece, result, flat, lengths in _results(pieces, pool, writer.dtype_name, stop, task):
            merge.add(piece, result)
            peaks[result.worker] = max(peaks.get(result.worker, 0), result.peak_rss)
            writer.add(flat, lengths)
            if progress:
                progress(result.documents, result.tokens)
        merge.finish()
    finally:
        pool.close()
    return sum(peaks.values())
