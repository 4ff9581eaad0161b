"""Executors decide where tasks run (local process pool, sbatch array, submitit); see ``base``.

:data:`EXECUTORS` is the one registry of executor classes by name (``--executor``); a new executor is one
module with a class that follows ``base.ExecutorClass`` and one entry here.  Each executor takes one
frozen options object (its class's ``Options``: ``LocalOptions`` or ``SlurmOptions``); turning a command
line into those objects is the CLI's business, so the library never sees a parsed command line.  The
classes are imported only when asked for: choosing an executor costs none of the others' imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Union

from shardprep.errors import ConfigError
from shardprep.executor.base import Executor, ExecutorClass, LaunchReport

if TYPE_CHECKING:
    from shardprep.executor.local import LocalOptions
    from shardprep.executor.slurm.options import SlurmOptions

# name -> "module:class"
EXECUTORS: dict[str, str] = {
    "local": "shardprep.executor.local:LocalExecutor",
    "slurm": "shardprep.executor.slurm.sbatch:SlurmExecutor",
    "submitit": "shardprep.executor.slurm.submitit:SubmititExecutor",
}
ExecutorOptions = Union["LocalOptions", "SlurmOptions"]


def executor_class(name: str) -> ExecutorClass:
    """The executor class registered as ``name``; ConfigError naming the choices for any other name."""
    if name not in EXECUTORS:
        raise ConfigError(f"--executor={name!r} is not available (choose from {', '.join(EXECUTORS)})")
    module, cls = EXECUTORS[name].split(":")
    found: ExecutorClass = getattr(importlib.import_module(module), cls)
    return found


def make_executor(name: str, options: ExecutorOptions, *, finalize: bool = True) -> Executor:
    """The executor ``name`` configured by ``options`` (its class's ``Options``).

    ``finalize``: arrange for index.json once the tasks are done (a dependent job on Slurm).
    """
    cls = executor_class(name)
    if not isinstance(options, cls.Options):
        # a caller's bug, not a user's mistake: options of another executor
        raise TypeError(f"the {name} executor takes {cls.Options.__name__}, not {type(options).__name__}")
    return cls(options, finalize=finalize)


__all__ = ["EXECUTORS", "Executor", "ExecutorClass", "ExecutorOptions", "LaunchReport", "executor_class",
           "make_executor"]
