"""The Slurm view of ``shardprep status``: sidecars joined with squeue, sacct (when enabled) and logs.

Truth is the output directory.  A task is *done* only when its sidecar checks out (``job.state``); Slurm
is asked only what the files cannot say about the other tasks: is it pending or running right now, and
how did its last attempt end.  The sources, in order of trust for a task that is not done:

1. ``squeue`` for its latest array element (pending/running, or recently ended: slurmctld keeps ended
   jobs for MinJobAge, 300 s by default);
2. ``sacct`` when accounting is enabled (often it is not; then this step is skipped silently);
3. the element's log: the batch script's last line ``shardprep-task-exit: task=T status=S`` (non-zero S
   means failed); a log without that line means the attempt was killed (cancelled, time limit, node).

Attempts come from the log too: the template starts each attempt with ``attempt N`` (``SLURM_RESTART_COUNT
+ 1``), and a task that hit its time limit once more than ``--max-requeues`` allows ends with
``shardprep-task-gave-up: ...`` and counts as failed, with the advice to raise ``--time`` or use smaller tasks.

Tasks that are neither done, queued nor failed are *missing*; ``submit --resume`` reruns all not-done
tasks, so "missing" in the summary line is always every task without a valid sidecar.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardprep.errors import ConfigError
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.jobs import FinalizeRecord, TaskAttempt, latest_attempts, read_submissions
from shardprep.job.advice import rerun_advice, resume_command
from shardprep.job.state import JobState, format_array_ranges
from shardprep.shard.format import INDEX_FILE

EXIT_LINE = re.compile(r"^shardprep-task-exit: task=(\d+) status=(\d+)\s*$")
ATTEMPT_LINE = re.compile(r"^shardprep: task \d+ = array element \S+, attempt (\d+),")
SUBMITIT_FAILED = "Submitted job triggered an exception"
SUBMITIT_GAVE_UP = "timed-out too many times"
LOG_READ_BYTES = 1 << 20
RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING", "RESIZING"}
PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
FAILED = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
LOG_TAIL_LINES = 12


@dataclass
class TaskView:
    task: int
    state: str                    # done | running | pending | failed | missing
    detail: str = ""              # e.g. "exit 3", "CANCELLED", "no attempt recorded"
    attempt: TaskAttempt | None = None
    attempts: int = 0             # attempts of the latest array element (requeues + 1), from its log
    max_attempts: int | None = None   # --max-requeues + 1 of the submission that ran it
    exit_status: int | None = None    # the last attempt's exit status, from its log (3: bad input)


@dataclass
class SlurmView:
    tasks: dict[int, TaskView]
    submissions: int
    finalize: FinalizeRecord | None = None    # the last submission's finalize job
    finalize_state: str | None = None         # and what became of it (squeue/sacct, else the files)
    sources: list[str] = field(default_factory=list)

    def ids(self, state: str) -> list[int]:
        return sorted(t for t, v in self.tasks.items() if v.state == state)


@dataclass(frozen=True)
class LogSummary:
    """What a task's log says about its attempts (``--open-mode=append`` keeps every attempt in it)."""

    status: int | None = None     # exit status of the last attempt; None while it runs, or when it was killed
    attempts: int = 0             # attempts started
    gave_up: bool = False         # stopped at the time limit once more than --max-requeues allows


