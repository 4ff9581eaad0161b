"""A block of whole lines -> documents, with no Python per document, when the block is clean.

Why: the per-line policy (``inputs.readers``) costs a few Python frames per line, more than the encoder
spends on the line (issue 20).  Here a block is checked and cut with C and numpy passes, and its
documents go to the encoder as one buffer (txt) or one list built in C (jsonl, by ``msgspec``).

The rule that keeps the two paths identical: a function here either returns exactly what the per-line
policy would make of the block (documents, skips with their lines and bytes, the line count), or None,
and then the caller runs the per-line policy on that block.  None is returned for anything unusual: an
unterminated last line, a line over the limit, invalid UTF-8, a malformed or non-object JSON line, a text
field that is not a string, ``--strict`` with any skip (the per-line path raises with the exact line).
What the fast path does handle itself is what real corpora are full of: empty and whitespace-only lines,
CRLF line ends, documents with a missing or empty text field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, Callable, cast

import numpy as np

from shardprep.inputs.readers import NO_LINE, Placed, SkipLog
from shardprep.shard.origins import DocOrigins

# Python's str.isspace() characters: what an "empty" document is made of (tests keep this list equal to
# the running Python's).  Their UTF-8 lead bytes mark the lines worth a closer look.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
              "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_LINE = re.compile(b"(?:" + b"|".join(re.escape(c.encode("utf-8")) for c in WHITESPACE if c != "\n") + b")*")
_TXT_LEAD = np.zeros(256, dtype=bool)
_TXT_LEAD[[c.encode("utf-8")[0] for c in WHITESPACE]] = True      # "\n" included: an empty line starts with it
_JSON_LEAD = np.zeros(256, dtype=bool)
_JSON_LEAD[list(b" \t\n\r\x0b\x0c")] = True                       # bytes.isspace(): a blank jsonl line
_CR_BEFORE_NL = re.compile(rb"\r+\n")


@dataclass
class DocBatch:
    """The documents of one encode call: ``strs``, or ``buffer`` holding each document followed by ``sep``
    (UTF-8, no empty document, ``sep`` never inside one); where each came from: ``offsets`` (its record's
    byte offset in the decompressed input, or its row), ``lines`` (1-based, -1 where not counted) and the
    plan's ``input`` number (set by the reader of the work item, ``inputs.batches``)."""

    docs: int
    strs: list[str] | None = None
    buffer: bytes | None = None
    sep: bytes = b"\n"
    offsets: np.ndarray | None = None
    lines: np.ndarray | None = None
    input: int = -1

    @classmethod
    def placed(cls, docs: list[Placed]) -> "DocBatch":
        """A batch of ``(offset, line, text)`` documents."""
        return cls(len(docs), strs=[t for _, _, t in docs], offsets=np.fromiter((o for o, _, _ in docs), np.int64, len(docs)),
                   lines=np.fromiter((ln for _, ln, _ in docs), np.int64, len(docs)))

    def origins(self) -> DocOrigins | None:
        """The batch's documents' origins (None when the reader did not place them or the input is unknown)."""
        if self.offsets is None or self.lines is None or self.input < 0:
            return None
        return DocOrigins.of(self.input, self.offsets, self.lines)

    def texts(self) -> list[str]:
        if self.strs is not None:
            return self.strs
        assert self.buffer is not None
        return [piece.decode("utf-8") for piece in self.buffer.split(self.sep)[:-1]]

    def head(self, n: int) -> list[str]:
        """The first ``n`` documents (without decoding the whole buffer)."""
        if self.strs is not None or self.buffer is None:
            return self.texts()[:n]
        out: list[str] = []
        pos = 0
        while len(out) < min(n, self.docs):
            end = self.buffer.index(self.sep, pos)
            out.append(self.buffer[pos:end].decode("utf-8"))
            pos = end + len(self.sep)
        return out

    def head_chars(self, limit: int) -> list[str]:
        """The documents in about the first ``limit`` bytes (at least one)."""
        return self.head_batch(limit).texts()

    def head_batch(self, limit: int) -> "DocBatch":
        """:meth:`head_chars` as a batch of its own, not decoded yet (a buffer's head is a copy of at most
        about ``limit`` bytes)."""
        if self.strs is not None or self.buffer is None:
            texts = self.texts()
            total, n = 0, 0
            while n < len(texts) and (n == 0 or total + len(texts[n]) <= limit):
                total += len(texts[n])
                n += 1
            return DocBatch(n, strs=texts[:n])
        cut = self.buffer.rfind(self.sep, 0, limit) + len(self.sep)
        if cut < len(self.sep):
            cut = self.buffer.index(self.sep) + len(self.sep)
        head = self.buffer[:cut]
        return DocBatch(head.count(self.sep), buffer=head, sep=self.sep)

    def last(self) -> str:
        if self.strs is not None or self.buffer is None:
            return self.texts()[-1]
        start = self.buffer.rfind(self.sep, 0, len(self.buffer) - len(self.sep)) + len(self.sep)
        return self.buffer[start:-len(self.sep)].decode("utf-8")


