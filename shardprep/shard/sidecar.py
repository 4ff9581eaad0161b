"""A shard's sidecar ``shard-NNNNN.json`` and its chunk table (the one shape of it).

The chunk table is columnar on disk (one list per column, one entry per sample in tar order) and stays
columnar here: tuples of ints, validated once at parse time, with numpy views built on first use for
the loader (numpy is imported only then, so ``status`` and ``finalize`` never pay for it).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, TypeVar

from shardprep.records import NOT_WRITTEN, OMIT_NONE, PRINTABLE, PRINTABLES, Fields, Record, dump, load_json, record
from shardprep.shard.format import DTYPES, FORMAT_VERSIONS, LAYOUTS, chat_in_version, has_origins
from shardprep.shard.provenance import BackendRecord, SkipExample, TaskStats

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from shardprep.shard.origins import DocOrigins, OriginsRecord

CHUNK_COLUMNS = ("key", "tokens_offset", "tokens", "docs", "doclens_offset", "doclens_itemsize")
CHAT_COLUMNS = ("trained_offset", "trained_itemsize", "trained_ranges")      # chat shards only (format 2)
TOTALS = ("bytes", "sha256", "samples", "documents", "tokens")
R = TypeVar("R", bound="ShardTotals")


@dataclass(frozen=True, slots=True)
class ShardTotals(Record):
    """What one shard holds, in the five numbers every record of it carries: the writer's result, the
    sidecar, the summary ``status``/``finalize`` keep, and the shard's entry in index.json.

    Each of those records is a ``ShardTotals`` with its own fields added; on disk the five stay flat
    (``"bytes": ..., "sha256": ...`` in this order), as they always were.
    """

    bytes: int
    sha256: str
    samples: int
    documents: int
    tokens: int

    def totals(self) -> ShardTotals:
        """Just the five numbers of this record."""
        return ShardTotals(self.bytes, self.sha256, self.samples, self.documents, self.tokens)

    @classmethod
    def holding(cls: type[R], totals: ShardTotals, **fields: Any) -> R:
        """A record of this class for the shard ``totals`` describes (another record of it), plus ``fields``."""
        return cls(bytes=totals.bytes, sha256=totals.sha256, samples=totals.samples, documents=totals.documents,
                   tokens=totals.tokens, **fields)

    @staticmethod
    def parse_totals(f: Fields) -> ShardTotals:
        return ShardTotals(f.int("bytes", minimum=0), f.str("sha256"), f.int("samples", minimum=0),
                           f.int("documents", minimum=0), f.int("tokens", minimum=0))


@dataclass(frozen=True)
class Chunk:
    """One sample's location in its shard: one ranged read for the tokens (and one for doclens)."""

    index: int
    key: str
    tokens_offset: int
    tokens: int
    docs: int
    doclens_offset: int      # -1 in the doc layout (no doclens member)
    doclens_itemsize: int    # 2 or 4; 0 in the doc layout
    trained_offset: int = -1     # chat shards: the trained ranges member (shard.trained); -1 elsewhere
    trained_itemsize: int = 0    # 2 or 4 in a chat shard, else 0
    trained_ranges: int = 0      # ranges in the member (its size: itemsize x (docs + 2 x ranges))