def read_task_log(path: Path) -> LogSummary:
    """Exit status, attempts and the requeue cap from a task's log (sbatch template or submitit)."""
    status, attempts, gave_up = None, 0, False
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_READ_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return LogSummary()
    for raw in lines:
        m = EXIT_LINE.match(raw)
        if m:
            status = int(m.group(2))
        elif SUBMITIT_FAILED in raw:
            status = 1
        elif raw.startswith("shardprep-task-gave-up:") or SUBMITIT_GAVE_UP in raw:
            gave_up = True
        else:
            start = ATTEMPT_LINE.match(raw)
            if start or (raw.startswith("submitit INFO") and "Starting with JobEnvironment" in raw):
                status, gave_up = None, False       # a later attempt (requeue) started
                attempts = int(start.group(1)) if start else attempts + 1
    return LogSummary(status, attempts, gave_up)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 32768))
            return f.read().decode("utf-8", "replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


def _classify(entry: slurm_cmd.QueueEntry) -> tuple[str, str] | None:
    if entry.state in RUNNING:
        return "running", entry.state
    if entry.state in PENDING:
        return "pending", f"{entry.state}" + (f" ({entry.reason})" if entry.reason and entry.reason != "None" else "")
    if entry.state in FAILED:
        return "failed", entry.state + (f" exit {entry.exit_code}" if entry.exit_code else "")
    return None   # COMPLETED without a sidecar, CANCELLED, ...: decided from the log below


def collect(output: Path, state: JobState) -> SlurmView | None:
    """Join sidecars with Slurm; None when the job was never submitted through a Slurm executor."""
    output = Path(output)
    submissions = read_submissions(output)
    if not submissions:
        return None
    attempts = latest_attempts(submissions)
    not_done = [t for t in range(state.n_tasks) if t not in state.done]
    job_ids = sorted({attempts[t].job_id for t in not_done if t in attempts})
    fin = submissions[-1].finalize
    query_ids = job_ids + ([fin.job_id] if fin else [])
    view = SlurmView({}, len(submissions), fin)

    queue = slurm_cmd.squeue(query_ids)
    acct = slurm_cmd.sacct(query_ids) if query_ids else None
    view.sources = ["sidecars", *(["squeue"] if queue is not None else []),
                    *(["sacct"] if acct is not None else []), "logs"]
    by_elem: dict[tuple[str, int | None], slurm_cmd.QueueEntry] = {}
    for entry in (acct or []) + (queue or []):          # squeue (live) overrides sacct
        by_elem[(entry.job_id, entry.index)] = entry
    if fin:
        e = by_elem.get((fin.job_id, None))
        view.finalize_state = e.state if e else _finalize_from_files(output, fin)

    caps = {sub.seq: sub.max_attempts for sub in submissions}
    for t in range(state.n_tasks):
        att = attempts.get(t)
        if t in state.done:
            view.tasks[t] = TaskView(t, "done")
        elif att is None:
            view.tasks[t] = TaskView(t, "missing", "never submitted through Slurm")
        else:
            view.tasks[t] = _task_view(output, t, att, by_elem.get(att.queue_key), caps.get(att.seq))
    return view


def _task_view(output: Path, t: int, att: TaskAttempt, entry: slurm_cmd.QueueEntry | None,
               max_attempts: int | None) -> TaskView:
    """A task that is not done: Slurm's word (squeue/sacct) when it has one, else its log's."""
    log = read_task_log(output / att.log)
    verdict = _classify(entry) if entry else None
    seen: dict[str, Any] = {"attempt": att, "attempts": log.attempts, "max_attempts": max_attempts,
                            "exit_status": log.status}
    if log.gave_up and (verdict is None or verdict[0] == "failed"):
        return TaskView(t, "failed", f"reached its time limit on all {log.attempts} attempt(s): raise --time or "
                                     "use smaller tasks (--target-task-bytes)", **seen)
    if verdict:
        failed_with = f", exit {log.status}" if verdict[0] == "failed" and log.status else ""
        return TaskView(t, verdict[0], verdict[1] + failed_with, **seen)
    if log.status:
        return TaskView(t, "failed", f"exit {log.status}", **seen)
    if entry is not None:
        return TaskView(t, "missing", entry.state, **seen)
    why = "ended without a shard" if log.status == 0 else (
        "killed or cancelled" if (output / att.log).exists() else "no log: never started or cancelled")
    return TaskView(t, "missing", why, **seen)


def _finalize_from_files(output: Path, fin: FinalizeRecord) -> str:
    """Finalize's outcome once Slurm forgot the job: from index.json and its log."""
    if (output / INDEX_FILE).exists():
        return "ended (index.json written)"
    if fin.log and (output / fin.log).exists():
        return f"ended without index.json (see {fin.log})"
    return "did not run (cancelled because a task failed, or never started)"


def format_view(output: Path, view: SlurmView) -> list[str]:
    """Text lines for ``shardprep status``: per-state ids in array syntax, finalize, failed log tails (the
    job's throughput and ETA are ``job.progress``'s, printed above this view)."""
    counts = Counter(v.state for v in view.tasks.values())
    lines = [f"  slurm ({view.submissions} submission(s); from {', '.join(view.sources)}):"]
    for st in ("running", "pending", "failed", "missing"):
        ids = view.ids(st)
        if ids:
            lines.append(f"    {st + ':':9} {counts[st]:>6}  [{format_array_ranges(ids)}]")
    if view.finalize:
        lines.append(f"    finalize job {view.finalize.job_id}: {view.finalize_state or '?'}"
                     + (f" ({view.finalize.dependency})" if view.finalize.dependency else ""))
    retried = [v for v in view.tasks.values() if v.state != "done" and v.attempts > 1]
    if retried:
        shown = ", ".join(f"task {v.task} {_attempts_text(v)}" for v in sorted(retried, key=lambda v: v.task)[:10])
        lines.append(f"    requeued: {shown}" + (f" (+{len(retried) - 10} more)" if len(retried) > 10 else ""))
    for t in view.ids("failed"):
        v = view.tasks[t]
        tries = f", {_attempts_text(v)}" if v.attempts > 1 else ""
        where = f"element {v.attempt.element}{tries}, log {v.attempt.log}" if v.attempt else ""
        lines.append(f"    task {t} failed ({v.detail}; {where}); last lines:")
        lines += [f"      | {x}" for x in (log_tail(Path(output) / v.attempt.log) if v.attempt else [])]
    if any(view.ids(s) for s in ("failed", "missing")):
        codes = {c for t in view.ids("failed") if (c := view.tasks[t].exit_status) is not None}
        lines.append(f"    next: {rerun_advice(output, codes)}" if codes else
                     f"    rerun what is not done: {resume_command(output)}")
    return lines


def _attempts_text(v: TaskView) -> str:
    return f"attempt {v.attempts}" + (f" of {v.max_attempts}" if v.max_attempts else "")


def as_json(view: SlurmView) -> dict[str, Any]:
    """The view as ``status --json`` and ``report``'s numbers print it (its one JSON form)."""
    return {
        "submissions": view.submissions, "sources": view.sources,
        **{st: view.ids(st) for st in ("running", "pending", "failed", "missing")},
        "tasks": {str(t): {"state": v.state, "detail": v.detail,
                           "element": v.attempt.element if v.attempt else None,
                           "log": v.attempt.log if v.attempt else None,
                           "attempts": v.attempts, "max_attempts": v.max_attempts}
                  for t, v in view.tasks.items() if v.state != "done"},
        "finalize": {**view.finalize.to_dict(), "state": view.finalize_state} if view.finalize else None,
    }


def refuse_if_active(output: Path, task_ids: list[int]) -> None:
    """Refuse to submit tasks whose last array element is still pending or running.

    Two live attempts of one task would both write its shard (atomically, so nothing breaks, but the
    work is wasted and the second finalize races the first); ask the user to wait or cancel instead.
    """
    attempts = latest_attempts(read_submissions(output))
    mine = {t: attempts[t] for t in task_ids if t in attempts}
    if not mine:
        return
    queue = slurm_cmd.squeue(sorted({a.job_id for a in mine.values()})) or []
    live = {(e.job_id, e.index) for e in queue if e.state in RUNNING | PENDING}
    busy = sorted(t for t, a in mine.items() if a.queue_key in live)
    if busy:
        jobs = sorted({mine[t].job_id for t in busy})
        raise ConfigError(f"task(s) {format_array_ranges(busy)} of {output} are still pending or running in "
                          f"Slurm (job {', '.join(jobs)})",
                          hint=f"wait for them (shardprep status {output}) or `scancel {' '.join(jobs)}` first")

