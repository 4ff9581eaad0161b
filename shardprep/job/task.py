"""One array task, end to end: read the frozen plan, stream the task's documents, tokenize, write one
shard atomically, then its sidecar.

This is the single code path every executor runs (local process pool, sbatch array, submitit), in the
spirit of datatrove's ``_run_for_rank``: the executor only decides *where* this runs.

Safe points: between batches the task checks a stop flag set by SIGUSR1/SIGTERM (Slurm's pre-timeout
signal and scancel).  On stop it drops its temporary shard and raises ``Preempted`` (exit 75) so the job
can be requeued; nothing half-written ever carries a final name.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from shardprep import __version__
from shardprep.job.options import TokenizeOptions
from shardprep.errors import InputDataError, Preempted, TokenizerError
from shardprep.storage.atomic import remove_stale_temps, write_json_atomic
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import changed_since_planned
from shardprep.inputs.readers import SkipLog, WorkItem, iter_documents
from shardprep.job.state import load_job, read_sidecar, sidecar_problem
from shardprep.job.resources import peak_rss_bytes, set_tokenizer_threads, usable_cpus
from shardprep.shard.format import FORMAT_VERSION, LOG_DIR, TOKENIZER_FILE, shard_name, sidecar_name
from shardprep.shard.writer import ShardWriter
from shardprep.tokenizer.backend import add_boundary_tokens, select_backend
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
    sidecar: dict


class StopFlag:
    """Set by the pre-timeout signal; polled by the task between batches."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""

    def set(self, signum: int, _frame=None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()


def _install_stop_handlers(stop: StopFlag) -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, stop.set) for s in (signal.SIGUSR1, signal.SIGTERM)}


def _check_inputs_unchanged(inputs: list[InputFile], items: list[WorkItem]) -> None:
    for item in items:
        inp = inputs[item.input]
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


def _batches(inputs: list[InputFile], items: list[WorkItem], opts: TokenizeOptions,
             skips: SkipLog, limits: BatchLimits) -> Iterator[list[str]]:
    batch: list[str] = []
    append = batch.append
    size = 0
    for item in items:
        for text in iter_documents(inputs[item.input], item, opts, skips):
            append(text)
            size += len(text)
            if size >= limits.chars or len(batch) >= limits.docs:
                yield batch
                batch, size = [], 0
                append = batch.append
    if batch:
        yield batch


