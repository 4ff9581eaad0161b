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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from shardprep.errors import InputDataError
from shardprep.inputs.planned import changed_since_planned, connect_ahead
from shardprep.inputs.readers import SkipLog
from shardprep.job import logs
from shardprep.job.encode import (
    Boundaries,
    Encoder,
    Encoding,
    InlineEncoder,
    Parallelism,
    Progress,
    ProgressFn,
    Sampler,
    StopFlag,
)
from shardprep.job.plan_files import read_task
from shardprep.job.resources import keep_freed_memory, peak_rss_bytes, set_tokenizer_threads, usable_cpus
from shardprep.job.schema import CREATED_BY, Job, Task, TaskItem
from shardprep.job.state import check_task, load_job, read_frozen_tokenizer
from shardprep.shard.format import LOG_DIR, format_version, shard_name, sidecar_name
from shardprep.shard.origins import encode_origins
from shardprep.shard.provenance import BackendRecord, RemoteReads, TaskStats
from shardprep.shard.sidecar import Sidecar
from shardprep.shard.writer import ShardResult, ShardWriter
from shardprep.storage.atomic import remove_stale_temps, write_json_atomic
from shardprep.storage.locations import is_url
from shardprep.storage.objects import READS, ReadCounts
from shardprep.tokenizer.backend import BACKENDS, Backend, Opened, backend_record, check_candidate, open_backend

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.chat.encoder import ChatEncoder

log = logging.getLogger(__name__)


@dataclass
class TaskResult:
    task: int
    skipped_existing: bool
    documents: int
    tokens: int
    sidecar: Sidecar


def _install_stop_handlers(stop: StopFlag) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, stop.set) for s in (signal.SIGUSR1, signal.SIGTERM)}


def _check_inputs_unchanged(task: Task) -> None:
    for item in task.items:
        inp = item.input
        if is_url(inp.path):    # every read of a remote object is held to its planned identity (OpenInput)
            continue
        try:
            st = os.stat(inp.path)
        except OSError as e:
            raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None
        if changed_since_planned(inp, st):
            raise InputDataError(f"input {inp.path} changed since it was planned (size or mtime differs)",
                                 hint="re-plan into a new output directory")


def _log_path(output: Path, task: int) -> Path:
    return output / LOG_DIR / f"task-{task:05d}.log"


@contextlib.contextmanager
def _task_log(output: Path, task: int) -> Iterator[None]:
    """Log the task to ``logs/task-NNNNN.log`` at INFO; afterwards the ``shardprep`` logger is as it was
    (an in-process caller, e.g. the local executor's worker or a test, keeps its own level and handlers).
    The file is opened before the task writes anything: its existence tells later attempts that an
    earlier one may have left temporary files (see ``_remove_stale``)."""
    handler = logs.task_log_handler(_log_path(output, task))      # never through a planted link
    handler.setFormatter(logging.Formatter(logs.LOG_FORMAT))
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
            log.error(logs.FAILED, task, e)
            raise


@dataclass(frozen=True)
class _Context:
    """What the steps of one run share: the plan's header, the task's work, the frozen tokenizer, how it
    uses its CPUs."""

    output: Path
    job: Job
    work: Task
    tok_json: str
    parallelism: Parallelism
    started: float


@dataclass(frozen=True)
class Written:
    """One encoding of the task: its shard, its skips and the sidecar's ``backend`` record.  ``shard`` None:
    under ``auto`` the candidate's ids differed from hf's and nothing was published (the record says why;
    the caller writes the shard again with hf).  ``workers_rss``: the encoding workers' peak RSS."""

    shard: ShardResult | None
    skips: SkipLog
    record: BackendRecord
    workers_rss: int = 0


@dataclass(frozen=True)
class TaskCost:
    """What running the task cost (the sidecar's ``stats``): ``threads`` the CPUs it was given,
    ``peak_rss`` the task's with its encoding workers' (None: this process's), ``remote`` the requests,
    retries and bytes of its remote inputs (only for tasks that read any)."""

    elapsed: float
    threads: int
    peak_rss: int | None = None
    remote: RemoteReads | None = None


def _run(output: Path, job: Job, task: int, stop: StopFlag, progress: ProgressFn | None,
         threads: int | None, attempted: bool) -> TaskResult:
    reads_before = READS.snapshot()
    ctx = _load(output, job, task, threads)
    _remove_stale(output, task, attempted)
    opts = job.options
    if opts.chat is not None:
        written = _write_chat_shard(ctx, stop, progress)
    else:
        written = _write_text_shard(ctx, stop, progress)
    result, skips = written.shard, written.skips
    assert result is not None, "hf is the reference: it has nothing to fall back from"
    elapsed = time.perf_counter() - ctx.started
    if result.documents == 0:
        log.warning("task %d produced no documents (skipped: %s)", task, skips.counts)
    cost = TaskCost(elapsed, ctx.parallelism.threads, peak_rss=peak_rss_bytes() + written.workers_rss,
                    remote=_remote_reads(ctx.work, READS.snapshot().since(reads_before)))
    sidecar = build_sidecar(job, task, result, skips, written.record, ctx.work.items, cost)
    write_json_atomic(output / sidecar_name(task), sidecar.to_dict())
    log.info(logs.DONE, task, result.documents,
             result.tokens, result.bytes, skips.total, elapsed)
    return TaskResult(task, False, result.documents, result.tokens, sidecar)


