"""Where a shard's document came from, and that document read back from its input.

Two halves, one path each:

- *Where* (``shard_origin``): the shard's own sidecar says it (format 3: ``origins`` per document, and
  its ``inputs`` by plan number, path and unit).  Every reader of a document's origin goes through it
  (``trace``, ``inspect``, quarantine files): it needs no plan, so it works as well for a mixture of
  outputs on an object store, where the sidecar is read anyway for the documents' lengths.
- *What* (``document_record``): reading the record back needs the input as planned (format,
  compression, size and mtime or identity), which only the plan's task records hold (job.json counts the
  inputs, it does not list them).  Given the task that wrote the shard (its sidecar's ``task``), only that
  task's record is read; without it, every record once (``plan_inputs``).  The reading itself is the
  input layer's (``inputs.lookup``), with the options the tasks read with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, overload

from shardprep.errors import RecordError

# The where half runs on every traced row; the what half (reading inputs back through the plan) loads the
# input readers and the plan files only when a text is asked for (``trace --text``): a login-node trace
# of a step stays a fraction of a second.
if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.discover import InputFile
    from shardprep.inputs.lookup import DocumentSource
    from shardprep.job.options import TokenizeOptions
    from shardprep.job.schema import Job, Task
    from shardprep.shard.sidecar import Sidecar


@dataclass(frozen=True)
class ShardOrigin:
    """One document's input as its shard's sidecar records it: ``input`` (the plan's input number),
    ``location`` (path or URL), ``kind`` ("byte" or "row"), ``offset`` (byte offset of its record in the
    decompressed input, or its row) and ``line`` (1-based; None where lines are not counted)."""

    input: int
    location: str
    kind: str
    offset: int
    line: int | None


def shard_origin(side: "Sidecar", doc: int) -> ShardOrigin | None:
    """Where document ``doc`` (file order) of the shard came from; None for a shard that does not record
    it (format 1 and 2: the task's inputs, ``side.inputs``, are all there is)."""
    origins = side.origins
    if origins is None:
        return None
    got = origins[doc]
    listed = next((i for i in side.inputs if i.input == got.input), None)
    if listed is None:      # decoding holds origins to the numbered inputs; a sidecar that numbers none
        raise RecordError(f"{side.where or side.shard}: field 'origins': document {doc} names input {got.input}, "
                          f"which is not in the sidecar's 'inputs'")
    return ShardOrigin(got.input, listed.path, "row" if listed.unit == "rows" else "byte", got.offset,
                       None if got.line < 0 else got.line)


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


class PlanSources:
    """What ``inputs.lookup.document_record`` needs of a plan: its inputs by number (``inputs``, resolved
    from the task records on first use), the options its tasks read with and whether it is a chat job.
    Keep one for many look-ups: each task record is read at most once."""

    def __init__(self, output: Path, job: "Job"):
        self.output, self.job = output, job
        self.read: TokenizeOptions = job.options
        self.chat = job.options.chat is not None
        self._found: dict[int, InputFile] = {}
        self._tasks: set[int] = set()
        self._every = False

    @property
    def inputs(self) -> Sequence[InputFile]:
        return _Inputs(self)

    def note_task(self, task: int) -> None:
        """Resolve the inputs task ``task`` reads (its record only): what a shard's sidecar names."""
        if task in self._tasks or self._every:
            return
        from shardprep.job.plan_files import TaskTable

        with TaskTable(self.output, self.job) as table:
            if not 0 <= task < table.n_tasks:
                raise RecordError(f"{self.output / 'plan'}: no task {task} (the plan has {table.n_tasks})")
            self._add(table.task(task))
        self._tasks.add(task)

    def input(self, number: int) -> InputFile:
        """Input ``number`` as planned (every task record read once if no task named it yet)."""
        if number not in self._found and not self._every:
            from shardprep.job.plan_files import TaskTable

            with TaskTable(self.output, self.job) as table:
                for task in table:
                    self._add(task)
            self._every = True
            count = self.job.summary.inputs
            missing = next((i for i in range(count) if i not in self._found), None)
            if missing is not None or len(self._found) != count:
                raise RecordError(f"{self.output / 'plan'}: the task records name {len(self._found)} input(s) but "
                                  f"job.json counts {count}"
                                  + (f" (input {missing} is in no task)" if missing is not None else ""))
        return self._found[number]

    def _add(self, task: "Task") -> None:
        for item in task.items:
            self._found.setdefault(item.work.input, item.input.reached_with(self.job.storage))


class _Inputs(Sequence["InputFile"]):
    """The plan's inputs by number, each resolved when asked for."""

    def __init__(self, sources: PlanSources):
        self.sources = sources

    def __len__(self) -> int:
        return self.sources.job.summary.inputs

    @overload
    def __getitem__(self, i: int) -> InputFile: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[InputFile]: ...

    def __getitem__(self, i: int | slice) -> InputFile | Sequence[InputFile]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.sources.input(i % len(self))


def plan_sources(output: str | Path) -> PlanSources:
    """The sources of the plan in ``output`` (job.json read now, task records when needed)."""
    from shardprep.job.state import load_job

    output = Path(output)
    return PlanSources(output, load_job(output))


def plan_inputs(output: str | Path) -> list[PlannedInput]:
    """Every input of the plan in ``output``, by its number (what ``origins.input`` holds).  Reads every task's
    record once (linear in the plan); RecordError when the records do not name every input."""
    sources = plan_sources(output)
    return [PlannedInput(i, sources.input(i)) for i in range(sources.job.summary.inputs)]


def document_record(output: str | Path | PlanSources, input_index: int, offset_or_row: int, *,
                    task: int | None = None) -> DocumentSource:
    """The document at ``offset_or_row`` of the plan's input ``input_index``, exactly as its task read it
    (``inputs.lookup.document_record``); ``output`` an output directory or its :func:`plan_sources`.
    ``task``: the task that read it (the shard's sidecar says which): only its record is read."""
    from shardprep.inputs.lookup import document_record as read_document

    sources = output if isinstance(output, PlanSources) else plan_sources(output)
    if task is not None:
        sources.note_task(task)
    return read_document(sources, input_index, offset_or_row)
