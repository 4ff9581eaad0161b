"""``shardprep submit``: plan (or reload the frozen plan with --resume) and launch the tasks."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from pathlib import Path
from typing import Iterator

from shardprep.cli._resume import refuse_unapplied_options, replan_conflict
from shardprep.cli._s3 import add_s3_arguments, refuse_other_storage
from shardprep.cli._slurm import add_executor_arguments, add_slurm_arguments, executor_from_args
from shardprep.cli.plan import (
    add_plan_arguments,
    add_small_tasks_argument,
    check_plan_arguments,
    plan_from_args,
    sizing_line,
)
from shardprep.errors import EXIT_INTERRUPTED, ConfigError, IncompleteError, PlanConflictError
from shardprep.executor import Executor, make_executor
from shardprep.executor.slurm.fit import fit_cpus_to_nodes
from shardprep.job.advice import resume_command
from shardprep.job.schema import Job
from shardprep.job.state import describe_task_ids, job_state, load_job, read_frozen_tokenizer
from shardprep.shard.format import JOB_FILE, PLAN_DIR, TOKENIZER_FILE
from shardprep.shard.index import read_index
from shardprep.storage.lock import output_lock

NAME = "submit"
HELP = "plan and run/submit the tokenize tasks (local process pool, sbatch array or submitit)"
DESCRIPTION = """Plan the job into OUTPUT (job.json), then run the missing tasks with the chosen executor and
finalize (index.json).  Re-running the same command skips finished shards; `--resume OUTPUT` continues a
frozen plan without re-specifying it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p, required=False)
    add_small_tasks_argument(p)
    add_s3_arguments(p)
    g = p.add_argument_group("execution")
    add_executor_arguments(g)
    g.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the frozen plan in DIR as it is: launch exactly its missing tasks.  Executor and "
                        "Slurm options apply; plan options (--text-field, --layout, ...) that differ from the plan "
                        "are refused (re-plan with --overwrite to change them)")
    g.add_argument("--dry-run", action="store_true", help="plan and show what would run; run/submit nothing")
    g.add_argument("--no-finalize", action="store_true", help="do not write index.json after the tasks")
    add_slurm_arguments(p)


def _resume(args: argparse.Namespace) -> tuple[Path, Job]:
    output = Path(args.resume)
    if args.output and Path(args.output) != output:
        raise ConfigError(f"--output {args.output} and --resume {args.resume} name different directories")
    job = load_job(output)
    read_frozen_tokenizer(output, job)
    refuse_other_storage(args, job.storage)
    if not (args.input and args.tokenizer):    # no whole command line: each typed plan option is judged
        refuse_unapplied_options(args, output, job)
        return output, job
    # a full command line was given as well: it must match the frozen plan
    if args.overwrite:
        refuse_unapplied_options(args, output, job)            # --resume with --overwrite: one line
    args.output = str(output)
    try:    # no task slots: the frozen plan's sizing is kept; any difference raises PlanConflictError
        _, job = plan_from_args(args)
    except PlanConflictError as e:
        raise replan_conflict(e, output) from None
    return output, job


def run(args: argparse.Namespace) -> int:
    # the executor first: a missing extra or a bad Slurm option fails before anything is planned or written
    executor = executor_for(args)
    if not (args.resume or args.output):
        raise ConfigError("--output is required (or --resume DIR)")
    if args.resume and not Path(args.resume).exists():      # a file is output_lock's "is a file"
        raise IncompleteError(f"--resume {args.resume}: no such directory",
                              hint="give the --output directory of an earlier plan or submit")
    check_plan_arguments(args)
    slots = None if args.resume else executor.task_slots()      # what the sizing rule divides by
    # one writer per output directory: held while planning and launching (for the local executor, until
    # the last task and finalize are done; for Slurm, until the jobs are submitted)
    output = Path(args.resume or args.output)
    try:
        with output_lock(output), _dry_run_leaves_no_plan(args):
            return _plan_and_launch(args, executor, slots)
    except KeyboardInterrupt:     # the local executor has stopped its tasks: only complete shards remain
        again = f", or {resume_command(output)}," if (output / JOB_FILE).exists() else ""
        print(f"shardprep submit: interrupted: re-run the same command{again} to continue", file=sys.stderr)
        return EXIT_INTERRUPTED


@contextlib.contextmanager
def _dry_run_leaves_no_plan(args: argparse.Namespace) -> Iterator[None]:
    """A ``--dry-run`` into a directory without a plan removes the plan it wrote to show what would run.

    Why: the dry run's job.json made the real command refused as "a different plan" as soon as it changed
    an option (``--txt-mode paragraph`` after a look at the dry run).  A dry run with ``--overwrite`` of an
    existing plan would delete that plan and its shards, which no dry run may: it is refused.
    """
    if not args.dry_run or args.resume:         # --resume: the frozen plan is only read
        yield
        return
    output = Path(args.output)
    planned = (output / JOB_FILE).exists()
    if planned and args.overwrite:
        raise ConfigError(f"--dry-run with --overwrite would delete the plan and shards in {output}",
                          hint="drop --overwrite to see what would run, or try the options in a new --output")
    written = [output / n for n in (JOB_FILE, TOKENIZER_FILE, PLAN_DIR) if not (output / n).exists()]
    try:
        yield
    finally:
        if not planned:     # what the dry run wrote (never a file that was there), job.json first: it names the rest
            for path in written:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()


def executor_for(args: argparse.Namespace) -> Executor:
    """The executor of the command line, as ``submit`` runs it (``doctor`` asks the same one for the task
    slots its sizing divides by): options not given are the executor's defaults."""
    resume = getattr(args, "resume", None)
    name, options = executor_from_args(args, resume=Path(resume) if resume else None)
    if name != "local":     # a task bigger than every node would stay pending for ever
        options = fit_cpus_to_nodes(options, chosen=True, what="each array task")
    return make_executor(name, options, finalize=not getattr(args, "no_finalize", False))


def _plan_and_launch(args: argparse.Namespace, executor: Executor, slots: tuple[int, str] | None) -> int:
    if args.resume:
        output, job = _resume(args)
    else:
        _, job = plan_from_args(args, slots)
        output = Path(args.output)
        print(sizing_line(job))
    state = job_state(output, job)
    todo = state.missing
    print(f"{output}: {state.n_tasks} task(s), {len(state.done)} done, to run: {describe_task_ids(todo)}")
    report = executor.launch(output, todo, dry_run=args.dry_run)
    for script in report.scripts:
        print(script)
    if report.job_ids:
        print(f"submitted job(s): {', '.join(report.job_ids)}")
    if report.finalized:
        t = read_index(output).totals
        print(f"done: {t.shards} shard(s), {t.documents:,} documents, {t.tokens:,} tokens, "
              f"{t.bytes:,} bytes, {sum(t.skipped.values()):,} skipped")
    return 0
