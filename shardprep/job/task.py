"""One array task, end to end: read the frozen plan, stream the task's documents, tokenize, write one
shard atomically, then its sidecar.

This is the single code path every executor runs (local process pool, sbatch array, submitit), in the
spirit of datatrove's ``_run_for_rank``: the executor only decides *where* this runs.

Safe points: between batches the task checks a stop flag set by SIGUSR1/SIGTERM (Slurm's pre-timeout
signal and scancel).  On stop it drops its temporary shard and raises ``Preempted`` (exit 75) so the job
can be requeued; nothing half-written ever carries a final name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from shardprep.job.options import TokenizeOptions
from shardprep.errors import InputDataError, Preempted, TokenizerError
from shardprep.storage.atomic import remove_stale_temps, write_json_atomic
from shardprep.inputs.planned import changed_since_planned
from shardprep.inputs.readers import SkipLog, iter_documents
from shardprep.job.plan_files import read_task
from shardprep.job.schema import CREATED_BY, Job, Task, TaskItem
from shardprep.shard.sidecar import Sidecar
from shardprep.job.state import check_task, load_job
from shardprep.job.resources import peak_rss_bytes, set_tokenizer_threads, usable_cpus
from shardprep.shard.format import FORMAT_VERSION, LOG_DIR, TOKENIZER_FILE, shard_name, sidecar_name
from shardprep.shard.writer import ShardResult, ShardWriter
from shardprep.tokenizer.backend import Backend, add_boundary_tokens, select_backend
from shardprep.tokenizer.load import check_frozen_tokenizer

log = logging.getLogger(__name__)

BATCH_BYTES = 1 << 20     # text per encode call: large enough to amortise, small enough to stop quickly
BATCH_DOCS = 8192
# A backend may ask for larger batches (``batch_chars``/``batch_docs`` attributes): gigatoken encodes
# 1 MiB in ~10 ms, so its fixed cost per call (building the awkward result) is worth amortising further.

ProgressFn = Callable[[int, int], None]   # (documents, tokens) since the last call


@dataclass
class TaskResult:
    task: int
    skipped_existing: bool
    documents: int
    tokens: int
    sidecar: Sidecar


class StopFlag:
    """Set by the pre-timeout signal; polled by the task between batches."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""

    def set(self, signum: int, _frame: object = None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()


def _install_stop_handlers(stop: StopFlag) -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, stop.set) for s in (signal.SIGUSR1, signal.SIGTERM)}


def _check_inputs_unchanged(task: Task) -> None:
    for item in task.items:
        inp = item.input
        try:
            st = os.stat(inp.path)
        except OSError as e:
            raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None
        if changed_since_planned(inp, st):
            raise InputDataError(f"input {inp.path} changed since it was planned (size or mtime differs)",
                                 hint="re-plan into a new output directory")


@dataclass
class BatchLimits:
    """Size of the next batch; the task raises it once the backend is known (see ``BATCH_BYTES``)."""

    chars: int = BATCH_BYTES
    docs: int = BATCH_DOCS


def _batches(task: Task, opts: TokenizeOptions, skips: SkipLog, limits: BatchLimits) -> Iterator[list[str]]:
    batch: list[str] = []
    append = batch.append
    size = 0
    for item in task.items:
        for text in iter_documents(item.input, item.work, opts, skips):
            append(text)
            size += len(text)
            if size >= limits.chars or len(batch) >= limits.docs:
                yield batch
                batch, size = [], 0
                append = batch.append
    if batch:
        yield batch


def _log_path(output: Path, task: int) -> Path:
    return output / LOG_DIR / f"task-{task:05d}.log"


@contextlib.contextmanager
def _task_log(output: Path, task: int) -> Iterator[None]:
    """Log the task to ``logs/task-NNNNN.log`` at INFO; afterwards the ``shardprep`` logger is as it was
    (an in-process caller, e.g. the local executor's worker or a test, keeps its own level and handlers).
    The file is opened before the task writes anything: its existence tells later attempts that an
    earlier one may have left temporary files (see ``_remove_stale``)."""
    (output / LOG_DIR).mkdir(exist_ok=True)
    handler = logging.FileHandler(_log_path(output, task))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("shardprep")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[StopFlag]:
    """SIGUSR1/SIGTERM set the yielded flag (polled between batches); the previous handlers come back after."""
    stop = StopFlag()
    previous = _install_stop_handlers(stop)
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_task(output: Path, task: int, *, progress: ProgressFn | None = None,
             threads: int | None = None) -> TaskResult:
    """Run task ``task`` of the plan in ``output``.  Idempotent: a finished task is not redone."""
    output = Path(output)
    job = load_job(output)
    if not 0 <= task < job.n_tasks:
        raise InputDataError(f"task {task} does not exist: the plan in {output} has {job.n_tasks} tasks")
    existing, problem = check_task(output, job, task)
    if existing is not None and problem is None:
        log.info("task %d already done (%s); skipping", task, shard_name(task))
        return TaskResult(task, True, existing.documents, existing.tokens, existing)
    attempted = _log_path(output, task).exists()
    with _task_log(output, task), _stop_on_signals() as stop:
        try:
            return _run(output, job, task, stop, progress, threads, attempted)
        except Exception as e:
            log.error("task %d failed: %s", task, e)
            raise


@dataclass(frozen=True)
class _Context:
    """What the steps of one run share: the plan's header, the task's work, the frozen tokenizer."""

    output: Path
    job: Job
    work: Task
    tok_json: str
    threads: int
    started: float


