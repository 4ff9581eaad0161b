"""``job.json``: the frozen plan as stored, and one task's share of it.

The record types inside are the ones the planner already uses, so there is one type per concept:
``InputFile`` (an input as stored: path, size, mtime, format...), ``WorkItem`` (a piece of one input),
``TokenizerInfo`` (the tokenizer record) and ``TokenizeOptions``/``PlanOptions`` (options as stored).
This module adds what the file needs: parsing with errors naming the file and field, and serialising
back in the exact key order the format has always had (docs/format.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardprep import __version__
from shardprep.inputs.discover import InputFile
from shardprep.inputs.readers import WorkItem
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.schema.fields import Fields, load_json, record
from shardprep.job.schema.sidecar import SidecarInput
from shardprep.shard.format import FORMAT_VERSION
from shardprep.tokenizer.load import TokenizerInfo

CREATED_BY = f"shardprep {__version__}"

# The names the format documentation uses for the stored records.
InputRecord = InputFile
TokenizerRecord = TokenizerInfo


@dataclass(frozen=True)
class TaskItem:
    """One work item of a task with the input it reads (what a task streams, and its sidecar lists)."""

    input: InputFile
    work: WorkItem

    def describe(self) -> str:
        return f"{self.input.path}[{self.work.start}:{self.work.end}]"

    def sidecar_input(self) -> SidecarInput:
        """The item as a sidecar's ``inputs`` entry: the path instead of the job's input number."""
        w = self.work
        return SidecarInput(self.input.path, w.start, w.end, w.unit, w.first_line)

    @property
    def nbytes(self) -> int:
        """Input bytes this item covers (a row range counts its whole file: rows have no byte size)."""
        if self.work.unit != "bytes":
            return self.input.size
        end = self.input.size if self.work.end is None else self.work.end
        return max(0, end - self.work.start)


@dataclass(frozen=True)
class Task:
    """A task's work: its number in the plan and its items, in order."""

    index: int
    items: tuple[TaskItem, ...]

    @property
    def input_bytes(self) -> int:
        return sum(i.nbytes for i in self.items)


@dataclass(frozen=True)
class Job:
    """job.json: the inputs, the task assignment, the tokenizer and the options, with the fingerprint."""

    fingerprint: str
    inputs: tuple[InputFile, ...]
    tasks: tuple[tuple[WorkItem, ...], ...]
    tokenizer: TokenizerInfo
    options: TokenizeOptions
    plan_options: PlanOptions
    lustre: dict[str, Any] | None = None      # the Lustre layout applied to the output (not fingerprinted)
    format_version: int = FORMAT_VERSION
    created_by: str = CREATED_BY

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    def task(self, index: int) -> Task:
        return Task(index, tuple(TaskItem(self.inputs[w.input], w) for w in self.tasks[index]))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format_version": self.format_version,
            "created_by": self.created_by,
            "fingerprint": self.fingerprint,
            "inputs": [i.to_dict() for i in self.inputs],
            "tasks": [[w.to_dict() for w in t] for t in self.tasks],
            "tokenizer": self.tokenizer.to_dict(),
            "options": self.options.to_dict(),
            "plan_options": {"target_task_bytes": self.plan_options.target_task_bytes},
        }
        if self.lustre is not None:
            d["lustre"] = self.lustre
        return d

    @classmethod
    def parse(cls, data: bytes, where: str | Path) -> "Job":
        f = load_json(data, str(where))
        version = f.version("format_version", FORMAT_VERSION, hint="use the shardprep release that planned it")
        inputs = tuple(record(InputFile, o) for o in f.objects("inputs"))
        tasks = tuple(tuple(_work_item(o, len(inputs)) for o in _items(f, t)) for t in range(len(f.list("tasks"))))
        return cls(
            fingerprint=f.str("fingerprint"),
            inputs=inputs,
            tasks=tasks,
            tokenizer=record(TokenizerInfo, f.obj_at("tokenizer")),
            options=record(TokenizeOptions, f.obj_at("options"), defaults=True),
            plan_options=record(PlanOptions, f.obj_at("plan_options"), defaults=True),
            lustre=f.dict("lustre") if f.has("lustre") else None,
            format_version=version,
            created_by=f.str("created_by"),
        )


def _items(f: Fields, task: int) -> list[Fields]:
    items = f.list("tasks")[task]
    if not isinstance(items, list):
        f.fail(f"tasks[{task}]", "expected a list of work items")
    return [Fields(o, f.where, f"tasks[{task}][{i}]") for i, o in enumerate(items)]


def _work_item(f: Fields, n_inputs: int) -> WorkItem:
    item = record(WorkItem, f)
    if not 0 <= item.input < n_inputs:
        f.fail("input", f"input {item.input} does not exist (the plan has {n_inputs} inputs)")
    return item
