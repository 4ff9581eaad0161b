"""A task's documents -> token ids -> its shard: the loop every task runs, in one process or several.

Reading (``inputs.batches``: whole blocks, no Python per document where the input is clean), encoding
(one backend call per block), BOS/EOS and the shard writer.  While a fast backend encodes, a few of
its documents per block are kept with the ids it gave them (:class:`Sampler`): the task compares them
with ``hf`` before its shard may stand (``tokenizer.backend.check_candidate``), so the check covers
documents from the whole task, not just its start, and costs a few milliseconds.

The task decides once how it encodes (:class:`Parallelism`) and hands one :class:`Encoding` to one
:class:`Encoder`: :class:`InlineEncoder` here, or ``job.parallel.ParallelEncoder`` (a fast backend on
several CPUs, in worker processes); the shard's bytes do not depend on which, nor on how many workers.
Either way the task says how far it is (:class:`Progress`): documents and tokens to its caller, and the
input bytes read to its log, where ``status`` reads them.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import numpy as np

from shardprep.errors import Preempted
from shardprep.inputs.batches import items_batches
from shardprep.inputs.fastpath import DocBatch
from shardprep.inputs.readers import ReadOptions, SkipLog
from shardprep.job import logs
from shardprep.tokenizer.backend import Backend, add_boundary_tokens

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.job.schema import Task
    from shardprep.shard.writer import ShardWriter

ProgressFn = Callable[[int, int], None]   # (documents, tokens) since the last call
FIRST_BATCH_CHARS = 1 << 20    # the first batch's sample is taken from its first MiB
PER_BATCH = 2                  # later batches: their first documents, and their last one
PROGRESS_EVERY = 5.0           # seconds between two progress lines in the task log, at least

log = logging.getLogger(__name__)


class Progress:
    """How far the task is: documents and tokens to ``report`` (the local executor's bar), and the planned
    input bytes read so far to the task log (``logs.PROGRESS``), where ``status`` and ``report`` count a
    running task's work (``job.progress``).

    A line is written for the first bytes read, then at most every ``PROGRESS_EVERY`` seconds, and no more
    often than a twentieth of the time the task has run (a day-long task writes a few hundred lines, and
    ``status`` reads only a log's tail).  Encoded in one process, bytes are those of the documents handed to
    the encoder (an estimate: skipped lines and JSON syntax are not counted); in pieces, each piece's share
    of the plan once it is written (exact).  Never more than ``planned``."""

    def __init__(self, task: int, planned: int, report: ProgressFn | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.task, self.planned, self.report, self.clock = task, planned, report, clock
        self.documents = self.tokens = self.read = 0
        self.started = clock()
        self._logged: float | None = None

    def __call__(self, documents: int, tokens: int, nbytes: int = 0) -> None:
        self.documents += documents
        self.tokens += tokens
        self.read = min(self.planned, self.read + nbytes)
        now = self.clock()
        if self.read and (self._logged is None or
                          now - self._logged >= max(PROGRESS_EVERY, (now - self.started) / 20)):
            self._logged = now
            log.info(logs.PROGRESS, self.task, self.read, self.planned)
        if self.report:
            self.report(documents, tokens)

    def undo(self) -> None:
        """All of it taken back: the shard is written again from the start (``auto`` fell back to hf)."""
        if self.report:
            self.report(-self.documents, -self.tokens)
        self.documents = self.tokens = self.read = 0


def batch_bytes(batch: DocBatch) -> int:
    """About how many input bytes ``batch``'s documents came from (its buffer, or its texts' characters)."""
    return len(batch.buffer) if batch.buffer is not None else sum(map(len, batch.strs or ()))


@dataclass
class Sampler:
    """Documents of the task and the ids the candidate backend gave them, for the check against ``hf``.

    ``first``: texts from the first batch (``verify_backend`` picks evenly spaced ones, as it always
    did), kept undecoded until read (a task's encoding workers each take one; only the first piece's is
    read); ``recorded``: from every batch, its first and last documents with their ids.
    """

    head: DocBatch | None = None       # the first batch's head: decoded only if it is ``first``
    recorded: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    batches: int = 0

    @property
    def first(self) -> list[str]:
        return self.head.texts() if self.head is not None else []

    def take(self, batch: DocBatch, flat: np.ndarray, lengths: np.ndarray) -> None:
        if not batch.docs:
            return
        if self.batches == 0:
            self.head = batch.head_batch(FIRST_BATCH_CHARS)
        ends = np.cumsum(lengths)
        picks = list(enumerate(batch.head(PER_BATCH)))
        if batch.docs > PER_BATCH:
            picks.append((batch.docs - 1, batch.last()))
        for i, text in picks:
            start = int(ends[i - 1]) if i else 0
            self.recorded.append((f"document {i} of batch {self.batches}", text, flat[start:int(ends[i])].copy()))
        self.batches += 1

    def merge(self, other: "Sampler") -> None:
        """Add another process's samples (batches numbered after this one's)."""
        if not self.batches:
            self.head = other.head
        self.recorded += [(f"{label} (+{self.batches})", text, ids) for label, text, ids in other.recorded]
        self.batches += other.batches


@dataclass(frozen=True)
class Boundaries:
    """The special ids put around every document (None: none)."""

    bos: int | None
    eos: int | None


def task_batches(task: Task, opts: ReadOptions, skips: SkipLog, block_bytes: int,
                 prefetch: bool | None = None) -> Iterator[DocBatch]:
    """Every batch of the task's items, in order (read ahead across items where reads wait)."""
    yield from items_batches([(i.input, i.work) for i in task.items], opts, skips, block_bytes=block_bytes,
                             prefetch=prefetch)


