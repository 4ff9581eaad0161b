"""``shardprep plan``: freeze the plan (job.json) without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.cli.args import add_plan_arguments, plan_from_args
from shardprep.job.plan_files import TaskTable
from shardprep.job.schema import Job
from shardprep.job.sizing import describe
from shardprep.job.state import format_array_ranges, job_state

NAME = "plan"
HELP = "list inputs, assign them to tasks and write OUTPUT/job.json (runs nothing)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)


def run(args: argparse.Namespace) -> int:
    plan, job = plan_from_args(args)
    state = job_state(args.output, job)
    s = job.summary
    print(f"plan {job.fingerprint[:12]}: {s.inputs} input(s), {s.input_bytes:,} bytes -> {s.tasks} task(s)")
    print(sizing_line(job))
    print(f"tokenizer {job.tokenizer.source} ({job.tokenizer.vocab_size} ids, {job.tokenizer.dtype})")
    added = {"eos": plan.options.add_eos, "bos": plan.options.add_bos}
    for kind, line in plan.tokenizer.describe_specials().items():
        use = "" if kind not in added else " [added to every document]" if added[kind] else " [not added]"
        print(f"  {line}{use}")
    with TaskTable(Path(args.output), job) as table:
        for t in range(min(20, s.tasks)):
            items = table.task(t).items
            desc = ", ".join(i.input.path + ("" if i.work.start == 0 and i.work.end is None else
                                             f"[{i.work.start}:{i.work.end}]") for i in items[:3])
            more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
            print(f"  task {t}: {desc}{more}")
    if s.tasks > 20:
        print(f"  ... {s.tasks - 20} more task(s)")
    print(f"to run: {format_array_ranges(state.missing) or 'nothing (all done)'}")
    return 0


def sizing_line(job: Job) -> str:
    """The task shape the plan used and why (plans from before the sizing rule have no record of it)."""
    if job.sizing is None:
        target = job.plan_options.target_task_bytes
        return f"sizing: {'one file per task' if target is None else f'target {target:,} bytes per task'}"
    return describe(job.sizing, job.n_tasks)