def _write_text_shard(ctx: _Context, stop: StopFlag, progress: ProgressFn | None) -> Written:
    """Steps 3-4 for text: the backend asked for; under ``auto``, written again with ``hf`` when the
    candidate's ids differed from hf's."""
    opts = ctx.job.options
    opened = open_backend(opts.backend, ctx.tok_json, allow_special_tokens=opts.allow_special_tokens,
                          hf_threads=ctx.parallelism.threads)
    return _or_again_with_hf(lambda o: _write_shard(ctx, o, stop, progress), opened, lambda: _reference(ctx))


def _or_again_with_hf(write: Callable[[Opened], Written], opened: Opened, reference: Callable[[], Backend]) -> Written:
    """``write`` with ``opened``; when that wrote nothing (``auto``: the candidate's ids differ from hf's), again
    with ``reference`` (hf), keeping the first attempt's record (it says why)."""
    written = write(opened)
    if written.shard is None:
        again = write(Opened(reference(), opened.requested, candidate=False))
        written = replace(again, record=written.record, workers_rss=max(written.workers_rss, again.workers_rss))
    return written


def _write_chat_shard(ctx: _Context, stop: StopFlag, progress: ProgressFn | None) -> Written:
    """Steps 3-4 for chat data (``job.chat_encode``): conversations rendered with the plan's frozen template,
    their ids from the backend asked for (as the text path's: a fast candidate checked against
    ``tokenizers`` on sampled renders; under ``auto``, written again with hf when they differ), their
    trained ranges written in this process."""
    from shardprep.job.chat_encode import chat_encoder, chat_reference, open_chat_backend
    from shardprep.job.chat_plan import frozen_template

    opts = ctx.job.options
    assert opts.chat is not None
    encoder = chat_encoder(ctx.tok_json, frozen_template(ctx.output, opts.chat), opts.chat)
    reference = chat_reference(ctx.tok_json, ctx.parallelism.threads)
    opened = open_chat_backend(opts.backend, ctx.tok_json, reference, placeable=encoder.placeable)
    return _or_again_with_hf(lambda o: _write_chat(ctx, encoder, o, reference, stop, progress), opened,
                             lambda: reference)


def _write_chat(ctx: _Context, encoder: ChatEncoder, opened: Opened, reference: Backend, stop: StopFlag,
                progress: ProgressFn | None) -> Written:
    """One encoding of a chat task with ``opened``'s ids (``Written.shard`` None: they differed from hf's)."""
    from shardprep.job.chat_encode import ChatTaskEncoder, SampledIds, chat_skip_log, with_ids

    job, opts = ctx.job, ctx.job.options
    assert opts.chat is not None
    ids = SampledIds(opened.backend) if opened.candidate else None
    log.info(logs.BACKEND + " (%s)", ctx.work.index, opened.backend.describe(),
             "checked against hf as it encodes" if opened.candidate else "the reference")
    skips = chat_skip_log(opts.strict)
    with ShardWriter(ctx.output / shard_name(ctx.work.index), task=ctx.work.index, layout=opts.layout,
                     dtype=job.tokenizer.dtype, chunk_tokens=opts.chunk_tokens, chat=True) as writer:
        counted = Progress(ctx.work.index, ctx.work.input_bytes, progress)
        ChatTaskEncoder(with_ids(encoder, ids), opts.chat).encode(ctx.work, opts, writer, stop, counted, skips)
        shard, record = _settle(ctx, opened, ids.sampler if ids else None, writer, counted, reference, special=True)
        return Written(shard, skips, record)


def _load(output: Path, job: Job, task: int, threads: int | None) -> _Context:
    """Step 1: the task's work from the frozen plan, its inputs unchanged, the frozen tokenizer intact."""
    started = time.perf_counter()
    work = read_task(output, job, task)
    log.info(logs.STARTED, task, os.getpid(), os.uname().nodename, ", ".join(i.describe() for i in work.items))
    _check_inputs_unchanged(work)
    connect_ahead(i.input for i in work.items)        # remote inputs: while the tokenizer loads
    tok_json = read_frozen_tokenizer(output, job)
    cpus = threads or usable_cpus()
    set_tokenizer_threads(cpus)
    keep_freed_memory()
    return _Context(output, job, work, tok_json, Parallelism.for_task(cpus, strict=job.options.strict), started)


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


def _reference(ctx: _Context, special: bool | None = None) -> Backend:
    """``hf`` as the task runs it (on its threads): the reference a candidate is checked against;
    ``special``: whether special-token strings are matched (default: the job's ``--allow-special-tokens``)."""
    allow = ctx.job.options.allow_special_tokens if special is None else special
    return BACKENDS["hf"](ctx.tok_json, allow, threads=ctx.parallelism.threads)