@dataclass(frozen=True)
class ChunkTable(Record):
    """The samples of one shard, in tar order (sidecar field ``chunks``)."""

    key: tuple[str, ...] = ()
    tokens_offset: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()
    docs: tuple[int, ...] = ()
    doclens_offset: tuple[int, ...] = ()
    doclens_itemsize: tuple[int, ...] = ()
    trained_offset: tuple[int, ...] | None = field(default=None, metadata=OMIT_NONE)     # chat shards only
    trained_itemsize: tuple[int, ...] | None = field(default=None, metadata=OMIT_NONE)
    trained_ranges: tuple[int, ...] | None = field(default=None, metadata=OMIT_NONE)

    def __len__(self) -> int:
        return len(self.key)

    @property
    def chat(self) -> bool:
        """Whether the chunks carry trained ranges (a chat shard)."""
        return self.trained_offset is not None

    def chunk(self, i: int) -> Chunk:
        extra = tuple(getattr(self, c)[i] for c in CHAT_COLUMNS) if self.chat else ()
        return Chunk(i, self.key[i], self.tokens_offset[i], self.tokens[i], self.docs[i], self.doclens_offset[i],
                     self.doclens_itemsize[i], *extra)

    def chunks(self) -> Iterator[Chunk]:
        return (self.chunk(i) for i in range(len(self)))

    @classmethod
    def from_rows(cls, rows: list[tuple[Any, ...]], *, chat: bool = False) -> "ChunkTable":
        """Build from ``(key, tokens_offset, tokens, docs, doclens_offset, doclens_itemsize)`` rows, with
        ``(trained_offset, trained_itemsize, trained_ranges)`` after them in a chat shard."""
        if not rows:
            return cls(trained_offset=(), trained_itemsize=(), trained_ranges=()) if chat else cls()
        return cls(*(tuple(col) for col in zip(*rows)))

    @classmethod
    def parse(cls, f: Fields) -> "ChunkTable":
        columns = CHUNK_COLUMNS[1:] + (CHAT_COLUMNS if f.has(CHAT_COLUMNS[0]) else ())
        table = cls(f.strs("key"), *(f.ints(name) for name in columns))
        for name in columns:
            if len(getattr(table, name)) != len(table.key):
                f.fail(name, f"has {len(getattr(table, name))} entries but 'key' has {len(table.key)}")
        return table

    # -- numpy views (the loader's arithmetic) ---------------------------------------------------------
    @cached_property
    def tokens_array(self) -> "np.ndarray":
        import numpy as np

        return np.asarray(self.tokens, dtype=np.int64)

    @cached_property
    def docs_array(self) -> "np.ndarray":
        import numpy as np

        return np.asarray(self.docs, dtype=np.int64)

    @cached_property
    def doc_start(self) -> "np.ndarray":
        """Index (within the shard) of each chunk's first document."""
        import numpy as np

        return np.concatenate([[0], np.cumsum(self.docs_array)[:-1]]).astype(np.int64)


@dataclass(frozen=True)
class SidecarInput(Record):
    """One work item of the task, as its sidecar records it: the path and, from format 3, the job's input
    number (``input``: what ``origins`` names; None in older sidecars)."""

    path: str = field(metadata=PRINTABLE)
    start: int
    end: int | None
    unit: str
    first_line: int | None
    input: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, slots=True)
class SidecarSummary(ShardTotals):
    """What ``status``, ``finalize`` and the Slurm view keep of a finished task's sidecar.

    A parsed sidecar with its chunk table is a few KB of Python objects: held for every task of a
    million-task job it would not fit, and the garbage collector would rescan it all again and again.
    """

    task: int
    shard: str
    format_version: int
    tokenizer_fingerprint: str
    skipped: tuple[tuple[str, int], ...]
    elapsed_s: float | None
    trained_tokens: int | None = None      # chat shards

    @property
    def skipped_total(self) -> int:
        return sum(n for _, n in self.skipped)


