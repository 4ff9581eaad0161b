"""job.json's ``sizing`` record: the task shape the planner chose, and why.

A leaf of the plan's records, apart from the rule that chooses it (``job.sizing``): ``job.schema.job``
parses and writes it without importing the planner's sampling and CPU counting.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardprep.records import Record

RULES = ("auto", "target", "one-file-per-task")


@dataclass(frozen=True)
class Sizing(Record):
    """The shape the planner used, recorded in job.json (``sizing``) and printed by ``plan``/``submit``.

    ``target_task_bytes`` None means one input file per task.
    """

    rule: str                               # auto | target (--target-task-bytes) | one-file-per-task
    target_task_bytes: int | None
    reason: str
    parallel_tasks: int | None = None       # the task slots the auto rule divided by
    shard_ratio: float | None = None        # sampled shard bytes per input byte (auto rule)
