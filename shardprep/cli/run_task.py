"""``shardprep run-task``: run one task of a frozen plan (what each Slurm array task executes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.cli.args import count_arg
from shardprep.job.task import run_task

NAME = "run-task"
HELP = "run one task of the plan in OUTPUT (used by array jobs; idempotent)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="output directory holding job.json")
    p.add_argument("--task-id", type=int, required=True, help="task index in the plan")
    p.add_argument("--threads", type=count_arg(1), default=None,
                   help="tokenizer threads (default: CPUs this process may use, e.g. SLURM_CPUS_PER_TASK)")


def run(args: argparse.Namespace) -> int:
    import gc

    result = run_task(Path(args.output), args.task_id, threads=args.threads)
    verb = "already done" if result.skipped_existing else "done"
    print(f"task {result.task} {verb}: {result.documents:,} documents, {result.tokens:,} tokens")
    # The process ends now, its shard and sidecar written: spare the interpreter's last collection of every
    # object left (botocore's service models alone cost ~0.15 s of a task reading from S3).
    gc.freeze()
    return 0
