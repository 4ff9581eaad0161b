"""The whole job's progress: wall time, throughput so far and an ETA for the job as a whole.

The one estimate behind ``shardprep status`` (text and ``--json``) and ``shardprep report``.  It is
measured on the job, not on a task: planned input bytes done / wall time since the first task started.
That rate already holds how many tasks really ran at once, the time a task spends starting, queueing
and waiting for its wave of a throttled array, none of which a task's own tokens/s (its sidecar's
``elapsed_s``) sees.  The ETA assumes the rest of the job goes at the same rate: the planned input bytes
not done yet / that rate.  Work is counted in planned input bytes because the plan knows them for every
task before it runs (tokens are known only for done tasks); a shard of twice the input counts twice.  A
running task counts the input it has read so far (its log's last progress line, ``job.logs``), so a job
whose first tasks are still running shows its progress and an ETA before any of them is done.

Sources, all files of the output directory: the sidecars (which tasks are done, their tokens and task
seconds; ``job.state``), the plan's task records (planned input bytes per task; ``job.plan_files``) and
the task logs (when the first attempt started, when each task's last attempt ended, and which tasks run
now; ``job.logs``).  A job that went through Slurm says what is running or pending through squeue
(``executor.slurm.state``), which the caller passes in.  There is no ETA (``eta_s`` None, and
``eta_basis`` says why) before any input is read, without task logs, or when nothing runs or waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Mapping, Protocol, Sequence

from shardprep.job.plan_files import TaskTable
from shardprep.job.schema import Job
from shardprep.records import Record
from shardprep.units import human_bytes


class Finished(Protocol):
    """What the estimate reads of a done task's sidecar (``SidecarSummary``, the report's ``Sidecar``)."""

    @property
    def tokens(self) -> int: ...

    @property
    def elapsed_s(self) -> float | None: ...


class Attempts(Protocol):
    """What the estimate reads of a task's log (``job.logs.TaskLog``)."""

    @property
    def first_started(self) -> float | None: ...

    @property
    def ended(self) -> float | None: ...

    @property
    def status(self) -> str: ...

    @property
    def read_bytes(self) -> int: ...


class Queue(Protocol):
    """What the estimate reads of a scheduler's view of the job (``executor.slurm.state.SlurmView``)."""

    def ids(self, state: str) -> list[int]: ...


@dataclass(frozen=True)
class JobProgress(Record):
    """Done work, the wall time it took and the ETA of the rest (epoch seconds, bytes, tokens); written
    (``status --json``, ``report``'s numbers) with the rates derived from them."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "tasks", "done", "running", "pending", "input_bytes", "done_bytes", "running_bytes", "tokens", "task_s",
        "started_at", "finished_at", "elapsed_s", "eta_s", "eta_basis", "work_bytes", "work_done",
        "input_bytes_per_s", "tokens_per_s", "tasks_per_min", "parallelism")

    tasks: int
    done: int
    running: tuple[int, ...]      # tasks running now (squeue, else logs without an end line)
    pending: int                  # tasks waiting in Slurm's queue (0 without Slurm: not known)
    input_bytes: int              # planned input bytes of the whole job (0: unknown)
    done_bytes: int               # planned input bytes of the done tasks
    running_bytes: int            # input bytes the running tasks have read so far (their logs' progress lines)
    tokens: int                   # tokens of the done tasks
    task_s: float                 # the done tasks' own seconds (sidecars' elapsed_s), summed
    started_at: float | None      # the first record of any task log: the first task's first attempt
    finished_at: float | None     # complete jobs: the last done task's end
    elapsed_s: float | None       # wall time from started_at to now (to the last end once nothing runs)
    eta_s: float | None
    eta_basis: str                # what eta_s is computed from, or why there is none

    @property
    def work_bytes(self) -> int:
        """Planned input bytes done, the running tasks' share so far included."""
        return self.done_bytes + self.running_bytes

    @property
    def work_done(self) -> float | None:
        return self.work_bytes / self.input_bytes if self.input_bytes else None

    def _per_s(self, amount: float) -> float | None:
        return amount / self.elapsed_s if self.elapsed_s else None

    @property
    def input_bytes_per_s(self) -> float | None:
        return self._per_s(self.work_bytes) if self.input_bytes else None

    @property
    def tokens_per_s(self) -> float | None:
        return self._per_s(self.tokens)

    @property
    def tasks_per_min(self) -> float | None:
        rate = self._per_s(self.done)
        return None if rate is None else rate * 60

    @property
    def parallelism(self) -> float | None:
        """Task seconds per wall second: how many tasks ran at once on average (start-up excluded)."""
        return self._per_s(self.task_s) if self.task_s else None


