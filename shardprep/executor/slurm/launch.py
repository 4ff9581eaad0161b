"""What both Slurm executors (``sbatch.py``, ``submitit.py``) share: options, task slots and the launch preamble.

Before anything is submitted, both check the output path (sbatch cannot take every path in
``#SBATCH --output``), refuse tasks still pending or running in Slurm, read MaxArraySize and plan the
submission (``submission.SubmissionPlan``); only the rendering and the submitting differ.  Written here
once, in :meth:`SlurmLauncher.prepare`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Mapping

from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.jobs import SubmissionRecorder
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.render import checked_output
from shardprep.executor.slurm.state import refuse_if_active
from shardprep.executor.slurm.submission import SubmissionPlan
from shardprep.shard.format import INDEX_FILE

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.executor.slurm.jobs import Submission


@dataclass(frozen=True)
class Launch:
    """A submission about to happen: the checked output, its plan and where MaxArraySize came from."""

    output: Path
    task_ids: list[int]
    plan: SubmissionPlan
    max_array_size_source: str


class SlurmLauncher:
    """The part of a Slurm executor that is not about rendering or submitting."""

    name: ClassVar[str]
    indexing: ClassVar[Literal["offset", "position"]]    # how the executor's array indices map to tasks
    Options: ClassVar[type[SlurmOptions]] = SlurmOptions

    def __init__(self, options: SlurmOptions, *, finalize: bool = True):
        self.options = options
        self.finalize = finalize

    @classmethod
    def options_for(cls, given: Mapping[str, Any], last: Submission | None) -> SlurmOptions:
        """The options typed (``given``) over those of the last submission (``submit --resume``), else the
        defaults: a resumed job keeps its partition, time, throttle ... unless they are given again."""
        return dataclasses.replace(last.slurm_options() if last else SlurmOptions(), **given)

    def task_slots(self) -> tuple[int, str]:
        """(tasks Slurm runs at once, how that was found): the ``%N`` throttle when set, else the partition's
        usable CPUs (``sinfo``) over ``--cpus-per-task``; this machine's CPUs when sinfo cannot say."""
        from shardprep.job.resources import usable_cpus

        if self.options.max_parallel:
            return self.options.max_parallel, "--max-parallel"
        found = slurm_cmd.partition_cpus(self.options.partition)
        if found is None:
            return usable_cpus(), "this machine's CPUs (sinfo did not answer)"
        cpus, partition = found
        per_task = self.options.cpus_per_task
        return max(1, cpus // per_task), f"partition {partition}: {cpus} CPUs / --cpus-per-task {per_task}"

    def plan(self, output: Path, task_ids: list[int], max_array_size: int) -> SubmissionPlan:
        return SubmissionPlan.build(task_ids, max_array_size=max_array_size, throttle=self.options.max_parallel,
                                    indexing=self.indexing, finalize=self.finalize,
                                    finalized=(output / INDEX_FILE).exists())

    def prepare(self, output: Path, task_ids: list[int]) -> Launch:
        """Check the output, refuse tasks Slurm still runs, read MaxArraySize, plan the submission."""
        output = checked_output(output)
        refuse_if_active(output, task_ids)
        max_size, source = slurm_cmd.max_array_size()
        return Launch(output, list(task_ids), self.plan(output, task_ids, max_size), source)

    def recorder(self, launch: Launch) -> SubmissionRecorder:
        """The ``jobs.json`` record of ``launch``, written as each job is submitted."""
        return SubmissionRecorder.for_plan(launch.output, self.name, launch.task_ids, launch.plan,
                                           launch.max_array_size_source, self.options)
