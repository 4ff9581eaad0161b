"""The executor seam: *where* tasks run.  *What* a task does is ``shardprep.job.task.run_task``, the same
for every executor; an executor only launches task ids of a frozen plan and (when it can) finalizes.

An executor answers for itself (as datatrove's executors answer ``world_size``): how many tasks it runs
at once (:meth:`Executor.task_slots`, what the default sizing divides by) and, as a class, which options
it takes (``Options``) and what a resumed submission keeps of the last one (``options_for``).  The one
registry of executor classes by name is ``shardprep.executor.EXECUTORS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.executor.slurm.jobs import Submission


@dataclass
class LaunchReport:
    executor: str
    task_ids: list[int]
    job_ids: list[str] = field(default_factory=list)   # scheduler job ids (empty for local)
    scripts: list[str] = field(default_factory=list)   # rendered batch scripts (Slurm; shown by --dry-run)
    finalized: bool = False                            # index.json written already (local)


class Executor(Protocol):
    name: ClassVar[str]

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        """Run (or submit) ``task_ids`` of the plan frozen in ``output`` and arrange for finalize."""
        ...

    def task_slots(self) -> tuple[int, str]:
        """(how many tasks it runs at once, how that was found): the default sizing rule divides by it."""
        ...


class ExecutorClass(Protocol):
    """An executor class as the registry holds it: built from its own frozen ``Options``."""

    Options: ClassVar[type]

    def __call__(self, options: Any, *, finalize: bool = True) -> Executor: ...

    def options_for(self, given: Mapping[str, Any], last: Submission | None) -> Any:
        """Its options from the values given (option field -> value) and the last recorded Slurm submission
        of the output (``submit --resume``; None for a first submission)."""
        ...