@dataclass(frozen=True)
class Lines:
    """Where the lines of a block are: ``starts[i]`` and ``ends[i]`` (its newline) as offsets into it."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, a: np.ndarray) -> "Lines":
        ends = np.flatnonzero(a == 10)
        starts = np.empty_like(ends)
        starts[:1] = 0
        starts[1:] = ends[:-1] + 1
        return cls(starts, ends)

    def __len__(self) -> int:
        return len(self.ends)

    def longest(self) -> int:
        return int((self.ends - self.starts).max()) if len(self) else 0

    def matching(self, data: bytes, a: np.ndarray, lead: np.ndarray, test: Callable[[int, int], bool]) -> list[int]:
        """Indexes of the lines whose first byte is in ``lead`` and for which ``test(start, end)`` holds."""
        candidates = np.flatnonzero(lead[a[self.starts]])
        return [int(i) for i in candidates if test(int(self.starts[i]), int(self.ends[i]))]

    def without(self, data: bytes, drop: list[int]) -> bytes:
        """``data`` without the lines ``drop`` (sorted)."""
        if not drop:
            return data
        keep, pos = [], 0
        for i in drop:
            keep.append(data[pos:int(self.starts[i])])
            pos = int(self.ends[i]) + 1
        keep.append(data[pos:])
        return b"".join(keep)


def valid_utf8(data: bytes, a: np.ndarray) -> bool:
    """Whether ``data`` is valid UTF-8, decoding only its non-ASCII runs when they are few.

    An ASCII byte is never inside a multi-byte sequence, so the whole is valid exactly when every maximal
    run of bytes >= 0x80 is; the runs are joined with spaces and decoded at once.
    """
    if data.isascii():
        return True
    high = np.flatnonzero(a >= 0x80)
    try:
        if 4 * high.size > a.size:
            data.decode("utf-8")
        else:
            runs = a[high]
            breaks = np.flatnonzero(np.diff(high) != 1) + 1
            np.insert(runs, breaks, 0x20).tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _usable(data: bytes, limit: int) -> tuple[np.ndarray, Lines] | None:
    """(bytes as an array, lines) of a block the fast path can take: valid UTF-8, no line over ``limit``."""
    a = np.frombuffer(data, dtype=np.uint8)
    lines = Lines.of(a)
    if len(data) > limit and lines.longest() > limit:
        return None
    return (a, lines) if valid_utf8(data, a) else None


def _locator(lines: Lines, drop: list[int], lineno: int | None, start: int) -> Callable[[int], tuple[int | None, int]]:
    return lambda k: (None if lineno is None else lineno + drop[k], start + int(lines.starts[drop[k]]))


def txt_block(data: bytes, start: int, lineno: int | None, limit: int, path: str,
              skips: SkipLog) -> tuple[DocBatch, int] | None:
    """(documents, lines) of a terminated block in ``--txt-mode line``, or None for the per-line path.

    Empty and whitespace-only lines are skipped as ``empty``; trailing CRs go; each remaining line is one
    document, handed on as the block itself with those lines removed.
    """
    usable = _usable(data, limit)
    if usable is None:
        return None
    a, lines = usable
    empty = lines.matching(data, a, _TXT_LEAD, lambda s, e: _WS_LINE.fullmatch(data, s, e) is not None)
    if empty and skips.strict:
        return None
    buffer = lines.without(data, empty)
    if b"\r" in buffer:
        buffer = _CR_BEFORE_NL.sub(b"\n", buffer)
    skips.skip_lines("empty", path, len(empty), _locator(lines, empty, lineno, start))
    kept = np.delete(np.arange(len(lines)), empty) if empty else np.arange(len(lines))
    offsets, numbers = _places(lines, kept, start, lineno)
    return DocBatch(len(kept), buffer=buffer, offsets=offsets, lines=numbers), len(lines)


def _places(lines: Lines, kept: np.ndarray, start: int, lineno: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lines) of a block's documents, the lines ``kept`` (indexes into ``lines``)."""
    numbers = np.full(len(kept), NO_LINE, dtype=np.int64) if lineno is None else kept.astype(np.int64) + lineno
    return lines.starts[kept].astype(np.int64) + start, numbers


def _maybe_out_of_range_number(a: np.ndarray) -> bool:
    """Could the block hold a JSON number beyond a double's range (orjson refuses the line, msgspec skips
    over it unchecked)?  Such a number has an exponent of three digits or more after ``e``/``E``/``+``, or
    200 digits or more; this finds a superset (the per-line path then decides).  Works on the positions
    of the digits only: a few percent of a text block."""
    digits = np.flatnonzero((a - np.uint8(48)) < 10)
    if digits.size < 3:
        return False
    breaks = np.flatnonzero(np.diff(digits) != 1) + 1
    run_starts = digits[np.concatenate(([0], breaks))]
    run_lengths = np.diff(np.concatenate(([0], breaks, [digits.size])))
    if run_lengths.max() >= 200:
        return True
    long_runs = run_starts[(run_lengths >= 3) & (run_starts > 0)]
    before = a[long_runs - 1]
    return bool(((before | np.uint8(0x20)) == ord("e")).any() or (before == ord("+")).any())