def _encoder(ctx: _Context, backend: Backend, meanwhile: Callable[[], None] | None) -> Encoder:
    """How ``backend`` encodes the task: in worker processes (``job.parallel``: multiprocessing, only for a
    fast backend with several CPUs) or in this process."""
    if ctx.parallelism.forks(backend):
        from shardprep.job.parallel import ParallelEncoder

        return ParallelEncoder(ctx.parallelism.processes, meanwhile=meanwhile)
    return InlineEncoder()


def _write_shard(ctx: _Context, opened: Opened, stop: StopFlag, progress: ProgressFn | None) -> Written:
    """Steps 3-4: every document encoded and written; a fast backend's ids compared with hf's on documents
    sampled throughout the task.  Under ``auto``, when the ids differ, nothing is published
    (``Written.shard`` None)."""
    job, opts = ctx.job, ctx.job.options
    bounds = Boundaries(job.tokenizer.bos_id if opts.add_bos else None, job.tokenizer.eos_id if opts.add_eos else None)
    log.info(logs.BACKEND + " (%s), %s", ctx.work.index, opened.backend.describe(),
             "checked against hf as it encodes" if opened.candidate else "the reference",
             ctx.parallelism.describe(opened.backend))
    reference: list[Backend] = []       # hf, loaded while the workers encode (it is needed by the check)

    def load_reference() -> None:
        reference.append(_reference(ctx))

    with ShardWriter(ctx.output / shard_name(ctx.work.index), task=ctx.work.index, layout=opts.layout,
                     dtype=job.tokenizer.dtype, chunk_tokens=opts.chunk_tokens) as writer:
        enc = Encoding(ctx.work, opts, opened.backend, bounds, writer, stop,
                       Progress(ctx.work.index, ctx.work.input_bytes, progress),
                       Sampler() if opened.candidate else None, SkipLog(strict=opts.strict))
        encoded = _encoder(ctx, opened.backend, load_reference if opened.candidate else None).encode(enc)
        shard, record = _settle(ctx, opened, enc.sampler, writer, enc.progress, reference[0] if reference else None,
                                special=opts.allow_special_tokens)
        return Written(shard, enc.skips, record, encoded.workers_rss)


def _settle(ctx: _Context, opened: Opened, sampler: Sampler | None, writer: ShardWriter, progress: Progress,
            reference: Backend | None, special: bool) -> tuple[ShardResult | None, BackendRecord]:
    """Step 4: a candidate's ids compared with hf's (``reference``) on the documents ``sampler`` kept; the
    shard published when they match or hf wrote it, else dropped and its progress taken back (under
    ``auto``; a candidate asked for by name fails the task: ``backend_record``)."""
    check = None
    if sampler is not None:
        check = check_candidate(opened, ctx.tok_json, allow_special_tokens=special, sample_texts=sampler.first,
                                recorded=sampler.recorded, plan_check=ctx.job.backend_check,
                                fingerprint=ctx.job.tokenizer.fingerprint,
                                reference=reference or _reference(ctx, special))
    record = backend_record(opened, check)
    log.info(logs.BACKEND, ctx.work.index, record)
    if record.name != opened.backend.name:
        writer.abort()
        progress.undo()
        return None, record
    return writer.close(), record


def _remote_reads(work: Task, counts: ReadCounts) -> RemoteReads | None:
    """What reading the task's remote inputs cost (the sidecar's ``stats.remote``, and the task log)."""
    if not any(is_url(i.input.path) for i in work.items):
        return None
    log.info(logs.REMOTE_READS, work.index, counts.requests, counts.retries, counts.bytes)
    return RemoteReads(counts.requests, counts.retries, counts.bytes)


def build_sidecar(job: Job, task: int, result: ShardResult, skips: SkipLog, backend_info: BackendRecord | None,
                  items: Sequence[TaskItem], cost: TaskCost) -> Sidecar:
    """Step 5: the sidecar of a written shard (public: the scaling benchmark synthesizes sidecars with it)."""
    opts, tok = job.options, job.tokenizer
    elapsed, peak_rss = cost.elapsed, cost.peak_rss
    origins = None if result.origins is None else encode_origins(result.origins)
    return Sidecar.holding(
        result, format_version=format_version(opts.chat is not None, origins=origins is not None),
        created_by=CREATED_BY, task=task, shard=shard_name(task), origins_record=origins,
        plan_fingerprint=job.fingerprint, tokenizer_fingerprint=tok.fingerprint, layout=opts.layout,
        dtype=tok.dtype, chunks=result.chunks, skipped=skips.counts,
        trained_tokens=result.trained_tokens if result.chunks.chat else None,
        skipped_examples=tuple(skips.examples), warnings=tuple(skips.warnings),
        inputs=tuple(i.sidecar_input() for i in items),
        backend=backend_info or BackendRecord(None, requested=opts.backend),
        stats=TaskStats(elapsed_s=round(elapsed, 3),
                        tokens_per_s=round(result.tokens / elapsed, 1) if elapsed > 0 else None,
                        threads=cost.threads, peak_rss_bytes=peak_rss_bytes() if peak_rss is None else peak_rss,
                        host=os.uname().nodename, slurm_job=os.environ.get("SLURM_JOB_ID"), remote=cost.remote),
    )