class StopFlag:
    """Set by SIGUSR1/SIGTERM (Slurm's pre-timeout signal, scancel, Ctrl-C in a local ``submit``); the
    encoders look at it between blocks, the task's safe points."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""

    def set(self, signum: int, _frame: object = None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def check(self, task: int) -> None:
        """Raise ``Preempted`` when set (the task then drops its temporary shard and exits 75)."""
        if self:
            raise Preempted(logs.STOPPED % (task, self.signal_name or "a signal"))


@dataclass(frozen=True)
class Parallelism:
    """How a task uses its ``threads`` CPUs, decided once (``job.task``) for whichever backend encodes.

    ``hf`` runs them as threads of its own (tokenizers' Rust pool, ``HFBackend(threads=)``).  A fast backend
    holds the GIL for a whole call and scales poorly on threads of its own, so it runs on one thread in
    each of ``processes`` forked workers (``job.parallel``).  ``--strict`` tasks encode in this process
    (``processes`` 1): the first bad line must stop the task where it is, with its exact location.
    The sidecar's ``stats.threads`` records ``threads``, what the task was given."""

    threads: int
    processes: int

    @classmethod
    def for_task(cls, cpus: int, *, strict: bool) -> Parallelism:
        return cls(threads=cpus, processes=1 if strict else cpus)

    def forks(self, backend: Backend) -> bool:
        """Whether ``backend`` encodes in worker processes (a fast one, with several CPUs)."""
        return self.processes > 1 and backend.name != "hf"

    def describe(self, backend: Backend) -> str:
        """For the task log: what ``backend`` runs on."""
        if self.forks(backend):
            return f"{self.processes} worker process(es)"
        return f"{self.threads if backend.name == 'hf' else 1} thread(s)"


@dataclass(frozen=True)
class Encoding:
    """One encoding of a task's documents into its shard, everything an :class:`Encoder` needs: the work
    and how it is read, the backend and the ids put around each document, the writer, when to stop,
    where progress, samples (a fast backend's, for the check) and skips go."""

    work: Task
    read: ReadOptions
    backend: Backend
    bounds: Boundaries
    writer: ShardWriter
    stop: StopFlag
    progress: Progress
    sampler: Sampler | None
    skips: SkipLog


@dataclass(frozen=True)
class Encoded:
    """What an encoder reports beside the shard it wrote: its workers' peak RSS added up (0: it encoded in
    this process; the task's own memory is counted beside it)."""

    workers_rss: int = 0


class Encoder(Protocol):
    def encode(self, enc: Encoding) -> Encoded:
        """Every document of ``enc.work`` encoded and added to ``enc.writer`` in order; ``Preempted`` once
        ``enc.stop`` is set (at a safe point)."""
        ...


def encoded_batch(batch: DocBatch, backend: Backend, bounds: Boundaries,
                  sampler: Sampler | None) -> tuple[np.ndarray, np.ndarray]:
    """``batch``'s ids and lengths with BOS/EOS; sampled before they are added (the check compares the
    backend's own ids)."""
    flat, lengths = backend.encode(batch)
    if sampler is not None:
        sampler.take(batch, flat, lengths)
    return add_boundary_tokens(flat, lengths, bounds.bos, bounds.eos)


class InlineEncoder:
    """Encodes in this process, a block at a time, and stops at a safe point (between blocks)."""

    def encode(self, enc: Encoding) -> Encoded:
        for batch in task_batches(enc.work, enc.read, enc.skips, enc.backend.block_bytes):
            flat, lengths = encoded_batch(batch, enc.backend, enc.bounds, enc.sampler)
            enc.writer.add(flat, lengths, origins=batch.origins())
            enc.progress(len(lengths), int(flat.size), batch_bytes(batch))
            enc.stop.check(enc.work.index)
        return Encoded()
