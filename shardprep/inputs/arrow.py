"""Arrow IPC inputs: the ``data-*.arrow`` files a Hugging Face ``Dataset.save_to_disk`` writes.

Why read them directly: a dataset saved with ``save_to_disk`` already is a set of memory-mappable Arrow
files, so tokenizing it needs neither an export to jsonl nor the ``datasets`` library on compute nodes.
``datasets`` writes the IPC *stream* format (record batches of ~1,000 rows, no footer); loose ``.arrow``
files in the IPC *file* format are accepted too.  Files are memory-mapped and read one record batch at a
time, so memory stays bounded by one batch of one column whatever the file size.

A saved dataset directory holds ``state.json`` (its data files, in row order), ``dataset_info.json`` and
the arrow files.  Other ``.arrow`` files next to them (``cache-*.arrow`` left by ``Dataset.map``) are not
part of the dataset, so the file list always comes from ``state.json``.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from shardprep.errors import InputDataError

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
INFO_FILE = "dataset_info.json"
DATASET_DICT_FILE = "dataset_dict.json"
_FILE_MAGIC = b"ARROW1"


def is_saved_dataset(directory: str | os.PathLike) -> bool:
    """Is ``directory`` the output of ``Dataset.save_to_disk`` (one split)?"""
    d = Path(directory)
    return (d / STATE_FILE).is_file() and (d / INFO_FILE).is_file()


def saved_dataset_splits(directory: str | os.PathLike) -> list[str] | None:
    """The split names when ``directory`` is a ``DatasetDict.save_to_disk`` output, else None."""
    path = Path(directory) / DATASET_DICT_FILE
    if not path.is_file():
        return None
    try:
        return [str(s) for s in orjson.loads(path.read_bytes()).get("splits", [])]
    except (orjson.JSONDecodeError, AttributeError) as e:
        raise InputDataError(f"{path}: not a valid {DATASET_DICT_FILE} ({e})") from None


def saved_dataset_files(directory: str | os.PathLike) -> list[str]:
    """The data files of a saved dataset, in row order, as listed by its ``state.json``."""
    state_path = Path(directory) / STATE_FILE
    try:
        state: dict[str, Any] = orjson.loads(state_path.read_bytes())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise InputDataError(f"{state_path}: not a readable datasets state file ({type(e).__name__}: {e})",
                             hint="re-save the dataset with Dataset.save_to_disk") from None
    if state.get("_indices_data_files"):  # written by very old datasets versions only
        raise InputDataError(f"{state_path}: the dataset has an indices mapping (select/shuffle not flattened)",
                             hint="call dataset.flatten_indices() before save_to_disk")
    files = []
    for name in names:
        path = os.path.join(os.path.abspath(directory), name)
        if not os.path.isfile(path):
            raise InputDataError(f"{state_path} lists {name}, which does not exist in {directory}")
        files.append(path)
    return files


@contextlib.contextmanager
def _ipc_reader(path: str) -> Iterator[Any]:
    """An Arrow IPC reader of ``path`` (file format: ``RecordBatchFileReader``, else a stream reader),
    memory-mapped; errors name the file."""
    import pyarrow as pa

    try:
        source = pa.memory_map(path, "r")
    except OSError as e:
        raise InputDataError(f"input {path} is not readable: {e}") from None
    with source:
        try:
            is_file_format = source.read(len(_FILE_MAGIC)) == _FILE_MAGIC
            source.seek(0)
            yield pa.ipc.open_file(source) if is_file_format else pa.ipc.open_stream(source)
        except pa.ArrowInvalid as e:
            raise InputDataError(f"input {path} is not a readable Arrow IPC file: {e}") from None


def record_batches(path: str) -> Iterator[Any]:
    """Record batches of an Arrow IPC file (stream or file format), memory-mapped, one at a time."""
    with _ipc_reader(path) as reader:
        if hasattr(reader, "num_record_batches"):      # the file format
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from reader


def column_names(path: str) -> list[str]:
    """The columns of an Arrow file, from its schema (the first message; no batch is read)."""
    return list(column_types(path))


def column_types(path: str) -> dict[str, Any]:
    """Each column's pyarrow type, from the schema (the first message; no batch is read)."""
    with _ipc_reader(path) as reader:
        return dict(zip(reader.schema.names, reader.schema.types))


def count_rows(path: str) -> int:
    """Rows in an Arrow file (reads only batch headers: the data stays memory-mapped, untouched)."""
    return sum(b.num_rows for b in record_batches(path))


def row_slices(batches: Iterable[Any], start: int = 0, end: int | None = None) -> Iterator[tuple[int, Any]]:
    """(first row, slice) of the rows ``[start, end)`` in each record batch that holds some, in order; no batch
    is read past ``end``.  Arrow files and parquet files' ``iter_batches`` alike."""
    row = 0
    for batch in batches:
        n = batch.num_rows
        lo, hi = max(start - row, 0), n if end is None else min(end - row, n)
        if lo < hi:
            yield row + lo, batch.slice(lo, hi - lo)
        row += n
        if end is not None and row >= end:
            break


def iter_column_slices(path: str, column: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, Any]]:
    """(first row, pyarrow array) of ``column`` for rows ``[start, end)``, one record batch slice at a time."""
    def checked() -> Iterator[Any]:
        for i, batch in enumerate(record_batches(path)):
            if i == 0 and column not in batch.schema.names:
                raise InputDataError(f"{path}: no column {column!r} (columns: {', '.join(batch.schema.names)}); "
                                     f"choose one with --text-field")
            yield batch

    for first, part in row_slices(checked(), start, end):
        yield first, part.column(column)


def _batch_weights(path: str, column: str) -> list[tuple[int, int]]:
    """(rows, bytes of ``column``) per record batch: what tokenizing a batch costs, roughly."""
    out = []
    for batch in record_batches(path):
        names = batch.schema.names
        weight = batch.column(column).nbytes if column in names else batch.nbytes
        out.append((batch.num_rows, max(int(weight), 1) if batch.num_rows else 0))
    return out


def split_rows(path: str, parts: int, column: str) -> list[tuple[int, int]]:
    """Cut an Arrow file into ``parts`` contiguous row ranges of about equal text bytes.

    Cuts may fall inside a record batch (the reader slices batches), so the balance holds even for a
    file of one huge batch.  Ranges are non-empty, cover every row once and are in order.
    """
    weights = _batch_weights(path, column)
    rows_total = sum(r for r, _ in weights)
    if parts <= 1 or rows_total <= 1:
        return [(0, rows_total)]
    cum_bytes, cum_rows = [0], [0]
    for rows, nbytes in weights:
        cum_bytes.append(cum_bytes[-1] + nbytes)
        cum_rows.append(cum_rows[-1] + rows)
    total = cum_bytes[-1]
    cuts = set()
    for k in range(1, parts):
        target = total * k / parts
        b = min(bisect.bisect_right(cum_bytes, target) - 1, len(weights) - 1)
        rows, nbytes = weights[b]
        frac = (target - cum_bytes[b]) / nbytes if nbytes else 0.0
        cuts.add(cum_rows[b] + round(frac * rows))
    bounds = [0] + sorted(c for c in cuts if 0 < c < rows_total) + [rows_total]
    return list(zip(bounds, bounds[1:]))