def planned_input_bytes(output: Path, job: Job) -> list[int]:
    """Input bytes of every planned task, in task order (one pass over ``plan/``; 10,000 tasks: ~0.1 s)."""
    with TaskTable(output, job) as table:
        return [task.input_bytes for task in table]


def running_from_logs(done: Mapping[int, object], logs: Mapping[int, Attempts]) -> list[int]:
    """Tasks not done whose log's last attempt has no end line: running (or killed without a word)."""
    return sorted(t for t, lg in logs.items() if t not in done and lg.status == "running")


def activity(done: Mapping[int, object], logs: Mapping[int, Attempts],
             queue: Queue | None) -> tuple[list[int], int]:
    """(tasks running, how many pending) now: squeue's word for a job submitted to Slurm (``queue``, the
    Slurm view), else the task logs (a local pool's queue is not on disk: pending is 0)."""
    if queue is not None:
        return queue.ids("running"), len(queue.ids("pending"))
    return running_from_logs(done, logs), 0


def estimate(n_tasks: int, planned: Sequence[int], done: Mapping[int, Finished], logs: Mapping[int, Attempts],
             now: float, *, running: Sequence[int], pending: int = 0) -> JobProgress:
    """The job's progress at ``now`` (epoch seconds).

    ``planned``: input bytes per task (empty when the plan is not at hand, e.g. a remote output);
    ``done``: task -> its sidecar; ``logs``: task -> its log; ``running``/``pending``: tasks running and
    waiting now (``activity``: from squeue for Slurm jobs, else from the logs).
    """
    total = sum(planned)
    done_bytes = sum(planned[t] for t in done if t < len(planned))
    partial = sum(min(planned[t], logs[t].read_bytes) for t in running
                  if t not in done and t in logs and t < len(planned))
    firsts = [lg.first_started for lg in logs.values() if lg.first_started is not None]
    ends = [lg.ended for lg in logs.values() if lg.ended is not None]
    done_ends = [lg.ended for t, lg in logs.items() if t in done and lg.ended is not None]
    complete = len(done) >= n_tasks
    started = min(firsts) if firsts else None
    finished = max(done_ends) if complete and done_ends else None
    active = len(running) + pending > 0
    stop = finished if finished is not None else (now if active or not ends else max(ends))
    elapsed = max(0.0, stop - started) if started is not None else None
    eta, basis = _eta(complete, len(done), total - done_bytes - partial, done_bytes + partial, elapsed, len(running),
                      pending)
    tokens, task_s = sum(s.tokens for s in done.values()), sum(s.elapsed_s or 0.0 for s in done.values())
    return JobProgress(n_tasks, len(done), tuple(sorted(running)), pending, total, done_bytes, partial, tokens,
                       task_s, started, finished, elapsed, eta, basis)


def _eta(complete: bool, n_done: int, left: int, work_bytes: int, elapsed: float | None, running: int,
         pending: int) -> tuple[float | None, str]:
    """Seconds until the job is done at the rate it went so far (``work_bytes``: the done tasks' planned input
    and what the running ones have read), with what that is computed from."""
    if complete:
        return 0.0, "every task is done"
    if n_done == 0 and work_bytes <= 0:
        return None, "no task is done yet, and no running task has read any input"
    if elapsed is None:
        return None, "no task logs (logs/task-NNNNN.log): no timing"
    if running + pending == 0:
        return None, "nothing running or pending: the job is stopped; `shardprep submit --resume` reruns the rest"
    if work_bytes <= 0 or elapsed <= 0:
        return None, "the planned input of the done tasks is unknown or empty"
    rate = work_bytes / elapsed
    now = f"{running} running" + (f", {pending} pending" if pending else "")
    return left / rate, (f"{human_bytes(left)} of input left at {human_bytes(rate)}/s, the job's rate since its "
                         f"first task started; {now}")
