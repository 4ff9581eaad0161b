"""``shardprep status``: done / missing tasks (Slurm array syntax), totals, throughput so far and the
whole job's ETA (``job.progress``), from the sidecars, the plan and the task logs; plus the Slurm view."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shardprep.cli._s3 import add_s3_arguments
from shardprep.errors import EXIT_INCOMPLETE, ConfigError
from shardprep.executor.slurm.state import SlurmView, as_json, collect, format_view
from shardprep.job.advice import interrupted_advice, rerun_advice, resume_command, stopped_on_signal
from shardprep.job.logs import TAIL_BYTES, TaskLog, read_task_logs
from shardprep.job.progress import JobProgress, activity, estimate, planned_input_bytes
from shardprep.job.schema import Job
from shardprep.job.state import JobState, format_array_ranges, job_state, load_job
from shardprep.report.fmt import duration, human_bytes, number, rate
from shardprep.shard.format import INDEX_FILE, LOG_DIR
from shardprep.storage.locations import is_url

NAME = "status"
HELP = "show done/missing tasks, totals, throughput so far and the job's ETA of an output directory"
MISSING_SHOWN = 10      # tasks whose reason for not being done is listed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="output directory holding job.json")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")
    add_s3_arguments(p)


def job_progress(output: Path, job: Job, state: JobState, view: SlurmView | None, now: float,
                 logs: dict[int, TaskLog]) -> JobProgress:
    """``job.progress.estimate`` on a local output, from the task logs (each read up to its last attempt)
    and the Slurm ``view`` of a job submitted to Slurm."""
    running, pending = activity(state.done, logs, view)
    return estimate(state.n_tasks, planned_input_bytes(output, job), state.done, logs, now,
                    running=running, pending=pending)


def progress_lines(p: JobProgress) -> list[str]:
    """Work done, wall time, throughput so far and the ETA, for people."""
    share = f"{p.work_done:.1%}" if p.work_done is not None else "?"
    so_far = f", {human_bytes(p.running_bytes)} of it read by running tasks" if p.running_bytes else ""
    lines = [f"  progress: {share} of the planned input ({human_bytes(p.work_bytes)} of {human_bytes(p.input_bytes)}"
             f"{so_far})" + (f", {duration(p.elapsed_s)} since the first task started" if p.elapsed_s is not None else "")]
    if p.elapsed_s:
        at_once = f", {p.parallelism:.1f} task(s) at once" if p.parallelism else ""
        speed = f"{human_bytes(p.input_bytes_per_s)}/s input, " if p.input_bytes_per_s is not None else ""
        tasks = f"{number(p.tasks_per_min)} tasks/min"
        lines.append(f"  throughput so far: {speed}{rate(p.tokens_per_s)}, {tasks}{at_once}")
    if p.eta_s is None:
        lines.append(f"  ETA: none ({p.eta_basis})")
    else:
        lines.append(f"  ETA: ~{duration(p.eta_s)} ({p.eta_basis})" if p.eta_s else "  ETA: done")
    return lines


def why_missing(state: JobState, logs: dict[int, TaskLog], shown: int = MISSING_SHOWN) -> list[str]:
    """Why tasks are not done, for those with more to say than "no sidecar": a sidecar that does not check
    out (torn, another plan's, a shard of the wrong size), or a failure in the task's log."""
    lines = []
    for t in state.missing:
        problem = state.problems[t]
        log = logs.get(t)
        if problem == "no sidecar":
            if log is None or log.status != "failed":
                continue
            problem = f"{'stopped' if stopped_on_signal(log.reason) else 'failed'}: {log.reason}"
        lines.append(f"task {t}: {problem}")
    return lines[:shown] + ([f"(+{len(lines) - shown} more)"] if len(lines) > shown else [])


def next_step(output: Path, missing: list[TaskLog]) -> str:
    """What to run for the tasks not done (``missing``: the logs of those that have one): fix a failure
    first; a run that was only interrupted (its tasks stopped on a signal) just continues."""
    failed = [lg for lg in missing if lg.status == "failed"]
    if any(not stopped_on_signal(lg.reason) for lg in failed):
        return rerun_advice(output)
    return interrupted_advice(output) if failed else f"`{resume_command(output)}` runs the tasks not done"


def index_line(output: Path, state: JobState, finalized: bool, view: SlurmView | None) -> str:
    """Where index.json stands, and what writes it next (a queued finalize job, `finalize`, or the tasks)."""
    if finalized:
        return "written"
    if not state.complete:
        return f"not yet: {len(state.missing):,} task(s) not done (finalize writes it once all are)"
    fin = view.finalize if view else None
    fin_state = view.finalize_state if view else None
    if fin is not None and fin_state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        return f"not yet (finalize job {fin.job_id} is {fin_state.lower()} and will write it)"
    return f"not yet (run shardprep finalize {output})"


def run(args: argparse.Namespace) -> int:
    if is_url(args.output):      # never a local path made of a URL (Path("s3://b/x") is "s3:/b/x")
        raise ConfigError(f"{args.output} is a URL: status needs the output directory where the job ran (its "
                          f"job.json, sidecars and task logs)",
                          hint=f"for a finished copy at a URL: shardprep verify {args.output}, or shardprep report "
                               f"{args.output}")
    output = Path(args.output)
    job = load_job(output)
    state = job_state(output, job)
    totals = state.totals()
    finalized = (output / INDEX_FILE).exists()
    view = collect(output, state)
    now = time.time()
    logs = read_task_logs(output / LOG_DIR, TAIL_BYTES)
    progress = job_progress(output, job, state, view, now, logs)
    if args.json:
        import orjson

        print(orjson.dumps({
            "output": str(output), "generated_at": now, "tasks": state.n_tasks, "done": sorted(state.done),
            "missing": state.missing, "missing_ranges": format_array_ranges(state.missing),
            "problems": {str(k): v for k, v in state.problems.items()}, "totals": totals.to_dict(),
            "finalized": finalized, "progress": progress.to_dict(), "slurm": as_json(view) if view else None,
        }, option=orjson.OPT_INDENT_2).decode())
    else:
        print(f"{output}: plan {job.fingerprint[:12]}, {state.n_tasks} task(s)")
        print(f"  done:     {len(state.done)}")
        print(f"  missing:  {len(state.missing)}" + (f"  [{format_array_ranges(state.missing)}]" if state.missing else ""))
        for line in why_missing(state, logs):
            print(f"    {line}")
        print(f"  documents {totals.documents:,}, tokens {totals.tokens:,}, bytes {totals.bytes:,}, "
              f"skipped {totals.skipped:,}")
        for line in progress_lines(progress):
            print(line)
        print(f"  index.json: {index_line(output, state, finalized, view)}")
        for line in format_view(output, view) if view else []:
            print(line)
        if state.missing and not view and not progress.running:    # (the Slurm view has its own next step)
            print(f"  next: {next_step(output, [logs[t] for t in state.missing if t in logs])}")
    return 0 if state.complete else EXIT_INCOMPLETE
