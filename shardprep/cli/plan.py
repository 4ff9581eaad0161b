"""``shardprep plan``: freeze the plan (job.json) without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.cli.args import add_plan_arguments, plan_from_args
from shardprep.errors import ConfigError
from shardprep.job.plan_files import TaskTable
from shardprep.job.schema import Job
from shardprep.job.sizing import describe
from shardprep.job.state import describe_task_ids, job_state
from shardprep.units import human_bytes

NAME = "plan"
HELP = "list inputs, assign them to tasks and write OUTPUT/job.json (runs nothing)"

# An explicit --target-task-bytes under this is almost always a forgotten unit (`8` meant as 8M): it plans
# one task and one tiny shard per few bytes of input, thousands of them.  Refused unless forced.
SMALL_TASK_FLOOR = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)
    add_small_tasks_argument(p)


def add_small_tasks_argument(p: argparse.ArgumentParser) -> None:
    """``--force-small-tasks`` (plan and submit): accept a ``--target-task-bytes`` under the floor."""
    p.add_argument("--force-small-tasks", action="store_true",
                   help=f"accept a --target-task-bytes under {human_bytes(SMALL_TASK_FLOOR)} (refused by default: "
                        "it makes one task and one tiny shard per that many input bytes)")


def check_plan_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check alone: a tiny explicit task size is a forgotten unit unless forced."""
    target = getattr(args, "target_task_bytes", None)
    if target is not None and target < SMALL_TASK_FLOOR and not getattr(args, "force_small_tasks", False):
        raise ConfigError(f"--target-task-bytes {target:,} means {target:,} bytes of input per task, under the "
                          f"{human_bytes(SMALL_TASK_FLOOR)} floor: it would plan a task and a shard per "
                          f"{human_bytes(target)} of input",
                          hint="give a unit (suffixes K, M, G: e.g. --target-task-bytes 256M), or add "
                               "--force-small-tasks if you really want tasks this small")


def run(args: argparse.Namespace) -> int:
    check_plan_arguments(args)
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
    print(f"to run: {describe_task_ids(state.missing) if state.missing else 'nothing (all done)'}")
    return 0


def sizing_line(job: Job) -> str:
    """The task shape the plan used and why (plans from before the sizing rule have no record of it)."""
    if job.sizing is None:
        target = job.plan_options.target_task_bytes
        return f"sizing: {'one file per task' if target is None else f'target {target:,} bytes per task'}"
    return describe(job.sizing, job.n_tasks)
