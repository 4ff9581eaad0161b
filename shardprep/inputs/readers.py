"""Stream documents out of one work item (a byte range of a text file, a whole compressed file, or a
row range of a parquet or Arrow file), applying the documented bad-input policy.

Policy (docs/architecture.md, "Bad input"): invalid UTF-8, empty documents, malformed JSON lines, a
missing text field and lines longer than ``max_doc_bytes`` are each counted and skipped, with the file
and line of the first few kept for the shard's sidecar; ``strict`` turns the first one into an error.
An unreadable file or a missing parquet column is always an error.  Memory stays bounded: lines are
read with a length limit, so one absurd line never lands in memory whole.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any, Iterable, Iterator, Protocol

import orjson

from shardprep.errors import InputDataError
from shardprep.inputs import health
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import PlannedSize, check_unchanged, rows_then_check

log = logging.getLogger(__name__)

# What a corrupt compressed stream raises: gzip (OSError/BadGzipFile, EOFError, zlib.error) and zstandard
# (ZstdError, a subclass of Exception only).
_STREAM_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError, zlib.error)
try:
    import zstandard as _zstd

    _STREAM_ERRORS += (_zstd.ZstdError,)
except ImportError:  # pragma: no cover - zstandard is a dependency
    pass

SKIP_REASONS = ("invalid_utf8", "empty", "malformed_json", "missing_field", "too_long")
MAX_EXAMPLES = 10
_READ_BLOCK = 1 << 20


class ReadOptions(Protocol):
    """What reading needs of the job's options (``job.options.TokenizeOptions`` is one): which field or
    column holds the text, how a txt file splits into documents, and the longest document kept."""

    @property
    def text_field(self) -> str: ...

    @property
    def txt_mode(self) -> str: ...

    @property
    def max_doc_bytes(self) -> int: ...


@dataclass(frozen=True)
class WorkItem:
    """A piece of one input: ``[start, end)`` in bytes (text) or rows (parquet); ``end`` None = to EOF.

    ``first_line`` is the line number at ``start`` when known (always for start 0).  The planner does not
    read whole files to count lines, so a range deep inside a split file reports byte offsets instead.
    """

    input: int
    start: int = 0
    end: int | None = None
    unit: str = "bytes"
    first_line: int | None = 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "WorkItem":
        return cls(**d)


@dataclass
class SkipLog:
    """Counts skipped documents per reason and remembers where the first few were."""

    strict: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    examples: list[dict] = field(default_factory=list)
    nul_bytes: int = 0                                     # in the raw text read (see inputs.health)
    warnings: list[str] = field(default_factory=list)      # inputs that look binary or mis-encoded

    def skip(self, reason: str, path: str, line: int | None, detail: str = "", *, byte: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else f"{path} (line at byte {byte})"
        if self.strict:
            raise InputDataError(f"{where}: {reason.replace('_', ' ')}{': ' + detail if detail else ''} (--strict)")
        self.counts[reason] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"reason": reason, "file": path, "line": line, "byte": byte,
                                  "detail": detail[:200]})

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _CorruptStream(Exception):
    """Reading the (decompressed) stream failed at byte ``at``; ``_lines`` decides what to report."""

    def __init__(self, at: int, cause: BaseException):
        super().__init__(at, cause)
        self.at, self.cause = at, cause


def _open_binary(inp: InputFile) -> tuple[int, IO[bytes]]:
    """(descriptor to ``fstat`` after reading, decompressed stream); compressed files end at the planned size."""
    try:
        raw = open(inp.path, "rb", buffering=0)
    except OSError as e:
        raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None
    if inp.compression is None:
        return raw.fileno(), io.BufferedReader(raw, buffer_size=_READ_BLOCK)
    planned = PlannedSize(raw, inp.size)
    if inp.compression == "gz":
        stream = gzip.GzipFile(fileobj=io.BufferedReader(planned, buffer_size=_READ_BLOCK))
        return raw.fileno(), io.BufferedReader(stream, buffer_size=_READ_BLOCK)
    import zstandard

    # zstandard's stub asks for IO[bytes]; the reader needs only read(), which a RawIOBase has
    reader = zstandard.ZstdDecompressor().stream_reader(planned, closefd=True)  # type: ignore[arg-type]
    return raw.fileno(), io.BufferedReader(reader, buffer_size=_READ_BLOCK)


def _lines(inp: InputFile, item: WorkItem, limit: int, skips: SkipLog) -> Iterator[tuple[int | None, int, bytes]]:
    """(line number, byte offset, raw line without terminator) for every line starting inside the item's range.

    Reads no further than planned (a whole uncompressed file ends at its planned size, a compressed one's
    raw bytes too) and, once the range is read, fails if the file changed meanwhile (``fstat``): an input
    appended or truncated while its task runs must not end up in a shard.
    """
    fd, f = _open_binary(inp)
    try:
        if item.start:
            f.seek(item.start)
        end = item.end if item.end is not None or inp.compression else inp.size
        try:
            yield from _scan_lines(f, inp.path, item.start, end, item.first_line, limit, skips)
        except _CorruptStream as e:  # a corrupt gzip/zstd stream, or one cut short by a truncation
            check_unchanged(inp, os.fstat(fd))
            raise InputDataError(f"{inp.path}: cannot read input near byte {e.at}: {e.cause}") from None
        check_unchanged(inp, os.fstat(fd))
    finally:
        f.close()


def _scan_lines(f: IO[bytes], path: str, start: int, end: int | None, lineno: int | None, limit: int,
                skips: SkipLog) -> Iterator[tuple[int | None, int, bytes]]:
    """The line splitter behind ``_lines``: lines starting in ``[start, end)`` of ``f`` (positioned at start).

    Byte offsets are decompressed offsets for .gz/.zst; the line number is None when unknown.  Reads
    1 MiB blocks and splits them in C rather than calling ``readline`` per line (3-5x less Python work
    on short lines).  A line longer than ``limit`` is counted as ``too_long`` and never held whole: once
    its start exceeds the limit, the rest is only counted until its newline.
    """
    pos = start
    carried: list[bytes] = []   # start of a line that continues in the next block
    carried_len = 0
    discarding = False          # the carried line is already known to be too long
    while end is None or pos < end:  # pos: where the current (possibly carried) line starts
        try:
            block = f.read(_READ_BLOCK)
        except _STREAM_ERRORS as e:
            raise _CorruptStream(pos + carried_len, e) from None
        if not block:
            break
        skips.nul_bytes += block.count(b"\0")
        pieces = block.split(b"\n")
        rest = pieces.pop()     # after the block's last newline: an unfinished line (or b"")
        for piece in pieces:
            if end is not None and pos >= end:
                return
            if carried or discarding:  # this piece finishes the line carried over
                n = carried_len + len(piece)
                piece = b"" if discarding else b"".join(carried) + piece
                carried, carried_len = [], 0
            else:
                n = len(piece)
            if n > limit:
                discarding = False
                skips.skip("too_long", path, lineno, f"longer than {limit} bytes", byte=pos)
            else:
                yield lineno, pos, piece.rstrip(b"\r")
            pos += n + 1
            if lineno is not None:
                lineno += 1
        if rest:
            carried_len += len(rest)
            if not discarding:
                carried.append(rest)
                if carried_len > limit:
                    discarding, carried = True, []
    # a last line without a newline keeps any trailing CR (as it was read)
    if (carried or discarding) and (end is None or pos < end):
        if discarding or carried_len > limit:
            skips.skip("too_long", path, lineno, f"longer than {limit} bytes", byte=pos)
        else:
            yield lineno, pos, b"".join(carried)


def _decode(raw: bytes, inp: InputFile, line: int | None, byte: int, skips: SkipLog) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        skips.skip("invalid_utf8", inp.path, line, f"at byte {e.start} of the line", byte=byte)
        return None


def _txt_lines(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    for line, byte, raw in _lines(inp, item, opts.max_doc_bytes, skips):
        text = _decode(raw, inp, line, byte, skips)
        if text is None:
            continue
        if not text or text.isspace():  # same test as `not text.strip()`, without copying the line
            skips.skip("empty", inp.path, line, byte=byte)
            continue
        yield text


def _txt_paragraphs(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    """Blank-line separated documents; a document keeps its inner newlines.

    A paragraph with one bad line (invalid UTF-8) or over ``max_doc_bytes`` in total is skipped whole:
    half a document is worse than none.
    """
    parts: list[str] = []
    in_doc, bad, size = False, False, 0
    for line, byte, raw in _lines(inp, item, opts.max_doc_bytes, skips):
        if not raw or raw.isspace():
            if in_doc and not bad:
                yield "\n".join(parts)
            parts, in_doc, bad, size = [], False, False, 0
            continue
        if not in_doc:
            in_doc, start_line, start_byte = True, line, byte
        if bad:
            continue
        size += len(raw) + 1
        if size > opts.max_doc_bytes:
            skips.skip("too_long", inp.path, start_line, f"paragraph longer than {opts.max_doc_bytes} bytes",
                       byte=start_byte)
            bad, parts = True, []
            continue
        text = _decode(raw, inp, line, byte, skips)
        if text is None:
            bad, parts = True, []
            continue
        parts.append(text)
    if in_doc and not bad:
        yield "\n".join(parts)


def _jsonl(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    key = opts.text_field
    path = inp.path
    loads = orjson.loads
    for line, byte, raw in _lines(inp, item, opts.max_doc_bytes, skips):
        if not raw or raw.isspace():
            skips.skip("empty", path, line, "blank line", byte=byte)
            continue
        try:
            obj = loads(raw)
        except orjson.JSONDecodeError as e:
            if not _is_utf8(raw):
                skips.skip("invalid_utf8", path, line, byte=byte)
            else:
                skips.skip("malformed_json", path, line, str(e), byte=byte)
            continue
        if type(obj) is not dict:  # orjson only builds plain dicts
            skips.skip("malformed_json", path, line, f"expected a JSON object, got {type(obj).__name__}", byte=byte)
            continue
        text = obj.get(key)
        if type(text) is not str:
            what = "missing" if text is None else f"not a string ({type(text).__name__})"
            skips.skip("missing_field", path, line, f"field {key!r} {what}", byte=byte)
            continue
        if not text or text.isspace():
            skips.skip("empty", path, line, byte=byte)
            continue
        yield text


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _parquet(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(inp.path)
    except Exception as e:
        raise InputDataError(f"input {inp.path} is not a readable parquet file: {e}") from None
    names = pf.schema_arrow.names
    if opts.text_field not in names:
        raise InputDataError(f"{inp.path}: no column {opts.text_field!r} (columns: {', '.join(names)}); "
                             f"choose one with --text-field")
    end = item.end if item.end is not None else pf.metadata.num_rows
    row = 0
    for rg in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(rg).num_rows
        if row + n <= item.start:
            row += n
            continue
        if row >= end:
            break
        values = pf.read_row_group(rg, columns=[opts.text_field]).column(0).to_pylist()
        yield from _row_texts(inp.path, ((row + i, t) for i, t in enumerate(values) if item.start <= row + i < end),
                              opts, skips)
        row += n


def _row_texts(path: str, rows: Iterable[tuple[int, Any]], opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    """The skip policy for tabular inputs: (0-based row, value) in, usable texts out.

    Skips report ``line`` as the 1-based row number.
    """
    for r, text in rows:
        if not isinstance(text, str) or not text.strip():
            skips.skip("empty" if text is None or isinstance(text, str) else "missing_field",
                       path, r + 1, "row")
            continue
        if len(text) > opts.max_doc_bytes:  # chars <= bytes; cheap pre-check
            if len(text.encode("utf-8")) > opts.max_doc_bytes:
                skips.skip("too_long", path, r + 1, f"longer than {opts.max_doc_bytes} bytes")
                continue
        yield text


def _arrow(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    from shardprep.inputs.arrow import iter_column

    return _row_texts(inp.path, iter_column(inp.path, opts.text_field, item.start, item.end), opts, skips)


def iter_documents(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    """Documents of one work item, in file order; skips are recorded in ``skips``.

    Exactly the planned bytes or rows are read; an input that changed while it was read raises
    InputDataError once its item is exhausted (before the task can finish its shard).
    """
    if inp.tabular:
        if item.end is None and inp.rows is not None:
            item = replace(item, end=inp.rows)
        read = _parquet if inp.format == "parquet" else _arrow
        docs = rows_then_check(inp, read(inp, item, opts, skips))
    else:
        read = _jsonl if inp.format == "jsonl" else _txt_paragraphs if opts.txt_mode == "paragraph" else _txt_lines
        docs = read(inp, item, opts, skips)
    return health.watch(inp, item, docs, skips)