@dataclass(frozen=True)
class Sidecar(ShardTotals):
    """What a finished task wrote about its shard; the shard counts as done only with this file."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "format_version", "created_by", "task", "shard", "plan_fingerprint", "tokenizer_fingerprint", "layout",
        "dtype", *TOTALS, "trained_tokens", "chunks", "skipped", "skipped_examples", "warnings", "inputs", "backend", "stats")

    format_version: int
    created_by: str
    task: int
    shard: str
    plan_fingerprint: str
    tokenizer_fingerprint: str
    layout: str
    dtype: str
    chunks: ChunkTable
    trained_tokens: int | None = field(default=None, metadata=OMIT_NONE)    # chat shards: tokens with a label
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: tuple[SkipExample, ...] = ()        # informational: the first few skipped documents
    # inputs that look binary or mis-encoded (inputs.health); written when any
    warnings: tuple[str, ...] = field(default=(), metadata={**PRINTABLES, "omit": ()})
    inputs: tuple[SidecarInput, ...] = ()
    backend: BackendRecord = field(default_factory=lambda: BackendRecord(None))   # informational
    stats: TaskStats = field(default_factory=TaskStats)                          # informational
    # each document's input, offset and line, packed (format 3; written after ``chunks`` by ``to_dict``)
    origins_record: OriginsRecord | None = field(default=None, metadata=NOT_WRITTEN)
    where: str = field(default="", compare=False, metadata=NOT_WRITTEN)        # the file it was read from

    def to_dict(self) -> dict[str, Any]:
        out = dump(self)
        if self.origins_record is None:
            return out
        items = list(out.items())
        at = [k for k, _ in items].index("chunks") + 1
        return dict([*items[:at], ("origins", dump(self.origins_record)), *items[at:]])

    @cached_property
    def origins(self) -> DocOrigins | None:
        """Each document's input (index into the plan's inputs), byte offset or row, and line, in document
        order; None for a shard written before format 3.  Decoded and checked on first use (RecordError
        naming the sidecar and the key): one entry per document, inputs among the task's."""
        if self.origins_record is None:
            return None
        inputs = {i.input for i in self.inputs if i.input is not None}
        return self.origins_record.decode(self.documents, self.where or self.shard, inputs or None)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    @property
    def elapsed_s(self) -> float | None:
        return self.stats.elapsed_s

    def summary(self) -> SidecarSummary:
        return SidecarSummary.holding(self, task=self.task, shard=self.shard, format_version=self.format_version,
                                      tokenizer_fingerprint=self.tokenizer_fingerprint,
                                      skipped=tuple(self.skipped.items()), elapsed_s=self.elapsed_s,
                                      trained_tokens=self.trained_tokens)

    @classmethod
    def parse(cls, data: builtins.bytes, where: str | Path) -> "Sidecar":  # (``bytes`` is a field here)
        from shardprep.shard.origins import OriginsRecord  # (a reader of the chunk table loads no more)

        f = load_json(data, str(where), "sidecar")
        table = ChunkTable.parse(f.obj_at("chunks"))
        sidecar = cls.holding(
            ShardTotals.parse_totals(f),
            format_version=f.version("format_version", FORMAT_VERSIONS, hint="use the shardprep release that wrote it"),
            created_by=f.str("created_by"), task=f.int("task", minimum=0),
            shard=f.str("shard"), plan_fingerprint=f.str("plan_fingerprint"),
            tokenizer_fingerprint=f.str("tokenizer_fingerprint"), layout=f.str("layout", choices=LAYOUTS),
            dtype=f.str("dtype", choices=tuple(DTYPES)), chunks=table,
            trained_tokens=f.int("trained_tokens", minimum=0) if f.has("trained_tokens") else None,
            skipped=f.counts("skipped"),
            skipped_examples=tuple(record(SkipExample, o, defaults=True) for o in f.objects("skipped_examples")),
            warnings=f.strs("warnings") if f.has("warnings") else (),
            inputs=tuple(_sidecar_input(o) for o in f.objects("inputs")),
            backend=BackendRecord.parse(f.obj_at("backend")), stats=TaskStats.parse(f.obj_at("stats")),
            origins_record=OriginsRecord.parse(f.obj_at("origins")) if f.has("origins") else None, where=str(where),
        )
        _check_totals(f, sidecar)
        return sidecar


def _sidecar_input(f: Fields) -> SidecarInput:
    return SidecarInput(f.str("path"), f.int("start", minimum=0), f.int("end", optional=True), f.str("unit"),
                        f.int("first_line", optional=True),
                        f.int("input", minimum=0) if f.has("input") else None)


def _check_totals(f: Fields, s: Sidecar) -> None:
    """The chunk table must add up to the sidecar's own totals (a hand-edited or torn table does not)."""
    if len(s.chunks) != s.samples:
        f.fail("chunks.key", f"has {len(s.chunks)} entries but samples is {s.samples}")
    if sum(s.chunks.tokens) != s.tokens:
        f.fail("chunks.tokens", f"adds up to {sum(s.chunks.tokens)} but tokens is {s.tokens}")
    if sum(s.chunks.docs) != s.documents:
        f.fail("chunks.docs", f"adds up to {sum(s.chunks.docs)} but documents is {s.documents}")
    chat = s.chunks.chat
    if chat_in_version(s.format_version) not in (None, chat) or (s.trained_tokens is not None) != chat:
        f.fail("format_version", f"{s.format_version} with{'' if chat else 'out'} trained ranges in the chunk table "
                                 f"and{'' if s.trained_tokens is not None else ' no'} trained_tokens: a chat shard has "
                                 "both (format 2 or 3), any other neither (format 1 or 3)")
    if has_origins(s.format_version) != (s.origins_record is not None):
        f.fail("origins", f"{'missing' if has_origins(s.format_version) else 'present'} in a sidecar of format "
                          f"{s.format_version} (format 3 and later record each document's origin)")
    if s.trained_tokens is not None and s.trained_tokens > s.tokens:
        f.fail("trained_tokens", f"is {s.trained_tokens}, more than the shard's {s.tokens} tokens")
