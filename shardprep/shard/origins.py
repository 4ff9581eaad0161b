"""Where each document of a shard came from (sidecar ``origins``, format 3): its input, byte offset or row,
and line, per document in the shard's document order.

Why in the sidecar: a loss spike at step N is traced to documents (``loader``), and from a document to the
record that made it; the plan is frozen, so this is exact without the training run.  Why packed: it must
stay under 1% of the shard's bytes even for short documents (docs/format.md, "Document origins").

The record holds runs (documents of one input whose offsets and counted lines increase) and, for every
document but the first of its run, the offset and line steps minus one.  Every column is a list of
non-negative integers in the same block code: blocks of 128 values, each stored as its minimum and the
bit width of the differences from it (frame of reference), so a column of equal steps costs two bytes a
block and ordinary record lengths about ten bits each.  Deterministic: the same documents give the same
bytes.  numpy is imported only when a record is built or decoded (``status`` never pays for it).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, NamedTuple, Sequence

from shardprep.errors import RecordError
from shardprep.records import Fields, Record

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

BLOCK = 128
NO_LINE = -1
COLUMNS = ("runs", "offset", "line")


class Origin(NamedTuple):
    """One document's place: ``input`` (index into the plan's inputs), ``offset`` (byte offset of its record in
    the decompressed input, or its row for parquet/Arrow) and ``line`` (1-based, -1 where not counted)."""

    input: int
    offset: int
    line: int


@dataclass(frozen=True, eq=False)
class DocOrigins:
    """Per document of the shard, in the shard's document (file) order: int64 columns of equal length."""

    input: "np.ndarray"    # index into the plan's inputs (``job.sources.plan_inputs``)
    offset: "np.ndarray"   # byte offset of the document's record in the decompressed input, or its row
    line: "np.ndarray"     # 1-based line, -1 where lines are not counted

    def __len__(self) -> int:
        return len(self.input)

    def __getitem__(self, doc: int) -> Origin:
        return Origin(int(self.input[doc]), int(self.offset[doc]), int(self.line[doc]))

    def __eq__(self, other: object) -> bool:
        import numpy as np

        if not isinstance(other, DocOrigins):
            return NotImplemented
        return all(np.array_equal(getattr(self, c), getattr(other, c)) for c in ("input", "offset", "line"))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, input: Any, offset: Any, line: Any) -> "DocOrigins":
        """From array-likes (``input`` may be one int for every document)."""
        import numpy as np

        off = np.asarray(offset, dtype=np.int64).reshape(-1)
        inp = np.broadcast_to(np.asarray(input, dtype=np.int64), off.shape).copy()
        return cls(inp, off, np.broadcast_to(np.asarray(line, dtype=np.int64), off.shape).copy())

    @classmethod
    def empty(cls) -> "DocOrigins":
        return cls.of([], [], [])

    @classmethod
    def concat(cls, parts: Sequence["DocOrigins"]) -> "DocOrigins":
        import numpy as np

        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, c) for p in parts]) for c in ("input", "offset", "line")))

    def select(self, lo: int, hi: int) -> "DocOrigins":
        """Documents ``[lo, hi)``."""
        return DocOrigins(self.input[lo:hi], self.offset[lo:hi], self.line[lo:hi])


