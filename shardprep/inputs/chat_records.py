"""Records of one work item for chat data (``--chat``): whole JSON objects or table rows, not a text field.

A conversation lives in a structured field (``messages``, ``conversations``, ``prompt`` + ``completion``),
so the text path's fast block reading (which pulls one string field out of each line) does not apply: each
jsonl line is parsed whole, each table row read as a dict of the columns a conversation may use.  The bad
input policy is the text path's (``inputs.readers``): blank lines, invalid UTF-8, malformed JSON, lines
over ``max_doc_bytes`` are counted and skipped with their file and line, through the same ``SkipLog``.
What makes a record a conversation, and its skips, belong to the task (``job.chat_encode``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from shardprep.inputs.blocks import LongLine, item_blocks
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import OpenInput, rows_then_check
from shardprep.inputs.readers import NO_LINE, ReadOptions, SkipLog, WorkItem, block_lines, jsonl_object

# Columns a conversation may use (``chat.conversations``): a table is read with these only.
CHAT_COLUMNS = ("messages", "conversations", "prompt", "completion", "tools")
ROWS_PER_BATCH = 1024


@dataclass(frozen=True)
class Record:
    """One record and where it is: its 1-based line (the row number for tables; None deep inside a split
    file) and byte offset (None for tables)."""

    value: dict[str, Any]
    line: int | None
    byte: int | None

    def where(self, path: str) -> str:
        return f"{path}:{self.line}" if self.line is not None else f"{path} (line at byte {self.byte})"

    def origin(self) -> tuple[int, int]:
        """(byte offset, line) of a jsonl record (line -1 where not counted); (row, -1) of a table's."""
        if self.byte is None:
            return (self.line or 1) - 1, NO_LINE
        return self.byte, NO_LINE if self.line is None else self.line


@dataclass(frozen=True)
class RecordBatch:
    records: list[Record]
    nbytes: int          # input bytes the batch came from (progress)


def item_records(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog,
                 columns: tuple[str, ...] = CHAT_COLUMNS) -> Iterator[RecordBatch]:
    """The records of one work item in file order, a block (or record batch) at a time; exactly the planned
    bytes or rows are read, then the input is checked unchanged (as the text path does)."""
    if inp.tabular:
        end = item.end if item.end is not None or inp.rows is None else inp.rows
        rows = _parquet_rows if inp.format == "parquet" else _arrow_rows
        yield from rows_then_check(inp, rows(inp, item.start, end, columns))
        return
    lineno, path, limit = item.first_line, inp.path, opts.max_doc_bytes
    for piece in item_blocks(inp, item.start, item.end, limit):
        if isinstance(piece, LongLine):
            skips.skip("too_long", path, lineno, f"longer than {limit} bytes", byte=piece.start)
            lineno = None if lineno is None else lineno + 1
            continue
        lines = list(block_lines(piece.data, piece.start, lineno, limit, piece.terminated, path, skips))
        records = [Record(obj, line, byte) for line, byte, raw in lines
                   if (obj := jsonl_object(raw, path, line, byte, skips)) is not None]
        n = piece.data.count(b"\n") + (0 if piece.terminated else 1)
        lineno = None if lineno is None else lineno + n
        yield RecordBatch(records, len(piece.data))


def _rows(table_batches: Iterator[tuple[int, Any]]) -> Iterator[RecordBatch]:
    """(first row, pyarrow table slice) -> batches of row records (line = 1-based row number)."""
    for first, part in table_batches:
        values = part.to_pylist()
        yield RecordBatch([Record(v, first + i + 1, None) for i, v in enumerate(values)], int(part.nbytes))


def _parquet_rows(inp: InputFile, start: int, end: int | None, columns: tuple[str, ...]) -> Iterator[RecordBatch]:
    from shardprep.inputs.planned import parquet_file
    from shardprep.inputs.tabular import parquet_row_slices

    with OpenInput(inp) as opened:
        pf = parquet_file(opened)
        wanted = [c for c in columns if c in pf.schema_arrow.names]
        yield from _rows(parquet_row_slices(pf, start, end, wanted, ROWS_PER_BATCH))
        if opened.remote:
            opened.check()


def _arrow_rows(inp: InputFile, start: int, end: int | None, columns: tuple[str, ...]) -> Iterator[RecordBatch]:
    from shardprep.inputs.arrow import record_batches, row_slices

    parts = row_slices(record_batches(inp.path), start, end)
    yield from _rows((first, part.select([c for c in columns if c in part.schema.names])) for first, part in parts)
