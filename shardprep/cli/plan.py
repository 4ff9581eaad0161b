"""``shardprep plan``: freeze the plan (job.json) without running anything."""

from __future__ import annotations

import argparse

from shardprep.cli.args import add_plan_arguments, plan_from_args
from shardprep.job.state import format_array_ranges, job_state

NAME = "plan"
HELP = "list inputs, assign them to tasks and write OUTPUT/job.json (runs nothing)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)


def run(args: argparse.Namespace) -> int:
    plan, job = plan_from_args(args)
    state = job_state(args.output, job)
    total = sum(i.size for i in plan.inputs)
    print(f"plan {job['fingerprint'][:12]}: {len(plan.inputs)} input(s), {total:,} bytes -> {len(plan.tasks)} task(s)")
    print(f"tokenizer {plan.tokenizer.info.source} ({plan.tokenizer.info.vocab_size} ids, {plan.tokenizer.info.dtype})")
    for t, items in enumerate(plan.tasks[:20]):
        desc = ", ".join(f"{plan.inputs[w.input].path}" + ("" if w.start == 0 and w.end is None else f"[{w.start}:{w.end}]")
                         for w in items[:3])
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        print(f"  task {t}: {desc}{more}")
    if len(plan.tasks) > 20:
        print(f"  ... {len(plan.tasks) - 20} more task(s)")
    print(f"to run: {format_array_ranges(state.missing) or 'nothing (all done)'}")
    return 0