def _run(output: Path, job: Job, task: int, stop: StopFlag, progress: ProgressFn | None,
         threads: int | None, attempted: bool) -> TaskResult:
    ctx = _load(output, job, task, threads)
    _remove_stale(output, task, attempted)
    with ShardWriter(output / shard_name(task), task=task, layout=job.options.layout, dtype=job.tokenizer.dtype,
                     chunk_tokens=job.options.chunk_tokens) as writer:
        skips, backend_info = _tokenize(ctx, writer, stop, progress)
        result = writer.close()
    elapsed = time.perf_counter() - ctx.started
    if result.documents == 0:
        log.warning("task %d produced no documents (skipped: %s)", task, skips.counts)
    sidecar = build_sidecar(job, task, result, skips, backend_info, ctx.work.items, elapsed, ctx.threads)
    write_json_atomic(output / sidecar_name(task), sidecar.to_dict())
    log.info("task %d done: %d documents, %d tokens, %d bytes, %d skipped, %.1fs", task, result.documents,
             result.tokens, result.bytes, skips.total, elapsed)
    return TaskResult(task, False, result.documents, result.tokens, sidecar)


def _load(output: Path, job: Job, task: int, threads: int | None) -> _Context:
    """Step 1: the task's work from the frozen plan, its inputs unchanged, the frozen tokenizer intact."""
    started = time.perf_counter()
    work = read_task(output, job, task)
    log.info("task %d: %s", task, ", ".join(i.describe() for i in work.items))
    _check_inputs_unchanged(work)
    path = output / TOKENIZER_FILE
    try:
        tok_json = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TokenizerError(f"{path} is not readable: {e.strerror}") from None
    check_frozen_tokenizer(tok_json, job.tokenizer.to_dict(), path)
    n_threads = threads or usable_cpus()
    set_tokenizer_threads(n_threads)
    return _Context(output, job, work, tok_json, n_threads, started)


def _remove_stale(output: Path, task: int, attempted: bool) -> None:
    """Step 2: a previous run of this task may have left temporary files or an unconfirmed final shard.

    Finding temporaries means listing the output directory (their names carry the dead attempt's host
    and pid), which holds two files per finished task: that listing would make every task's cost grow
    with the job (issue 16).  Only an attempt that found an earlier attempt's log pays for it.
    """
    if attempted:
        remove_stale_temps(output, shard_name(task))
        remove_stale_temps(output, sidecar_name(task))
    for stale in (output / sidecar_name(task), output / shard_name(task)):
        stale.unlink(missing_ok=True)


def _open_backend(ctx: _Context, batch: list[str], limits: BatchLimits) -> tuple[Backend, dict]:
    """Step 3: the backend, chosen on the task's own first batch (``auto`` verifies against hf on it, and
    on the hard cases unless the plan's check of them applies to this task: ``tokenizer.plan_check``)."""
    opts = ctx.job.options
    backend, info = select_backend(opts.backend, ctx.tok_json, allow_special_tokens=opts.allow_special_tokens,
                                   sample_texts=batch, plan_check=ctx.job.backend_check,
                                   fingerprint=ctx.job.tokenizer.fingerprint, task_bytes=ctx.work.input_bytes)
    limits.chars = getattr(backend, "batch_chars", BATCH_BYTES)
    limits.docs = getattr(backend, "batch_docs", BATCH_DOCS)
    log.info("task %d: backend %s, %d thread(s)", ctx.work.index, info, ctx.threads)
    return backend, info


def _tokenize(ctx: _Context, writer: ShardWriter, stop: StopFlag,
              progress: ProgressFn | None) -> tuple[SkipLog, dict | None]:
    """Step 4: stream batches -> encode -> BOS/EOS -> writer; stop at a safe point when signalled."""
    opts, tok = ctx.job.options, ctx.job.tokenizer
    bos = tok.bos_id if opts.add_bos else None
    eos = tok.eos_id if opts.add_eos else None
    skips = SkipLog(strict=opts.strict)
    limits = BatchLimits()
    backend, backend_info = None, None
    for batch in _batches(ctx.work, opts, skips, limits):
        if backend is None:
            backend, backend_info = _open_backend(ctx, batch, limits)
        flat, lengths = backend.encode_batch(batch)
        flat, lengths = add_boundary_tokens(flat, lengths, bos, eos)
        writer.add(flat, lengths)
        if progress:
            progress(len(lengths), int(flat.size))
        if stop:
            raise Preempted(f"task {ctx.work.index} stopped on {stop.signal_name} at a safe point; "
                            f"temporary shard removed, safe to requeue")
    return skips, backend_info


def build_sidecar(job: Job, task: int, result: ShardResult, skips: SkipLog, backend_info: dict | None,
                  items: Sequence[TaskItem], elapsed: float, threads: int) -> Sidecar:
    """Step 5: the sidecar of a written shard (public: the scaling benchmark synthesizes sidecars with it)."""
    opts, tok = job.options, job.tokenizer
    return Sidecar.holding(
        result, format_version=FORMAT_VERSION, created_by=CREATED_BY, task=task, shard=shard_name(task),
        plan_fingerprint=job.fingerprint, tokenizer_fingerprint=tok.fingerprint, layout=opts.layout,
        dtype=tok.dtype, chunks=result.chunks, skipped=skips.counts,
        skipped_examples=tuple(skips.examples), warnings=tuple(skips.warnings),
        inputs=tuple(i.sidecar_input() for i in items),
        backend=backend_info or {"name": None, "requested": opts.backend, "check": None},
        stats={
            "elapsed_s": round(elapsed, 3),
            "tokens_per_s": round(result.tokens / elapsed, 1) if elapsed > 0 else None,
            "threads": threads,
            "peak_rss_bytes": peak_rss_bytes(),
            "host": os.uname().nodename,
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
        },
    )
