"""Parquet and Arrow inputs: only the text column, in record batches, checked with Arrow compute.

Why: a row's value used to be turned into a Python string and checked by Python code, one row at a
time.  Here nulls, empty or whitespace-only strings and strings over the byte limit are found with Arrow
kernels over a whole batch; Python touches only the rows skipped (to record them, in row order) and the
kept strings are built in C (``to_pylist``).  The policy is ``inputs.readers.row_texts``, which also
handles any column that is not a string column, and ``--strict``.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from shardprep.errors import InputDataError
from shardprep.inputs.arrow import row_slices
from shardprep.inputs.discover import InputFile
from shardprep.inputs.fastpath import WHITESPACE, DocBatch
from shardprep.inputs.planned import OpenInput, parquet_file
from shardprep.inputs.readers import NO_LINE, SkipLog, row_texts

ROWS_PER_BATCH = 1 << 15
# Python's str.isspace() characters as an RE2 class: a value matching it whole is an "empty" document.
_BLANK = "^[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]*$"


def _no_column(path: str, column: str, names: list[str]) -> InputDataError:
    return InputDataError(f"{path}: no column {column!r} (columns: {', '.join(names)}); choose one with --text-field")


def column_batch(path: str, values: Any, first_row: int, limit: int, skips: SkipLog) -> DocBatch:
    """The documents of ``values`` (a pyarrow array of the text column, rows from ``first_row``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)) or skips.strict:
        return DocBatch.placed(list(row_texts(path, enumerate(values.to_pylist(), first_row), limit, skips)))
    blank = pc.fill_null(pc.match_substring_regex(values, _BLANK), True)
    too_long = pc.fill_null(pc.greater(pc.binary_length(values), limit), False)
    bad = pc.or_(blank, too_long)
    rows = np.arange(first_row, first_row + len(values), dtype=np.int64)
    if pc.any(bad).as_py():
        flags = blank.to_numpy(zero_copy_only=False)
        for i in bad.to_numpy(zero_copy_only=False).nonzero()[0].tolist():
            if flags[i]:
                skips.skip("empty", path, first_row + i + 1, "row")
            else:
                skips.skip("too_long", path, first_row + i + 1, f"longer than {limit} bytes")
        values = pc.filter(values, pc.invert(bad))
        rows = rows[~bad.to_numpy(zero_copy_only=False)]
    docs = values.to_pylist()
    return DocBatch(len(docs), strs=docs, offsets=rows, lines=np.full(len(docs), NO_LINE, dtype=np.int64))


def parquet_batches(inp: InputFile, start: int, end: int | None, column: str, limit: int,
                    skips: SkipLog) -> Iterator[DocBatch]:
    """Rows ``[start, end)`` of a parquet file's text column, one record batch at a time (a remote
    object's footer and column chunks in ranged requests, the object checked once they are read)."""
    with OpenInput(inp) as opened:
        yield from _row_groups(inp.path, parquet_file(opened), start, end, column, limit, skips)
        if opened.remote:
            opened.check()


def _row_groups(path: str, pf: Any, start: int, end: int | None, column: str, limit: int,
                skips: SkipLog) -> Iterator[DocBatch]:
    names = pf.schema_arrow.names
    if column not in names:
        raise _no_column(path, column, names)
    for first, part in parquet_row_slices(pf, start, end, [column]):
        yield column_batch(path, part.column(0), first, limit, skips)


def parquet_row_slices(pf: Any, start: int, end: int | None, columns: list[str],
                       batch_size: int = ROWS_PER_BATCH) -> Iterator[tuple[int, Any]]:
    """(first row, record batch slice of ``columns``) for rows ``[start, end)`` of a parquet file: only the row
    groups holding some are read, each streamed in record batches, not read whole (``read_row_group``): a
    fifth less memory at the peak and a quarter less time on 20 MB groups (docs/benchmarks.md, issue 20)."""
    end = pf.metadata.num_rows if end is None else end
    row = 0
    for rg in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(rg).num_rows
        lo, hi = max(start - row, 0), min(end - row, n)
        if lo < hi:
            batches = pf.iter_batches(batch_size=batch_size, row_groups=[rg], columns=columns)
            yield from ((row + first, part) for first, part in row_slices(batches, lo, hi))
        row += n
        if row >= end:
            break


def arrow_batches(inp: InputFile, start: int, end: int | None, column: str, limit: int,
                  skips: SkipLog) -> Iterator[DocBatch]:
    """Rows ``[start, end)`` of an Arrow (``save_to_disk``) file's text column, one record batch at a time."""
    from shardprep.inputs.arrow import iter_column_slices

    for first, values in iter_column_slices(inp.path, column, start, end):
        for off in range(0, len(values), ROWS_PER_BATCH):
            yield column_batch(inp.path, values.slice(off, ROWS_PER_BATCH), first + off, limit, skips)
