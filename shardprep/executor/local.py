"""Local executor: tasks in a process pool on this machine, then finalize.

Processes, not threads: each task owns one tokenizer with its share of the CPUs.  The pool uses the
``spawn`` start method so no worker inherits a Rust thread pool from a parent that already used one
(fork-after-use is the classic tokenizers deadlock).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from shardprep.errors import ConfigError, IncompleteError, ShardprepError
from shardprep.executor.base import LaunchReport
from shardprep.job.finalize import finalize
from shardprep.job.resources import usable_cpus

log = logging.getLogger(__name__)


def _worker(output: str, task: int, threads: int, progress_q) -> tuple[int, str, str]:
    """Runs in a child process; returns (task, status, message) so nothing needs to unpickle exceptions."""
    from shardprep.job.task import run_task

    pending = [0, 0, time.monotonic()]

    def progress(docs: int, tokens: int) -> None:
        pending[0] += docs
        pending[1] += tokens
        if progress_q is not None and time.monotonic() - pending[2] > 0.3:
            progress_q.put((pending[0], pending[1]))
            pending[:] = [0, 0, time.monotonic()]

    try:
        result = run_task(Path(output), task, progress=progress, threads=threads)
        if progress_q is not None and (pending[0] or pending[1]):
            progress_q.put((pending[0], pending[1]))
        return task, "skipped" if result.skipped_existing else "done", ""
    except ShardprepError as e:
        return task, "error", f"{type(e).__name__}: {e}"
    except Exception as e:  # a bug: keep the type and message, the task log has the traceback
        logging.getLogger(__name__).exception("task %d crashed", task)
        return task, "error", f"{type(e).__name__}: {e}"


@dataclass(frozen=True)
class LocalOptions:
    """How the local executor runs tasks (nothing here changes shard bytes)."""

    workers: int | None = None      # parallel task processes; None: the CPUs this process may use
    show_progress: bool = True      # tasks, documents/s and tokens/s on stderr

    def __post_init__(self) -> None:
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ConfigError(f"--workers {self.workers!r} must be a positive integer")


class LocalExecutor:
    """Run tasks here with ``workers`` processes, each with ``cpus // workers`` tokenizer threads."""

    name = "local"

    def __init__(self, options: LocalOptions | None = None, *, finalize: bool = True):
        self.options = options or LocalOptions()
        self.finalize = finalize

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        report = LaunchReport(self.name, list(task_ids))
        if dry_run:
            log.info("dry run: would run %d task(s) locally", len(task_ids))
            return report
        if task_ids:
            self._run_all(Path(output), list(task_ids))
        if self.finalize:
            finalize(Path(output))
            report.finalized = True
        return report

    def _run_all(self, output: Path, task_ids: list[int]) -> None:
        cpus = usable_cpus()
        workers = max(1, min(self.options.workers or cpus, len(task_ids)))
        threads = max(1, cpus // workers)
        log.info("running %d task(s) with %d process(es) x %d thread(s)", len(task_ids), workers, threads)
        ctx = mp.get_context("spawn")
        manager = ctx.Manager() if self.options.show_progress else None
        progress_q = manager.Queue() if manager else None
        bar_stop = threading.Event()
        bar_thread = None
        if progress_q is not None:
            bar_thread = threading.Thread(target=_progress_bar, args=(progress_q, bar_stop, len(task_ids)), daemon=True)
            bar_thread.start()
        failures: list[str] = []
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futures = [pool.submit(_worker, str(output), t, threads, progress_q) for t in task_ids]
                for fut in as_completed(futures):
                    task, status, message = fut.result()
                    if progress_q is not None:
                        progress_q.put(("task", task, status))
                    if status == "error":
                        failures.append(f"task {task}: {message} (log: {output}/logs/task-{task:05d}.log)")
        finally:
            bar_stop.set()
            if bar_thread:
                bar_thread.join()
            if manager:
                manager.shutdown()
        if failures:
            raise IncompleteError(f"{len(failures)} task(s) failed: " + "; ".join(sorted(failures)[:5]),
                                  hint=f"fix the cause, then `shardprep submit --resume {output}`")


def _progress_bar(q, stop: threading.Event, n_tasks: int) -> None:
    """Tasks, documents/s and tokens/s on stderr (tqdm), fed by the workers through a queue."""
    from tqdm import tqdm

    docs = tokens = 0
    start = time.monotonic()
    with tqdm(total=n_tasks, unit="task", desc="tokenize", dynamic_ncols=True, mininterval=0.5) as bar:
        while not (stop.is_set() and q.empty()):
            try:
                msg = q.get(timeout=0.2)
            except queue.Empty:
                continue
            if msg[0] == "task":
                bar.update(1)
            else:
                docs += msg[0]
                tokens += msg[1]
                dt = max(time.monotonic() - start, 1e-6)
                bar.set_postfix_str(f"{docs / dt:,.0f} docs/s, {tokens / dt / 1e6:,.2f}M tok/s", refresh=False)
