"""The executor and Slurm options of ``submit`` (and the Slurm placement of the ``stage`` job), and the one
place where they become an executor's options.

Slurm options are the exception that proves the rule of ``cli.args``: their argparse default is
``SUPPRESS`` so that ``submit --resume`` can tell what the user typed from what the first submission
recorded; the values not typed come from the recorded options or the dataclass (each executor class's
``options_for``).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Sequence

from shardprep.cli.args import add_field, given_fields
from shardprep.executor import EXECUTORS, executor_class
from shardprep.executor.slurm.options import TIME_FORMS, SlurmOptions

_SLURM_HELP = {
    "partition": "partition (queue) for the array tasks and the finalize job",
    "account": "account to charge",
    "qos": "quality of service",
    "time": f"time limit per task ({TIME_FORMS}); default: the partition's",
    "mem": "memory per task, e.g. 16G; default: the partition's",
    "cpus_per_task": "CPUs per task (default {}); the tokenizer uses exactly this many threads",
    "constraint": "node features required, e.g. 'skylake|icelake'",
    "max_parallel": "at most this many tasks run at once (the %N throttle), shared by all arrays of the "
                    "submission even when MaxArraySize splits it; default: no limit",
    "extra_sbatch": "an extra sbatch option, e.g. 'exclusive', 'gres=gpu:1' or '#SBATCH --nice=10' (repeatable)",
    "signal_seconds": "send USR1 this many seconds before the time limit (default {}) so a task stops at a "
                      "safe point and is requeued",
    "job_name": "Slurm job name prefix (default {})",
    "max_requeues": "requeue a task that stopped at its time limit at most this many times (default {}); "
                    "then it fails with a message to raise --time or use smaller tasks (--target-task-bytes)",
}
# SlurmOptions field -> command-line flag (the flag's dest is the field name except for --sbatch-extra)
_SLURM_FLAGS = {name: "--" + name.replace("_", "-") for name in _SLURM_HELP} | {"extra_sbatch": "--sbatch-extra"}
_SLURM_KWARGS: dict[str, dict[str, Any]] = {
    "cpus_per_task": {"type": int}, "max_parallel": {"type": int}, "signal_seconds": {"type": int},
    "max_requeues": {"type": int},
    "extra_sbatch": {"action": "append", "metavar": "OPTION", "dest": "extra_sbatch"},
}

DEFAULT_SLURM = SlurmOptions()     # frozen: one shared value for the defaults below


def add_slurm_arguments(parser: argparse.ArgumentParser, *, title: str | None = None,
                        only: Sequence[str] | None = None, helps: dict[str, str] | None = None,
                        defaults: SlurmOptions = DEFAULT_SLURM) -> None:
    """The Slurm options (used with ``--executor slurm`` or ``submitit``) as their own help group.

    With ``submit --resume OUTPUT`` every option not given again keeps the value of the last submission
    recorded in ``OUTPUT/slurm/jobs.json``.  ``only`` limits the group to some ``SlurmOptions`` fields,
    for jobs where the others mean nothing (the stage job has no array to throttle); ``helps`` replaces
    help texts by field; ``defaults`` are the values the help names (a "{}" in a help text).
    """
    g = parser.add_argument_group(title or "Slurm options (with --executor slurm or submitit; --resume "
                                           "reuses the last submission's values unless given again)")
    for name, text in _SLURM_HELP.items():
        if only is None or name in only:
            text = (helps or {}).get(name, text).replace("%", "%%")
            add_field(g, _SLURM_FLAGS[name], owner=SlurmOptions, name=name, default=argparse.SUPPRESS,
                      help=text.format(getattr(defaults, name)), **_SLURM_KWARGS.get(name, {}))


def slurm_options_from_args(args: argparse.Namespace, base: SlurmOptions = DEFAULT_SLURM) -> SlurmOptions:
    """``base`` (the dataclass defaults, a recorded submission's options ...) with the options typed."""
    return dataclasses.replace(base, **given_fields(SlurmOptions, args))     # SlurmOptions validates them


def add_executor_arguments(g: Any) -> None:
    """The executor choice and ``LocalOptions``; the Slurm options are :func:`add_slurm_arguments`."""
    from shardprep.executor.local import LocalOptions  # only submit takes them: stage need not import the pool

    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="local: process pool here; slurm: sbatch job array; submitit: submitit on Slurm "
                        "(default: local, or with --resume the executor of the last Slurm submission)")
    add_field(g, "--workers", owner=LocalOptions, type=int,
              help="local executor: parallel task processes (default: usable CPUs)")
    add_field(g, "--no-progress", dest="show_progress", owner=LocalOptions, action="store_false",
              help="local executor: no progress bar")


def executor_from_args(args: argparse.Namespace, resume: Path | None = None) -> tuple[str, Any]:
    """(executor name, its options).  With ``resume`` and no ``--executor``: the executor of the last
    recorded Slurm submission (else local), and Slurm options not typed again keep its values."""
    from shardprep.executor.slurm.jobs import last_submission

    last = last_submission(resume) if resume else None
    name = args.executor or (last.executor if last else "local")
    cls = executor_class(name)
    return name, cls.options_for(given_fields(cls.Options, args), last)
