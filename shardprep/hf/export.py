"""Export a Hugging Face dataset to N files of balanced size (``shardprep export-hf``).

The pipeline usually starts from a dataset on the hub or saved with ``save_to_disk``; the tokenize job
wants plain files it can split and retry.  This module writes them.

How the files are balanced, and why: file ``k`` gets a *contiguous* range of rows, cut where the running
total of text bytes crosses ``k/N`` of the whole.  Contiguous ranges keep the dataset's row order (file 0
then file 1 ... concatenate to the dataset, so tokenizing the files gives the same tokens in the same
order as tokenizing the dataset), and a file is finished before the next begins, so an interrupted export
resumes at the first unfinished file.  The cut needs the total, so the export reads the text column
twice: a *measure* pass (vectorised byte counts; for a streamed source this is a second read) and the
*write* pass.  The measure result is kept in the manifest, so a resumed export does not measure again.
Balance is exact in text bytes; file sizes differ by at most about one document plus JSON escaping.

Sources: a ``save_to_disk`` directory (memory-mapped, read by row ranges), a builder name (``json``,
``parquet``, ``text``, ``csv``, ``arrow``) with ``--data-files`` (streamed), or a hub id (streamed).
Nothing is materialised beyond one batch of rows.

Documents: a text that is missing (null) or only whitespace is skipped and counted as ``empty`` (the same
rule the tokenize readers apply).  ``txt`` output holds one document per line, so a text containing a line
break (``\\n`` or ``\\r``) is refused during the measure pass, before anything is written: escaping would
change the text, and jsonl keeps it intact.

Every file is written with ``storage.atomic.atomic_writer``; the manifest ``export.json`` is rewritten after each
file.  Re-running the same command skips finished files; other arguments into the same output directory
are refused (``PlanConflictError``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from shardprep import __version__
from shardprep.errors import ConfigError, InputDataError, PlanConflictError
from shardprep.hf.source import Source, open_source
from shardprep.storage.atomic import HashingWriter, atomic_writer, read_json, remove_stale_temps, write_json_atomic

log = logging.getLogger(__name__)

MANIFEST = "export.json"
EXPORT_VERSION = 1
FORMATS = ("jsonl", "txt")
SKIP_REASONS = ("empty", "not_text")


@dataclass(frozen=True)
class ExportRequest:
    """What to export and how; validated at construction (errors name the command-line option)."""

    source: str
    output: Path
    num_files: int
    config: str | None = None
    split: str | None = None
    data_files: tuple[str, ...] = ()
    format: str = "jsonl"
    text_field: str = "text"
    id_field: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.num_files, int) or self.num_files < 1:
            raise ConfigError(f"--num-files={self.num_files!r} is invalid: must be a positive integer")
        if self.format not in FORMATS:
            raise ConfigError(f"--format={self.format!r} is invalid: one of {', '.join(FORMATS)}")
        if not self.text_field:
            raise ConfigError("--text-field must be a non-empty column name")
        if self.format == "txt" and self.id_field:
            raise ConfigError("--id-field needs --format jsonl: a txt line holds only the text")

    def file_name(self, k: int) -> str:
        width = max(5, len(str(self.num_files)))
        return f"part-{k:0{width}d}-of-{self.num_files:0{width}d}.{self.format}"


@dataclass
class FileRecord:
    """One finished output file, as the manifest records it."""

    name: str
    rows_start: int
    rows_end: int
    weight_end: int           # running text bytes after the file's last row (where the next file resumes)
    documents: int
    skipped: dict[str, int]
    bytes: int
    sha256: str


@dataclass
class ExportResult:
    output: Path
    files: list[FileRecord] = field(default_factory=list)
    rows: int = 0
    written_now: int = 0      # files written by this run (the rest were already complete)

    @property
    def documents(self) -> int:
        return sum(f.documents for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def skipped(self) -> dict[str, int]:
        return {r: sum(f.skipped.get(r, 0) for f in self.files) for r in SKIP_REASONS}


# ------------------------------------------------------------------------------------------- manifest


def _fingerprint(arguments: dict, identity: Any) -> str:
    blob = orjson.dumps({"arguments": arguments, "identity": identity}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


def _load_manifest(req: ExportRequest, arguments: dict, identity: Any) -> dict | None:
    """The manifest already in the output directory when it belongs to this export; refuse otherwise."""
    path = req.output / MANIFEST
    hint = f"use a new --output, or delete {req.output} to export again with these arguments"
    if not path.exists():
        strays = sorted(p.name for p in req.output.glob("part-*") if p.is_file()) if req.output.is_dir() else []
        if strays:
            raise PlanConflictError(f"{req.output} holds {strays[0]} (and {len(strays) - 1} more) but no {MANIFEST}: "
                                    "not an export this command can resume", hint=hint)
        return None
    try:
        old = read_json(path)
    except (OSError, orjson.JSONDecodeError) as e:
        raise PlanConflictError(f"{path} is unreadable ({e})", hint=hint) from None
    if old.get("arguments") != arguments:
        before = old.get("arguments") or {}
        diffs = [f"{k}: {before.get(k)!r} -> {v!r}" for k, v in arguments.items() if before.get(k) != v]
        raise PlanConflictError(f"{req.output} holds an export made with other arguments ({'; '.join(diffs)})",
                                hint=hint)
    if old.get("fingerprint") != _fingerprint(arguments, identity):
        raise PlanConflictError(f"the source of the export in {req.output} changed since it started "
                                "(data files differ in size or mtime)", hint=hint)
    return old


def _manifest(req: ExportRequest, src: Source, arguments: dict, measure: dict, files: list[FileRecord],
              complete: bool) -> dict:
    skipped = {r: sum(f.skipped.get(r, 0) for f in files) for r in SKIP_REASONS}
    return {
        "format_version": EXPORT_VERSION,
        "created_by": f"shardprep {__version__}",
        "status": "complete" if complete else "in_progress",
        "fingerprint": _fingerprint(arguments, src.identity),
        "arguments": arguments,
        "source": src.description, "kind": src.kind, "config": req.config, "split": src.split,
        "data_files": list(src.data_files), "format": req.format, "text_field": req.text_field,
        "id_field": req.id_field, "num_files": req.num_files,
        "source_identity": src.identity,
        "measure": measure,
        "rows": measure["rows"],
        "documents": sum(f.documents for f in files),
        "skipped": skipped,
        "bytes": sum(f.bytes for f in files),
        "files": [asdict(f) for f in files],
    }


# ---------------------------------------------------------------------------------------------- passes


def _progress(total: int | None, desc: str, enabled: bool) -> Any:   # a tqdm bar
    from tqdm import tqdm

    return tqdm(total=total, unit="row", unit_scale=True, desc=desc, file=sys.stderr, disable=not enabled,
                dynamic_ncols=True, mininterval=0.5)


def _weights(column: Any) -> np.ndarray:   # a pyarrow (chunked) string array
    """Text bytes per row (0 for null): the balance metric, identical in both passes."""
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(pc.binary_length(column), 0), dtype=np.int64)


def measure(src: Source, req: ExportRequest, *, progress: bool) -> dict:
    """Rows and total text bytes; refuses line breaks for txt output before anything is written."""
    import pyarrow.compute as pc

    rows = text_bytes = 0
    with _progress(src.num_rows, "measure", progress) as bar:
        for batch in src.batches([req.text_field]):
            col = batch.column(req.text_field)
            if req.format == "txt":
                breaks = pc.fill_null(pc.match_substring_regex(col, "[\r\n]"), False)
                if pc.any(breaks).as_py():
                    first = rows + int(np.flatnonzero(np.asarray(breaks))[0])
                    raise InputDataError(
                        f"{src.description}: row {first} of column {req.text_field!r} contains a line break, which "
                        "a txt file (one document per line) cannot hold",
                        hint="use --format jsonl (the default), which keeps line breaks")
            text_bytes += int(_weights(col).sum())
            rows += batch.num_rows
            bar.update(batch.num_rows)
    return {"rows": rows, "text_bytes": text_bytes}


class _FileWriter:
    """Writes one output file atomically and counts what went in."""

    def __init__(self, req: ExportRequest, k: int, rows_start: int):
        self.name = req.file_name(k)
        self.req = req
        self.rows_start = rows_start
        self.documents = 0
        self.skipped = dict.fromkeys(SKIP_REASONS, 0)
        remove_stale_temps(req.output, self.name)   # left by a killed export
        self._ctx = atomic_writer(req.output / self.name)
        self._hw = HashingWriter(self._ctx.__enter__())

    def write(self, texts: list, ids: list | None) -> None:
        lines = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                self.skipped["empty" if text is None else "not_text"] += 1
                continue
            if not text.strip():
                self.skipped["empty"] += 1
                continue
            if self.req.format == "txt":
                lines.append(text.encode("utf-8") + b"\n")
            else:
                obj = {"text": text} if ids is None else {"text": text, "id": ids[i]}
                lines.append(orjson.dumps(obj, default=str) + b"\n")
        self.documents += len(lines)
        self._hw.write(b"".join(lines))

    def close(self, rows_end: int, weight_end: int) -> FileRecord:
        self._ctx.__exit__(None, None, None)
        return FileRecord(self.name, self.rows_start, rows_end, weight_end, self.documents, self.skipped,
                          self._hw.bytes_written, self._hw.sha256.hexdigest())

    def abort(self) -> None:
        self._ctx.__exit__(*sys.exc_info())


def _complete_prefix(req: ExportRequest, old: dict | None) -> list[FileRecord]:
    """Files of a previous run that are still intact, in order, up to the first missing one."""
    done: list[FileRecord] = []
    for k, entry in enumerate((old or {}).get("files", [])):
        rec = FileRecord(**entry)
        path = req.output / rec.name
        if rec.name != req.file_name(k) or not path.is_file() or path.stat().st_size != rec.bytes:
            break
        done.append(rec)
    return done


def export(req: ExportRequest, *, progress: bool = True) -> ExportResult:
    """Run (or resume) the export described by ``req``; returns what the output holds."""
    src = open_source(req.source, config=req.config, split=req.split, data_files=req.data_files)
    columns = src.check_columns(req.text_field, req.id_field)
    arguments = {"source": src.description, "config": req.config, "split": src.split,
                 "data_files": list(src.data_files), "format": req.format, "text_field": req.text_field,
                 "id_field": req.id_field, "num_files": req.num_files}
    req.output.mkdir(parents=True, exist_ok=True)
    old = _load_manifest(req, arguments, src.identity)
    if old and old.get("status") == "complete" and len(_complete_prefix(req, old)) == req.num_files:
        log.info("%s already holds this export (%d files); nothing to do", req.output, req.num_files)
        return ExportResult(req.output, _complete_prefix(req, old), old["rows"], 0)

    measured = old["measure"] if old else measure(src, req, progress=progress)
    if measured["text_bytes"] == 0:
        raise InputDataError(f"{src.description}: column {req.text_field!r} holds no text in {measured['rows']} rows")
    done = _complete_prefix(req, old)
    write_json_atomic(req.output / MANIFEST, _manifest(req, src, arguments, measured, done, False))
    if done:
        log.info("resuming: %d of %d file(s) already complete", len(done), req.num_files)
    files = _write_pass(req, src, columns, arguments, measured, done, progress=progress)
    write_json_atomic(req.output / MANIFEST, _manifest(req, src, arguments, measured, files, True))
    result = ExportResult(req.output, files, measured["rows"], req.num_files - len(done))
    empty = [f.name for f in result.files if f.documents == 0]
    if empty:
        why = ("fewer documents than files" if result.documents < req.num_files
               else "a few rows hold most of the text, and files are cut by text bytes")
        log.warning("%d of %d file(s) are empty (%d document(s); %s): %s%s", len(empty), req.num_files,
                    result.documents, why, ", ".join(empty[:5]), " ..." if len(empty) > 5 else "")
    return result


def _write_pass(req: ExportRequest, src: Source, columns: list[str], arguments: dict, measured: dict,
                done: list[FileRecord], *, progress: bool) -> list[FileRecord]:
    """Stream rows from the first unfinished file on; file ``k`` takes the rows whose text-byte midpoint
    falls in ``[k/N, (k+1)/N)`` of the total, so the cut is the same on every run."""
    n, total = req.num_files, measured["text_bytes"]
    files = list(done)
    start_row = done[-1].rows_end if done else 0
    weight = done[-1].weight_end if done else 0
    row = start_row
    current: _FileWriter | None = None

    def finish_through(k: int) -> None:
        """Close the open file and create every file before ``k`` (empty ones when a run skips them)."""
        nonlocal current
        while len(files) < k:
            writer, current = current or _FileWriter(req, len(files), row), None
            files.append(writer.close(row, weight))
            write_json_atomic(req.output / MANIFEST, _manifest(req, src, arguments, measured, files, False))

    try:
        with _progress(measured["rows"], "export", progress) as bar:
            bar.update(start_row)
            for batch in src.batches(columns, start=start_row):
                w = _weights(batch.column(req.text_field))
                cum = weight + np.cumsum(w) - w
                target = np.minimum(n - 1, np.floor((cum + w / 2) * n / total)).astype(np.int64)
                texts = batch.column(req.text_field).to_pylist()
                ids = batch.column(req.id_field).to_pylist() if req.id_field else None
                # target is non-decreasing: write it as runs of rows that go to the same file
                edges = np.flatnonzero(np.diff(target)) + 1
                for lo, hi in zip(np.concatenate(([0], edges)), np.concatenate((edges, [len(target)]))):
                    k = int(target[lo])
                    finish_through(k)
                    if current is None:
                        current = _FileWriter(req, k, row)
                    current.write(texts[lo:hi], ids[lo:hi] if ids is not None else None)
                    row += int(hi - lo)
                    weight += int(w[lo:hi].sum())
                bar.update(batch.num_rows)
        if row != measured["rows"]:
            raise InputDataError(f"{src.description} changed during the export: measured {measured['rows']} rows, "
                                 f"read {row}", hint=f"delete {req.output} and export again")
        finish_through(n)
    except BaseException:
        if current is not None:
            current.abort()
        raise
    return files


def summary_line(result: ExportResult) -> str:
    skipped = ", ".join(f"{v:,} {k}" for k, v in result.skipped.items() if v) or "none"
    return (f"exported {result.rows:,} rows: {result.documents:,} documents in {len(result.files)} file(s), "
            f"{result.bytes:,} bytes ({result.written_now} written now); skipped: {skipped} -> {result.output}")


def balance_ratio(result: ExportResult) -> float:
    """Largest file / mean file size (1.0 is perfect), for the summary and the tests."""
    sizes = [f.bytes for f in result.files]
    mean = sum(sizes) / len(sizes) if sizes else 0
    return max(sizes) / mean if mean else math.nan