# -- the block code ----------------------------------------------------------------------------------------
def _leb128(values: "np.ndarray") -> bytes:
    """Unsigned LEB128 of each value (uint64), concatenated."""
    import numpy as np

    v = values.astype(np.uint64)
    nbytes = np.maximum(1, (_bitlen(v) + 6) // 7)
    out = np.zeros((len(v), int(nbytes.max()) if len(v) else 1), dtype=np.uint8)
    for k in range(out.shape[1]):
        more = (nbytes > k + 1).astype(np.uint8) << 7
        out[:, k] = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | more
    keep = np.arange(out.shape[1]) < nbytes[:, None]
    return out[keep].tobytes()


def _bitlen(v: "np.ndarray") -> "np.ndarray":
    """Bits needed by each uint64 value (0 for 0)."""
    import numpy as np

    n = np.zeros(len(v), dtype=np.int64)
    x = v.astype(np.uint64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = (x >> np.uint64(shift)) > 0
        n += np.where(big, shift, 0)
        x = np.where(big, x >> np.uint64(shift), x)
    return np.where(v > 0, n + 1, 0)


def _read_leb128(data: bytes, count: int, where: str) -> tuple["np.ndarray", int]:
    """The first ``count`` LEB128 values of ``data`` and the bytes they took."""
    import numpy as np

    a = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(a < 0x80)[:count]
    if len(ends) < count:
        raise ValueError(f"{where}: {count} block bases expected, {len(ends)} found")
    used = int(ends[-1]) + 1 if count else 0
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64) if count else np.zeros(0, dtype=np.int64)
    if count and int((ends - starts).max()) >= 10:
        raise ValueError(f"{where}: a block base longer than 64 bits")
    pos = np.arange(used) - np.repeat(starts, ends - starts + 1)
    parts = (a[:used] & 0x7F).astype(np.uint64) << (7 * pos).astype(np.uint64)
    return np.add.reduceat(parts, starts) if count else np.zeros(0, dtype=np.uint64), used


def pack_column(values: Any) -> str:
    """Non-negative integers -> the block code, in base85 (docs/format.md, "Document origins")."""
    import numpy as np

    v = np.asarray(values, dtype=np.int64).reshape(-1)
    if v.size and int(v.min()) < 0:
        raise ValueError("a packed column holds non-negative integers only")
    head = _leb128(np.asarray([v.size], dtype=np.uint64))
    if v.size == 0:
        return base64.b85encode(head).decode("ascii")
    u = v.astype(np.uint64)
    starts = np.arange(0, len(u), BLOCK)
    bases = np.minimum.reduceat(u, starts)
    widths = _bitlen(np.maximum.reduceat(u, starts) - bases)
    diffs = u - np.repeat(bases, np.diff(np.append(starts, len(u))))
    payload = []
    for s, w in zip(starts.tolist(), widths.tolist()):
        block = diffs[s:s + BLOCK]
        bits = ((block[:, None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
        payload.append(np.packbits(bits.reshape(-1), bitorder="little").tobytes())
    raw = head + widths.astype(np.uint8).tobytes() + _leb128(bases) + b"".join(payload)
    return base64.b85encode(raw).decode("ascii")


def unpack_column(text: str, count: int | None, where: str) -> "np.ndarray":
    """:func:`pack_column`'s values (int64), ``count`` of them (None: as many as it holds); ValueError saying
    what is wrong."""
    import numpy as np

    try:
        raw = base64.b85decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise ValueError(f"{where}: not base85") from None
    (n,), used = _read_leb128(raw, 1, where) if raw else (np.zeros(1, np.uint64), 0)
    if count is not None and int(n) != count or not raw:
        raise ValueError(f"{where}: holds {int(n) if raw else 'no'} values, {count} expected")
    count, raw = int(n), raw[used:]
    if count == 0:
        if raw:
            raise ValueError(f"{where}: holds bytes but no values")
        return np.zeros(0, dtype=np.int64)
    blocks = -(-count // BLOCK)
    if len(raw) < blocks:
        raise ValueError(f"{where}: {len(raw)} bytes, too short for {blocks} block(s)")
    widths = np.frombuffer(raw, dtype=np.uint8, count=blocks).astype(np.int64)
    if int(widths.max()) > 64:
        raise ValueError(f"{where}: a block width over 64 bits")
    bases, used = _read_leb128(raw[blocks:], blocks, where)
    sizes = np.full(blocks, BLOCK)
    sizes[-1] = count - BLOCK * (blocks - 1)
    nbytes = (sizes * widths + 7) // 8
    pos = blocks + used
    if pos + int(nbytes.sum()) != len(raw):
        raise ValueError(f"{where}: {len(raw)} bytes, expected {pos + int(nbytes.sum())} for {count} values")
    out = np.empty(count, dtype=np.uint64)
    for b in range(blocks):
        w, k = int(widths[b]), int(sizes[b])
        chunk = np.frombuffer(raw, dtype=np.uint8, count=int(nbytes[b]), offset=pos)
        pos += int(nbytes[b])
        bits = np.unpackbits(chunk, bitorder="little")[:k * w].reshape(k, w).astype(np.uint64)
        out[b * BLOCK:b * BLOCK + k] = bases[b] + (bits << np.arange(w, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
    if int(out.max()) > (1 << 63) - 1:
        raise ValueError(f"{where}: a value over 2**63 - 1")
    return out.astype(np.int64)


# -- the sidecar record ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OriginsRecord(Record):
    """Sidecar ``origins`` as stored: three packed columns (``pack_column``).

    ``runs``: four values per run (its input, its documents, its first document's offset and line, 0 when
    the run does not count lines); ``offset``: per document but a run's first, offset - previous offset - 1;
    ``line``: per document but a run's first, in runs that count lines, line - previous line - 1.  Kept
    packed when a sidecar is parsed (``Sidecar.origins`` decodes and checks it on first use)."""

    runs: str
    offset: str
    line: str

    @classmethod
    def parse(cls, f: Fields) -> "OriginsRecord":
        return cls(*(f.str(c) for c in COLUMNS))

    def decode(self, documents: int, where: str, inputs: Collection[int] | None = None) -> DocOrigins:
        """The columns, checked: ``documents`` in all, each input one of ``inputs`` (None: any), offsets and
        lines increasing within a run.  RecordError naming ``where`` and the key."""
        try:
            return _decode(self, documents, inputs)
        except ValueError as e:
            raise RecordError(f"{where}: field 'origins.{e}") from None


def _decode(rec: OriginsRecord, documents: int, inputs: Collection[int] | None) -> DocOrigins:
    import numpy as np

    runs = unpack_column(rec.runs, None, "runs'")
    if len(runs) % 4:
        raise ValueError(f"runs': {len(runs)} values, not four per run")
    run_input, counts, first_offset, first_line = runs.reshape(-1, 4).T
    if len(counts) and int(counts.min()) < 1:
        raise ValueError("runs': a run of no documents")
    if int(counts.sum()) != documents:
        raise ValueError(f"runs': {int(counts.sum())} documents in all but the shard has {documents}")
    if inputs is not None and (bad := sorted(set(run_input.tolist()) - set(inputs))):
        raise ValueError(f"runs': input {bad[0]} is not one the task read ({sorted(inputs)})")
    counted = first_line > 0
    steps = unpack_column(rec.offset, documents - len(counts), "offset'") + 1
    line_steps = unpack_column(rec.line, int((counts[counted] - 1).sum()), "line'") + 1
    offset = _runs_cumsum(first_offset, steps, np.cumsum(counts) - counts, documents)
    line = np.full(documents, NO_LINE, dtype=np.int64)
    if counted.any():
        lens = counts[counted]
        line[np.repeat(counted, counts)] = _runs_cumsum(first_line[counted], line_steps, np.cumsum(lens) - lens,
                                                        int(lens.sum()))
    return DocOrigins(np.repeat(run_input, counts), offset, line)


def _runs_cumsum(firsts: "np.ndarray", steps: "np.ndarray", starts: "np.ndarray", n: int) -> "np.ndarray":
    """Values of runs starting at ``starts`` (of ``n``): each run's first value, then each step added."""
    import numpy as np

    d = np.ones(n, dtype=np.int64)
    rest = np.ones(n, dtype=bool)
    rest[starts] = False
    d[rest] = steps
    d[starts] = firsts
    c = np.cumsum(d)
    return c - np.repeat(c[starts] - firsts, np.diff(np.append(starts, n)))


def encode_origins(o: DocOrigins) -> OriginsRecord:
    """The packed record of ``o``: runs cut wherever the input changes or an offset or a counted line does
    not increase (or lines start or stop being counted)."""
    import numpy as np

    n = len(o)
    if int(o.offset.min(initial=0)) < 0 or int(o.input.min(initial=0)) < 0:
        raise ValueError("document origins hold non-negative inputs and offsets")
    counted = o.line > 0
    new = np.ones(n, dtype=bool)
    if n > 1:
        same = ((o.input[1:] == o.input[:-1]) & (o.offset[1:] > o.offset[:-1]) & (counted[1:] == counted[:-1])
                & (~counted[1:] | (o.line[1:] > o.line[:-1])))
        new[1:] = ~same
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, n))
    rest = ~new
    offset_steps = (o.offset[1:] - o.offset[:-1])[rest[1:]] - 1
    line_rest = rest & counted
    line_steps = (o.line[1:] - o.line[:-1])[line_rest[1:]] - 1
    first_line = np.where(counted[starts], o.line[starts], 0)
    runs = np.stack([o.input[starts], counts, o.offset[starts], first_line], axis=1)
    return OriginsRecord(pack_column(runs), pack_column(offset_steps), pack_column(line_steps))