def _attach_task_log(output: Path, task: int) -> logging.Handler:
    (output / LOG_DIR).mkdir(exist_ok=True)
    handler = logging.FileHandler(output / LOG_DIR / f"task-{task:05d}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("shardprep").addHandler(handler)
    logging.getLogger("shardprep").setLevel(logging.INFO)
    return handler


def run_task(output: Path, task: int, *, progress: ProgressFn | None = None,
             threads: int | None = None) -> TaskResult:
    """Run task ``task`` of the plan in ``output``.  Idempotent: a finished task is not redone."""
    output = Path(output)
    job = load_job(output)
    if not 0 <= task < len(job["tasks"]):
        raise InputDataError(f"task {task} does not exist: the plan in {output} has {len(job['tasks'])} tasks")
    existing = read_sidecar(output, task)
    if sidecar_problem(output, job, task, existing) is None:
        log.info("task %d already done (%s); skipping", task, shard_name(task))
        return TaskResult(task, True, existing["documents"], existing["tokens"], existing)  # type: ignore[index]

    handler = _attach_task_log(output, task)
    stop = StopFlag()
    previous = _install_stop_handlers(stop)
    try:
        return _run(output, job, task, stop, progress, threads)
    except Exception as e:
        log.error("task %d failed: %s", task, e)
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        logging.getLogger("shardprep").removeHandler(handler)
        handler.close()


def _run(output: Path, job: dict, task: int, stop: StopFlag, progress: ProgressFn | None,
         threads: int | None) -> TaskResult:
    started = time.perf_counter()
    opts = TokenizeOptions.from_dict(job["options"])
    tok_info = job["tokenizer"]
    inputs = [InputFile.from_dict(d) for d in job["inputs"]]
    items = [WorkItem.from_dict(d) for d in job["tasks"][task]]
    log.info("task %d: %s", task, ", ".join(f"{inputs[i.input].path}[{i.start}:{i.end}]" for i in items))
    _check_inputs_unchanged(inputs, items)

    # A previous run of this task may have left a temporary file or an unconfirmed final shard.
    remove_stale_temps(output, shard_name(task))
    remove_stale_temps(output, sidecar_name(task))
    for stale in (output / sidecar_name(task), output / shard_name(task)):
        stale.unlink(missing_ok=True)

    try:
        tok_json = (output / TOKENIZER_FILE).read_text(encoding="utf-8")
    except OSError as e:
        raise TokenizerError(f"{output / TOKENIZER_FILE} is not readable: {e.strerror}") from None
    check_frozen_tokenizer(tok_json, tok_info, output / TOKENIZER_FILE)
    n_threads = threads or usable_cpus()
    set_tokenizer_threads(n_threads)
    bos = tok_info["bos_id"] if opts.add_bos else None
    eos = tok_info["eos_id"] if opts.add_eos else None

    skips = SkipLog(strict=opts.strict)
    writer = ShardWriter(output / shard_name(task), task=task, layout=opts.layout, dtype=tok_info["dtype"],
                         chunk_tokens=opts.chunk_tokens)
    backend = backend_info = None
    limits = BatchLimits()
    with writer:
        for batch in _batches(inputs, items, opts, skips, limits):
            if backend is None:  # chosen on the task's own first batch (auto verifies against hf on it)
                backend, backend_info = select_backend(opts.backend, tok_json,
                                                       allow_special_tokens=opts.allow_special_tokens,
                                                       sample_texts=batch)
                limits.chars = getattr(backend, "batch_chars", BATCH_BYTES)
                limits.docs = getattr(backend, "batch_docs", BATCH_DOCS)
                log.info("task %d: backend %s, %d thread(s)", task, backend_info, n_threads)
            flat, lengths = backend.encode_batch(batch)
            flat, lengths = add_boundary_tokens(flat, lengths, bos, eos)
            writer.add(flat, lengths)
            if progress:
                progress(len(lengths), int(flat.size))
            if stop:
                raise Preempted(f"task {task} stopped on {stop.signal_name} at a safe point; "
                                f"temporary shard removed, safe to requeue")
        result = writer.close()

    elapsed = time.perf_counter() - started
    if result.documents == 0:
        log.warning("task %d produced no documents (skipped: %s)", task, skips.counts)
    sidecar = {
        "format_version": FORMAT_VERSION,
        "created_by": f"shardprep {__version__}",
        "task": task,
        "shard": shard_name(task),
        "plan_fingerprint": job["fingerprint"],
        "tokenizer_fingerprint": tok_info["fingerprint"],
        "layout": opts.layout,
        "dtype": tok_info["dtype"],
        "bytes": result.bytes,
        "sha256": result.sha256,
        "samples": result.samples,
        "documents": result.documents,
        "tokens": result.tokens,
        "chunks": result.chunks.as_dict(),
        "skipped": skips.counts,
        "skipped_examples": skips.examples,
        **({"warnings": skips.warnings} if skips.warnings else {}),   # inputs.health; absent when none
        "inputs": [{"path": inputs[i.input].path, **{k: v for k, v in i.to_dict().items() if k != "input"}}
                   for i in items],
        "backend": backend_info or {"name": None, "requested": opts.backend, "check": None},
        "stats": {
            "elapsed_s": round(elapsed, 3),
            "tokens_per_s": round(result.tokens / elapsed, 1) if elapsed > 0 else None,
            "threads": n_threads,
            "peak_rss_bytes": peak_rss_bytes(),
            "host": os.uname().nodename,
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
        },
    }
    write_json_atomic(output / sidecar_name(task), sidecar)
    log.info("task %d done: %d documents, %d tokens, %d bytes, %d skipped, %.1fs", task, result.documents,
             result.tokens, result.bytes, skips.total, elapsed)
    return TaskResult(task, False, result.documents, result.tokens, sidecar)
