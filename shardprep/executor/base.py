"""The executor seam: *where* tasks run.  *What* a task does is ``shardprep.job.task.run_task``, the same
for every executor; an executor only launches task ids of a frozen plan and (when it can) finalizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class LaunchReport:
    executor: str
    task_ids: list[int]
    job_ids: list[str] = field(default_factory=list)   # scheduler job ids (empty for local)
    scripts: list[str] = field(default_factory=list)   # rendered batch scripts (Slurm; shown by --dry-run)
    finalized: bool = False                            # index.json written already (local)


class Executor(Protocol):
    name: str

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        """Run (or submit) ``task_ids`` of the plan frozen in ``output`` and arrange for finalize."""
        ...
