"""The plan's inputs by number, and one document read back from them: what a sidecar's ``origins`` point into.

Why here: the plan's inputs are not listed in job.json (only counted); each task's record names the ones it
reads (``plan/tasks.jsonl``, every line checked against the digests chained from job.json), so the list is
gathered from the task records, once, in input order.  Reading a record back is the input layer's
(``inputs.lookup``), with the options the tasks read with.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

from shardprep.errors import RecordError
from shardprep.inputs.discover import InputFile
from shardprep.inputs.lookup import DocumentSource
from shardprep.inputs.lookup import document_record as read_document
from shardprep.job.options import TokenizeOptions
from shardprep.job.plan_files import TaskTable
from shardprep.job.state import load_job


@dataclass(frozen=True)
class PlannedInput:
    """Input ``index`` of the plan as planned (size, mtime or identity), reached with the plan's storage."""

    index: int
    input: InputFile

    @property
    def location(self) -> str:
        """Its path, or the URL of a remote object."""
        return self.input.path

    @property
    def kind(self) -> str:
        """``"byte"``: origins are byte offsets in the decompressed input; ``"row"``: rows (parquet, Arrow)."""
        return "row" if self.input.tabular else "byte"

    @property
    def format(self) -> str:
        return self.input.format

    @property
    def compression(self) -> str | None:
        return self.input.compression


def plan_inputs(output: str | Path) -> list[PlannedInput]:
    """Every input of the plan in ``output``, by its number (what ``origins.input`` holds).  Reads every task's
    record once (linear in the plan); RecordError when the records do not name every input."""
    output = Path(output)
    job = load_job(output)
    found: dict[int, InputFile] = {}
    with TaskTable(output, job) as table:
        for task in table:
            for item in task.items:
                found.setdefault(item.work.input, item.input.reached_with(job.storage))
    missing = [i for i in range(job.summary.inputs) if i not in found]
    if missing or len(found) != job.summary.inputs:
        raise RecordError(f"{output / 'plan'}: the task records name {len(found)} input(s) but job.json counts "
                          f"{job.summary.inputs}" + (f" (input {missing[0]} is in no task)" if missing else ""))
    return [PlannedInput(i, found[i]) for i in range(job.summary.inputs)]


@dataclass(frozen=True)
class PlanSources:
    """What ``inputs.lookup.document_record`` needs of a plan: its inputs by number, the options its tasks
    read with and whether it is a chat job."""

    planned: tuple[PlannedInput, ...]
    read: TokenizeOptions
    chat: bool

    @cached_property
    def inputs(self) -> Sequence[InputFile]:
        return tuple(p.input for p in self.planned)


def plan_sources(output: str | Path) -> PlanSources:
    """The sources of the plan in ``output`` (read once; keep it for many look-ups)."""
    job = load_job(Path(output))
    return PlanSources(tuple(plan_inputs(output)), job.options, job.options.chat is not None)


def document_record(output: str | Path | PlanSources, input_index: int, offset_or_row: int) -> DocumentSource:
    """The document at ``offset_or_row`` of the plan's input ``input_index``, exactly as its task read it
    (``inputs.lookup.document_record``); ``output`` an output directory or its :func:`plan_sources`."""
    sources = output if isinstance(output, PlanSources) else plan_sources(output)
    return read_document(sources, input_index, offset_or_row)
