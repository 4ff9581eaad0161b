"""Local executor: tasks in a process pool on this machine, then finalize.

Processes, not threads: each task owns one tokenizer with its share of the CPUs.  The workers are forked
from a fork server (multiprocessing's ``forkserver``): a fresh interpreter started once per process, which
imports the task's modules once and has never used a tokenizer, so no worker inherits a Rust thread pool
from a parent that already used one (fork-after-use is the classic tokenizers deadlock), and no worker pays
an interpreter's start and the task's imports again (~0.3 s each with ``spawn``).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from shardprep import errors
from shardprep.errors import ConfigError, IncompleteError, ShardprepError
from shardprep.executor.base import LaunchReport
from shardprep.executor.local_workers import WorkerEvents, describe_deaths, init_worker, run_in_worker, stop_workers
from shardprep.job.advice import rerun_advice
from shardprep.job.finalize import finalize
from shardprep.job.resources import usable_cpus
from shardprep.shard.format import shard_name, sidecar_name
from shardprep.storage.atomic import remove_stale_temps

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.executor.slurm.jobs import Submission

log = logging.getLogger(__name__)


# What the fork server imports before it forks a worker: first the guard that makes it die with this process.
# ``tokenizers`` too (~40 ms a worker otherwise): imported, never used, so no worker inherits a used Rust
# thread pool (rayon starts its pool at the first parallel encode, reading the thread count then).  And
# the modules every text task imports next (~7 ms a worker), and a chat task's encoder with jinja2 (~60 ms
# once per fork server; ~90 ms in every chat worker otherwise).  Not gigatoken nor our module over it: both
# register a fork hook that marks a child as forked, and a forked gigatoken encodes on one thread.
PRELOAD = ["shardprep.executor.forkserver_guard", "shardprep.executor.local_workers", "shardprep.job.task",
           "tokenizers", "shardprep.storage.mounts", "shardprep.tokenizer.plan_check",
           "shardprep.tokenizer.verify_backend", "shardprep.job.chat_encode"]


def pool_context() -> mp.context.BaseContext:
    """The workers' start method: a fork server where the platform has one, else ``spawn``."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    from shardprep.executor.forkserver_guard import POOL_PID

    os.environ[POOL_PID] = str(os.getpid())     # read by the server when it starts (the first pool only)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


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
    Options = LocalOptions

    def __init__(self, options: LocalOptions | None = None, *, finalize: bool = True):
        self.options = options or LocalOptions()
        self.finalize = finalize

    @classmethod
    def options_for(cls, given: Mapping[str, Any], last: Submission | None) -> LocalOptions:
        """The options given; nothing of a recorded Slurm submission applies to a local run."""
        return LocalOptions(**given)

    def task_slots(self) -> tuple[int, str]:
        """The worker processes: ``--workers``, else the CPUs this process may use."""
        workers = self.options.workers
        return (workers, "--workers") if workers else (usable_cpus(), "this machine's CPUs")

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        from shardprep.executor.slurm.state import refuse_if_active

        # A Slurm array of this plan may still be running: its tasks' temporary shards are not ours to
        # remove (the same refusal as a second Slurm submission; reads slurm/jobs.json only when present)
        refuse_if_active(Path(output), list(task_ids))
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
        ctx = pool_context()
        stop = ctx.RawValue("b", 0)
        monitor = WorkerEvents(*ctx.Pipe(duplex=False), len(task_ids), self.options.show_progress)
        monitor.start()
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                                   initargs=(os.getpid(), monitor.events, stop, dict(os.environ), os.getcwd()))
        processes: list = []
        failures: list[tuple[str, str]] = []   # (message, error class name)
        try:
            pending = {pool.submit(run_in_worker, str(output), t, threads) for t in task_ids}
            processes = list(getattr(pool, "_processes", {}).values())  # spawned by submit; no public API
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    task, status, message, error, warnings = fut.result()
                    monitor.finished(task, status)
                    for warning in warnings:   # also in the task log and the sidecar
                        log.warning("task %d: %s", task, warning)
                    if status == "error":
                        failures.append((f"task {task}: {message} (log: {output}/logs/task-{task:05d}.log)", error))
        except BaseException as e:  # Ctrl-C, a killed worker, anything: stop now, do not drain the queue
            running = monitor.running_tasks()
            stop_workers(processes or list(getattr(pool, "_processes", {}).values()), stop)
            pool.shutdown(wait=True, cancel_futures=True)
            _drop_unfinished(output, task_ids)
            if isinstance(e, BrokenProcessPool):
                raise IncompleteError(f"a local worker died: {describe_deaths(processes, running)}",
                                      hint=f"finished shards are kept; `shardprep submit --resume {output}` "
                                           f"runs the rest") from None
            raise
        else:
            pool.shutdown(wait=True)
        finally:
            monitor.stop()
        if failures:
            raise task_failure(failures, output)


def task_failure(failures: list[tuple[str, str]], output: Path) -> ShardprepError:
    """One error for the failed tasks, keeping their own class (and exit code) when they agree.

    Why: ``run-task`` exits 3 on bad input; a local ``submit`` of the same plan must say 3 as well, not
    the generic 5 ("incomplete").  Tasks failing for different reasons (or crashing) give 5.
    """
    found = {getattr(errors, error, None) for _, error in failures}
    known = {c for c in found if isinstance(c, type) and issubclass(c, ShardprepError)}
    cls = next(iter(known)) if len(found) == 1 and known else IncompleteError
    messages = sorted(m for m, _ in failures)
    codes = {c.exit_code for c in known} if known == found else None     # None: a crash among them
    return cls(f"{len(failures)} task(s) failed: " + "; ".join(messages[:5]), hint=rerun_advice(output, codes))


def _drop_unfinished(output: Path, task_ids: list[int]) -> None:
    """After the workers are gone: no temporary file, and no shard without its sidecar, of our tasks.

    A worker killed in its last moments (shard renamed, sidecar not yet written) would otherwise leave an
    unconfirmed shard; a re-run redoes it anyway, but until then it must not look finished.
    """
    for task in task_ids:
        remove_stale_temps(output, shard_name(task))
        remove_stale_temps(output, sidecar_name(task))
        if not (output / sidecar_name(task)).exists():
            (output / shard_name(task)).unlink(missing_ok=True)
