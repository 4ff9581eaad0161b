"""Executors decide where tasks run (local process pool, sbatch array, submitit); see ``base``.

Each executor takes one frozen options object (``LocalOptions`` or ``SlurmOptions``); turning a command
line into those objects is the CLI's business (``shardprep.cli.args``), so the library never sees a parsed command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from shardprep.errors import ConfigError
from shardprep.executor.base import Executor, LaunchReport

if TYPE_CHECKING:
    from shardprep.executor.local import LocalOptions
    from shardprep.executor.slurm.options import SlurmOptions

EXECUTORS = ("local", "slurm", "submitit")
ExecutorOptions = Union["LocalOptions", "SlurmOptions"]


def make_executor(name: str, options: ExecutorOptions, *, finalize: bool = True) -> Executor:
    """The executor ``name`` configured by ``options`` (``LocalOptions`` for local, else ``SlurmOptions``).

    ``finalize``: arrange for index.json once the tasks are done (a dependent job on Slurm).
    """
    if name not in EXECUTORS:
        raise ConfigError(f"--executor={name!r} is not available (choose from {', '.join(EXECUTORS)})")
    if name == "local":
        from shardprep.executor.local import LocalExecutor, LocalOptions

        if not isinstance(options, LocalOptions):
            raise _wrong_options(name, options, LocalOptions)
        return LocalExecutor(options, finalize=finalize)
    from shardprep.executor.slurm.options import SlurmOptions

    if not isinstance(options, SlurmOptions):
        raise _wrong_options(name, options, SlurmOptions)
    if name == "slurm":
        from shardprep.executor.slurm.sbatch import SlurmExecutor

        return SlurmExecutor(options, finalize=finalize)
    from shardprep.executor.slurm.submitit import SubmititExecutor

    return SubmititExecutor(options, finalize=finalize)


def task_slots(name: str, options: ExecutorOptions) -> tuple[int, str]:
    """(how many tasks ``name`` can run at once, how that was found): the sizing rule divides by it.

    Local: the worker processes.  Slurm: the ``%N`` throttle when set, else the partition's usable CPUs
    (``sinfo``) over ``--cpus-per-task``; this machine's CPUs when sinfo cannot say.
    """
    from shardprep.job.resources import usable_cpus

    if name == "local":
        workers = getattr(options, "workers", None)
        return (workers, "--workers") if workers else (usable_cpus(), "this machine's CPUs")
    from shardprep.executor.slurm.commands import partition_cpus
    from shardprep.executor.slurm.options import SlurmOptions

    assert isinstance(options, SlurmOptions)
    if options.max_parallel:
        return options.max_parallel, "--max-parallel"
    found = partition_cpus(options.partition)
    if found is None:
        return usable_cpus(), "this machine's CPUs (sinfo did not answer)"
    cpus, partition = found
    per_task = options.cpus_per_task
    return max(1, cpus // per_task), f"partition {partition}: {cpus} CPUs / --cpus-per-task {per_task}"


def _wrong_options(name: str, options: object, cls: type) -> TypeError:
    """A caller's bug, not a user's mistake: options of the other executor."""
    return TypeError(f"the {name} executor takes {cls.__name__}, not {type(options).__name__}")


__all__ = ["EXECUTORS", "Executor", "ExecutorOptions", "LaunchReport", "make_executor", "task_slots"]
