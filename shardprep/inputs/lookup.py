"""One document read back from its input, given its origin (sidecar ``origins``: input, offset or row).

Why the task's own readers: "the text the task tokenized" must be exactly that, so the record is read with
the reading the task used (``inputs.batches.item_batches`` over a one-record work item: the same text field,
txt mode, bad-input policy, CR and BOM handling) and the record it skipped is refused, not returned.  The
input is held to what the plan froze (size and mtime of a file, identity of a remote object), as a task is.

A compressed input is decompressed up to the offset (gzip and zstd cannot seek); a parquet or Arrow input
reads the row's record batch only.  Which inputs a plan has, and how its tasks read them, is the job layer's
(``job.sources.plan_sources``): this module takes anything with those three attributes (:class:`Sources`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from shardprep.errors import InputDataError
from shardprep.inputs.blocks import UTF8_BOM, open_binary
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import stat_change
from shardprep.inputs.readers import ReadOptions, SkipLog, WorkItem

BEFORE = 1 << 16      # bytes read before a paragraph's offset to check that a blank line precedes it


class Sources(Protocol):
    """What reading a document back needs of a plan: its inputs by number, the task's read options and whether
    it is a chat job (its documents are records holding conversations)."""

    @property
    def inputs(self) -> Sequence[InputFile]: ...

    @property
    def read(self) -> ReadOptions: ...

    @property
    def chat(self) -> bool: ...


@dataclass(frozen=True)
class DocumentSource:
    """One document as its input holds it.

    ``text``: what a text task tokenized (before BOS/EOS); None for a chat job, whose document is the
    conversation in ``record`` rendered by the job's template.  ``record``: the JSON object of a jsonl line,
    a table row's columns (a text job: its text column; a chat job: the columns a conversation may use), or
    the text itself for a txt input."""

    input: int
    location: str              # the input's path or URL
    offset: int                # byte offset in the decompressed input, or row
    kind: str                  # "byte" | "row"
    record: Any
    text: str | None


def document_record(sources: Sources, input_index: int, offset_or_row: int) -> DocumentSource:
    """The document the plan's input ``input_index`` holds at ``offset_or_row``, exactly as a task read it.

    InputDataError (one line naming the input): no such input, the input changed since planning, the offset
    does not start a record, or the task skipped that record (why, in its words)."""
    if not 0 <= input_index < len(sources.inputs):
        raise InputDataError(f"input {input_index} is not one of the plan's {len(sources.inputs)} inputs")
    inp = sources.inputs[input_index]
    if offset_or_row < 0 or (inp.rows is not None and inp.tabular and offset_or_row >= inp.rows):
        raise InputDataError(f"{inp.path}: no {'row' if inp.tabular else 'byte offset'} {offset_or_row}"
                             + (f" (it has {inp.rows} rows)" if inp.tabular else ""))
    _check_unchanged(inp)
    if inp.tabular:
        item = WorkItem(input_index, offset_or_row, offset_or_row + 1, "rows", offset_or_row + 1)
    else:
        paragraph = _paragraphs(inp, sources.read) and not sources.chat
        _check_record_start(inp, offset_or_row, paragraph=paragraph)
        item = WorkItem(input_index, offset_or_row, None if paragraph else offset_or_row + 1, "bytes", None)
    kind = "row" if inp.tabular else "byte"
    if sources.chat:
        return DocumentSource(input_index, inp.path, offset_or_row, kind, _chat_record(inp, item, sources.read), None)
    text = _text(inp, item, sources.read, offset_or_row)
    record: Any = text if inp.format == "txt" else {sources.read.text_field: text}
    if inp.format == "jsonl":
        record = _chat_record(inp, item, sources.read)      # the whole object, as the line holds it
    return DocumentSource(input_index, inp.path, offset_or_row, kind, record, text)


def _paragraphs(inp: InputFile, read: ReadOptions) -> bool:
    return inp.format == "txt" and read.txt_mode == "paragraph"


def _check_unchanged(inp: InputFile) -> None:
    """A file as planned (size, mtime); a remote object is held to its identity by every read."""
    change = stat_change(inp)
    if change:
        raise InputDataError(f"input {inp.path} changed since it was planned ({change}): its documents' "
                             f"offsets no longer point into what was tokenized")


def _preceding(inp: InputFile, offset: int, n: int) -> bytes:
    """Up to ``n`` bytes of the (decompressed) input just before ``offset``."""
    opened, f = open_binary(inp)
    try:
        start = max(0, offset - n)
        if start:
            f.seek(start)
        data = f.read(offset - start) if offset > start else b""
        return data or b""
    finally:
        f.close()
        opened.close()


def _check_record_start(inp: InputFile, offset: int, *, paragraph: bool) -> None:
    """``offset`` starts a line (the file's start, after its BOM, or after a newline); a paragraph's, after a
    blank line too."""
    if offset == 0:
        return
    before = _preceding(inp, offset, BEFORE if paragraph else len(UTF8_BOM))
    if before == UTF8_BOM and offset == len(UTF8_BOM):
        return
    if not before.endswith(b"\n"):
        raise InputDataError(f"{inp.path}: byte offset {offset} does not start a record (no line starts there)")
    if paragraph:
        previous = before[:-1].rsplit(b"\n", 1)
        if (len(previous) == 2 or len(before) == offset) and previous[-1].strip():
            raise InputDataError(f"{inp.path}: byte offset {offset} does not start a paragraph (the line before "
                                 f"it is not blank)")


def _text(inp: InputFile, item: WorkItem, read: ReadOptions, offset: int) -> str:
    """The document a text task made of the record at ``item``'s start, or why it made none."""
    from shardprep.inputs.batches import item_batches

    skips = SkipLog()
    batches = item_batches(inp, item, read, skips, fast=False, prefetch=False)
    try:
        for batch in batches:
            if batch.offsets is not None and int(batch.offsets[0]) == offset:
                return batch.head(1)[0]
            break
    finally:
        batches.close()  # type: ignore[attr-defined]  # a generator: its input closed now
    raise _skipped(inp, offset, skips)


def _skipped(inp: InputFile, offset: int, skips: SkipLog) -> InputDataError:
    why = next((f"{e.reason.replace('_', ' ')}{': ' + e.detail if e.detail else ''}" for e in skips.examples),
               "no document starts there")
    what = "row" if inp.tabular else "byte offset"
    return InputDataError(f"{inp.path}: the record at {what} {offset} is not a document the task kept ({why})")


def _chat_record(inp: InputFile, item: WorkItem, read: ReadOptions) -> dict[str, Any]:
    """The JSON object (or table row) a chat task read at ``item``'s start."""
    from shardprep.inputs.chat_records import item_records

    skips = SkipLog()
    for batch in item_records(inp, item, read, skips):
        for rec in batch.records:
            if rec.origin()[0] == item.start:
                return rec.value
        break
    raise _skipped(inp, item.start, skips)