_FIRST, _TEXT = itemgetter(0), attrgetter("text")


@lru_cache(maxsize=8)
def _row_decoder(key: str, wrapped: bool) -> Any:
    """A msgspec decoder of ``{key: str-or-null, ...}`` lines (``[{...}]`` when ``wrapped``): the text
    field only, the rest skipped."""
    import msgspec

    row = msgspec.defstruct("Row", [("text", str | None, None)], rename={"text": key})
    return msgspec.json.Decoder(tuple[row] if wrapped else row)  # type: ignore[valid-type]  # made at run time


def _braced(a: np.ndarray, lines: Lines, blank: list[int]) -> bool:
    """Whether every line not in ``blank`` starts with ``{`` and ends with ``}`` (a CR before its newline
    allowed)."""
    keep = np.ones(len(lines), dtype=bool)
    keep[blank] = False
    first, last = lines.starts[keep], lines.ends[keep] - 1
    last = last - (a[last] == 13)
    return bool((a[first] == 123).all() and (a[last] == 125).all())


def _decode_rows(body: bytes, n: int, key: str, braced: bool) -> list[str | None] | None:
    """The text field of each of the ``n`` lines of ``body`` (no blank line in it), or None when any line
    is not exactly one JSON object with a string or null (or no) text field.

    A line must not be read as the end of one object and the start of the next.  When every line is
    ``braced`` (starts with ``{``, ends with ``}``) that cannot happen: JSON strings hold no raw newline
    (msgspec refuses one), so a line's last ``}`` is structural, and after a structural ``}`` a ``{`` can
    only open a new top-level value; every line then holds whole values, and ``n`` values from ``n`` lines
    is one each.  Otherwise each line is wrapped as ``[line]``: between two lines then stands ``]\\n[``,
    valid only between two top-level values, so a line that does not close (or closes early) fails to
    parse or shows in the count instead of shifting every later document by one (slower: ~15 against
    ~9 ms per 8 MiB).
    """
    import msgspec

    if n == 0:
        return []
    source = body if braced else b"".join((b"[", body[:-1].replace(b"\n", b"]\n["), b"]"))
    try:
        rows = _row_decoder(key, not braced).decode_lines(source)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    finally:
        del source            # a block's worth of memory when wrapped: gone before the documents are built
    if len(rows) != n:
        return None
    return list(map(_TEXT, rows)) if braced else list(map(_TEXT, map(_FIRST, rows)))


def jsonl_block(data: bytes, start: int, lineno: int | None, limit: int, key: str, path: str,
                skips: SkipLog) -> tuple[DocBatch, int] | None:
    """(documents, lines) of a terminated jsonl block, or None for the per-line path."""
    usable = _usable(data, limit)
    if usable is None or _maybe_out_of_range_number(usable[0]):
        return None
    a, lines = usable
    blank = lines.matching(data, a, _JSON_LEAD, lambda s, e: s == e or data[s:e].isspace())
    rows = _decode_rows(lines.without(data, blank), len(lines) - len(blank), key, _braced(a, lines, blank))
    if rows is None:
        return None
    # (``None in rows`` first: str.isspace cannot take None)
    bad = None in rows or "" in rows or any(map(str.isspace, cast("list[str]", rows)))
    if (blank or bad) and skips.strict:
        return None
    if bad or blank:
        texts, kept = _record_jsonl_skips(rows, blank, lines, key, _At(path, start, lineno), skips)
    else:
        texts, kept = cast("list[str]", rows), np.arange(len(lines))
    offsets, numbers = _places(lines, kept, start, lineno)
    return DocBatch(len(texts), strs=texts, offsets=offsets, lines=numbers), len(lines)


@dataclass(frozen=True)
class _At:
    """Where a block lies in its input, for its skips' locations: the file, its first byte and line."""

    path: str
    start: int
    lineno: int | None


def _record_jsonl_skips(texts: list[str | None], blank: list[int], lines: Lines, key: str, at: _At,
                        skips: SkipLog) -> tuple[list[str], np.ndarray]:
    """Record the block's skips in line order; return the documents kept and their lines (indexes into
    ``lines``: where each kept document's record is)."""
    kept: list[str] = []
    kept_lines: list[int] = []
    events: list[tuple[int, str, str]] = [(i, "empty", "blank line") for i in blank]
    line_of_row = np.delete(np.arange(len(lines)), blank) if blank else None
    for r, text in enumerate(texts):
        line = int(line_of_row[r]) if line_of_row is not None else r
        if text is None or not text or text.isspace():
            events.append((line, "missing_field", f"field {key!r} missing") if text is None else (line, "empty", ""))
        else:
            kept.append(text)
            kept_lines.append(line)
    for line, reason, detail in sorted(events):
        skips.skip(reason, at.path, None if at.lineno is None else at.lineno + line, detail,
                   byte=at.start + int(lines.starts[line]))
    return kept, np.array(kept_lines, dtype=np.int64)
