"""Executors decide where tasks run (local process pool, sbatch array, submitit); see ``base``."""

from __future__ import annotations

import argparse

from shardprep.errors import ConfigError
from shardprep.executor.base import Executor, LaunchReport

EXECUTORS = ("local", "slurm", "submitit")


def make_executor(name: str | None, args: argparse.Namespace) -> Executor:
    """Build the executor named on the command line from the parsed options.

    ``name`` None (no ``--executor`` given): with ``--resume`` the executor of the last recorded Slurm
    submission, else local.
    """
    if name is None:
        from shardprep.executor.slurm.jobs import last_submission

        last = last_submission(args.resume) if getattr(args, "resume", None) else None
        name = last["executor"] if last else "local"
    if name == "local":
        from shardprep.executor.local import LocalExecutor

        return LocalExecutor(getattr(args, "workers", None), finalize=not getattr(args, "no_finalize", False),
                             show_progress=not getattr(args, "no_progress", False))
    if name in ("slurm", "submitit"):
        from shardprep.executor.slurm.jobs import last_submission
        from shardprep.executor.slurm.options import slurm_options_from_args

        last = last_submission(args.resume) if getattr(args, "resume", None) else None
        options = slurm_options_from_args(args, recorded=last["options"] if last else None)
        finalize = not getattr(args, "no_finalize", False)
        if name == "slurm":
            from shardprep.executor.slurm.sbatch import SlurmExecutor

            return SlurmExecutor(options, finalize=finalize)
        from shardprep.executor.slurm.submitit import SubmititExecutor

        return SubmititExecutor(options, finalize=finalize)
    raise ConfigError(f"--executor={name!r} is not available (choose from {', '.join(EXECUTORS)})")


__all__ = ["EXECUTORS", "Executor", "LaunchReport", "make_executor"]
