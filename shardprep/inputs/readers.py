"""Documents out of one work item (a byte range of a text file, a whole compressed file, or a row range of a
parquet or Arrow file), with the documented bad-input policy; and that policy's per-line form.

Policy (docs/architecture.md, "Bad input"): invalid UTF-8, empty documents, malformed JSON lines, a
missing text field and lines longer than ``max_doc_bytes`` are each counted and skipped, with the file
and line of the first few kept for the shard's sidecar; ``strict`` turns the first one into an error.
An unreadable file or a missing parquet column is always an error.

The task reads in blocks (``inputs.batches``: whole blocks validated and cut in C, no Python per
document); the per-line functions here are the policy's definition and the fallback for any block that
is not clean (invalid UTF-8, over-long lines, malformed JSON...), so every counter, example and line
number is the same whichever path read a line.  ``iter_documents`` is the same reading as one document
at a time, for the few readers that want that (``doctor``, the plan-time shard-ratio sample).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

import orjson

from shardprep.errors import InputDataError
from shardprep.inputs.discover import InputFile
from shardprep.records import Record
from shardprep.shard.provenance import SkipExample

log = logging.getLogger(__name__)

SKIP_REASONS = ("invalid_utf8", "empty", "malformed_json", "missing_field", "too_long")
MAX_EXAMPLES = 10
NO_LINE = -1        # a document's line where lines are not counted (a range deep inside a split file, a row)
Placed = tuple[int, int, str]     # a document with its origin in its input: (byte offset or row, line, text)


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
class WorkItem(Record):
    """A piece of one input: ``[start, end)`` in bytes (text) or rows (parquet); ``end`` None = to EOF.

    ``first_line`` is the line number at ``start`` when known (always for start 0).  The planner does not
    read whole files to count lines, so a range deep inside a split file reports byte offsets instead.
    """

    input: int
    start: int = 0
    end: int | None = None
    unit: str = "bytes"
    first_line: int | None = 1

    @classmethod
    def from_dict(cls, d: dict) -> "WorkItem":
        return cls(**d)


@dataclass
class SkipLog:
    """Counts skipped documents per reason and remembers where the first few were."""

    strict: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    examples: list[SkipExample] = field(default_factory=list)
    nul_bytes: int = 0                                     # in the raw text read (see inputs.health)
    warnings: list[str] = field(default_factory=list)      # inputs that look binary or mis-encoded

    def skip(self, reason: str, path: str, line: int | None, detail: str = "", *, byte: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else f"{path} (line at byte {byte})"
        if self.strict:
            raise InputDataError(f"{where}: {reason.replace('_', ' ')}{': ' + detail if detail else ''} (--strict)")
        self.counts[reason] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(SkipExample(reason, path, line, byte, detail[:200]))

    def skip_lines(self, reason: str, path: str, n: int, locate: Callable[[int], tuple[int | None, int | None]],
                   detail: str = "") -> None:
        """``skip`` for ``n`` lines at once, in file order: ``locate(k)`` gives the (line, byte) of the k-th,
        asked only for the ones kept as examples (the fast path spares locating every empty line)."""
        if n <= 0:
            return
        if self.strict:
            line, byte = locate(0)
            self.skip(reason, path, line, detail, byte=byte)
        self.counts[reason] += n
        for k in range(min(n, MAX_EXAMPLES - len(self.examples))):
            line, byte = locate(k)
            self.examples.append(SkipExample(reason, path, line, byte, detail[:200]))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def block_lines(data: bytes, start: int, lineno: int | None, limit: int, terminated: bool, path: str,
                skips: SkipLog) -> Iterator[tuple[int | None, int, bytes]]:
    """(line number, byte offset, line) for every line of one block (``inputs.blocks.TextBlock``): the
    newline removed and trailing CRs stripped (a last line without a newline keeps them, as it was read);
    a line longer than ``limit`` is counted as ``too_long`` instead.  Byte offsets are decompressed offsets
    for .gz/.zst; the line number is None when unknown (a range deep inside a split file)."""
    pieces = data.split(b"\n")
    if terminated:
        pieces.pop()            # after the last newline
    last = len(pieces) - 1
    pos = start
    for i, piece in enumerate(pieces):
        n = len(piece)
        if n > limit:
            skips.skip("too_long", path, lineno, f"longer than {limit} bytes", byte=pos)
        else:
            yield lineno, pos, piece.rstrip(b"\r") if terminated or i < last else piece
        pos += n + 1
        if lineno is not None:
            lineno += 1


Lines = Iterable[tuple[int | None, int, bytes]]


def _decode(raw: bytes, path: str, line: int | None, byte: int, skips: SkipLog) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        skips.skip("invalid_utf8", path, line, f"at byte {e.start} of the line", byte=byte)
        return None


def _line_of(line: int | None) -> int:
    return NO_LINE if line is None else line


def txt_line_docs(lines: Lines, path: str, skips: SkipLog) -> Iterator[Placed]:
    """One document per line (``--txt-mode line``), with its byte offset and line."""
    for line, byte, raw in lines:
        text = _decode(raw, path, line, byte, skips)
        if text is None:
            continue
        if not text or text.isspace():  # same test as `not text.strip()`, without copying the line
            skips.skip("empty", path, line, byte=byte)
            continue
        yield byte, _line_of(line), text


def paragraph_docs(lines: Lines, path: str, limit: int, skips: SkipLog) -> Iterator[Placed]:
    """Blank-line separated documents (``--txt-mode paragraph``), placed at their first line; a document keeps
    its inner newlines.

    A paragraph with one bad line (invalid UTF-8) or over ``limit`` bytes in total is skipped whole:
    half a document is worse than none.
    """
    parts: list[str] = []
    in_doc, bad, size = False, False, 0
    start_line: int | None = None
    start_byte = 0
    for line, byte, raw in lines:
        if not raw or raw.isspace():
            if in_doc and not bad:
                yield start_byte, _line_of(start_line), "\n".join(parts)
            parts, in_doc, bad, size = [], False, False, 0
            continue
        if not in_doc:
            in_doc, start_line, start_byte = True, line, byte
        if bad:
            continue
        size += len(raw) + 1
        if size > limit:
            skips.skip("too_long", path, start_line, f"paragraph longer than {limit} bytes", byte=start_byte)
            bad, parts = True, []
            continue
        text = _decode(raw, path, line, byte, skips)
        if text is None:
            bad, parts = True, []
            continue
        parts.append(text)
    if in_doc and not bad:
        yield start_byte, _line_of(start_line), "\n".join(parts)


def jsonl_object(raw: bytes, path: str, line: int | None, byte: int, skips: SkipLog) -> dict[str, Any] | None:
    """One jsonl line as its object, or None once the reason it is not one is counted (a blank line, invalid
    UTF-8, malformed JSON, a value that is not an object): the policy for every reader of jsonl records."""
    if not raw or raw.isspace():
        skips.skip("empty", path, line, "blank line", byte=byte)
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        obj, detail = beyond_double(raw, str(e))
        if obj is None:
            if not _is_utf8(raw):
                skips.skip("invalid_utf8", path, line, byte=byte)
            else:
                skips.skip("malformed_json", path, line, detail, byte=byte)
            return None
    if type(obj) is not dict:  # orjson only builds plain dicts
        skips.skip("malformed_json", path, line, f"expected a JSON object, got {type(obj).__name__}", byte=byte)
        return None
    return obj


def jsonl_docs(lines: Lines, path: str, key: str, skips: SkipLog) -> Iterator[Placed]:
    """One JSON object per line; the document is its string field ``key`` (with the line's offset and line)."""
    for line, byte, raw in lines:
        obj = jsonl_object(raw, path, line, byte, skips)
        if obj is None:
            continue
        text = obj.get(key)
        if type(text) is not str:
            what = "missing" if text is None else f"not a string ({type(text).__name__})"
            skips.skip("missing_field", path, line, f"field {key!r} {what}", byte=byte)
            continue
        if not text or text.isspace():
            skips.skip("empty", path, line, byte=byte)
            continue
        yield byte, _line_of(line), text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def beyond_double(raw: bytes, error: str) -> tuple[Any, str]:
    """(the object, "") of a line orjson refused only for a number beyond a double's range (``1e400``);
    (None, why the line is malformed) for any other refusal.

    Why: such a number in another field (an id, a score) used to drop the whole document as malformed
    although its text is fine.  Python's parser takes the number (its value is not needed: any number
    becomes 0, keeping its type for the ``missing_field`` detail when it is the text field); what it
    accepts and orjson does not (NaN/Infinity, lone surrogates) is refused here as orjson would.  The
    fast path sends every block that might hold such a number here (``inputs.fastpath``), so both paths
    agree."""
    if "infinity" not in error and "out of range" not in error:
        return None, error
    try:
        obj = json.loads(raw.decode("utf-8"), parse_int=lambda _: 0, parse_float=lambda _: 0.0,
                         parse_constant=_no_constant)
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None, "lone surrogate in a string"
    except (ValueError, RecursionError) as e:      # (a UnicodeDecodeError: _is_utf8 reports it)
        return None, str(e)
    return obj, ""


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def row_texts(path: str, rows: Iterable[tuple[int, Any]], limit: int, skips: SkipLog) -> Iterator[Placed]:
    """The skip policy for tabular inputs: (0-based row, value) in, usable ``(row, -1, text)`` out.

    Skips report ``line`` as the 1-based row number.
    """
    for r, text in rows:
        if not isinstance(text, str) or not text.strip():
            skips.skip("empty" if text is None or isinstance(text, str) else "missing_field",
                       path, r + 1, "row")
            continue
        if len(text) > limit:  # chars <= bytes; cheap pre-check
            if len(text.encode("utf-8")) > limit:
                skips.skip("too_long", path, r + 1, f"longer than {limit} bytes")
                continue
        yield r, NO_LINE, text


def iter_documents(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog) -> Iterator[str]:
    """Documents of one work item, in file order, one at a time; skips are recorded in ``skips``.

    The task's own block reading (``inputs.batches.item_batches``) as ``str`` documents: exactly the
    planned bytes or rows are read, and an input that changed while it was read raises InputDataError
    once its item is exhausted.
    """
    from shardprep.inputs.batches import item_batches

    for batch in item_batches(inp, item, opts, skips):
        yield from batch.texts()
