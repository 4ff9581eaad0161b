"""``shardprep run-task``: run one task of a frozen plan (what each Slurm array task executes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.errors import ConfigError
from shardprep.job.task import run_task

NAME = "run-task"
HELP = "run one task of the plan in OUTPUT (used by array jobs; idempotent)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="output directory holding job.json")
    p.add_argument("--task-id", type=int, required=True, help="task index in the plan")
    p.add_argument("--threads", type=int, default=None,
                   help="tokenizer threads (default: CPUs this process may use, e.g. SLURM_CPUS_PER_TASK)")


def run(args: argparse.Namespace) -> int:
    # checked here, not with cli.args.count_arg: every array task runs this command, and cli.args imports
    # the option modules of every other command (start-up cost per task, see test_units)
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads} is invalid: must be at least 1")
    result = run_task(Path(args.output), args.task_id, threads=args.threads)
    verb = "already done" if result.skipped_existing else "done"
    print(f"task {result.task} {verb}: {result.documents:,} documents, {result.tokens:,} tokens")
    return 0
