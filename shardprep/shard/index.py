"""``index.json``: the finalized dataset, what the loader reads first (it copies no data).

Its per-shard totals let the loader place every shard in the epoch stream before opening any shard;
its tokenizer block carries the special ids a training script needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import starmap
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

from shardprep.errors import IncompleteError, InputDataError
from shardprep.records import OMIT_NONE, Fields, Record, all_of, collector_paused, load_json, record
from shardprep.shard.format import (
    DTYPES,
    FORMAT_VERSIONS,
    INDEX_FILE,
    LAYOUTS,
    chat_in_version,
    shard_name,
    shard_names,
    sidecar_name,
    sidecar_names,
)
from shardprep.shard.sidecar import TOTALS, ShardTotals

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.shard.sidecar import Sidecar
    from shardprep.storage.locations import StorageOptions


@dataclass(frozen=True, slots=True)
class IndexShard(ShardTotals):
    """One shard as index.json lists it (legacy tars reuse it with their path as ``name``); written in the
    order index.json has always had: the five totals, then the names."""

    name: str
    sidecar: str

    @classmethod
    def parse(cls, f: Fields) -> IndexShard:
        name, sidecar = f.str("name"), f.str("sidecar")     # the names first: an error names them first
        return cls.holding(ShardTotals.parse_totals(f), name=name, sidecar=sidecar)

    @classmethod
    def parse_all(cls, f: Fields, key: str) -> tuple[IndexShard, ...]:
        """Every entry of the list ``key``, as :meth:`parse` reads each, checked column by column.

        Why: index.json lists every shard (a hundred thousand in a large dataset) and the loader and
        ``trace`` read it before anything else; the typed readers cost ~20 us an entry.  When every entry is
        well formed (the usual case) each column is type-checked at C speed here; otherwise every entry goes
        through :meth:`parse`, whose error names the first bad entry and its field.
        """
        raw = f.list(key)
        if raw and set(map(type, raw)) == {dict} and set(map(len, raw)) == {len(_ENTRY_KEYS)}:
            try:
                rows = list(map(itemgetter(*_ENTRY_KEYS), raw))     # in the constructor's order
            except KeyError:
                rows = []
            cols = list(zip(*rows))
            if cols and all(all_of(c, int) and min(c) >= 0 for c in (cols[0], *cols[2:5])) \
                    and all(all_of(c, str) for c in (cols[1], cols[5], cols[6])):
                return tuple(starmap(cls, rows))
        return tuple(cls.parse(Fields(o, f.where, f"{f.name(key)}[{i}]")) for i, o in enumerate(raw))


# an index entry's keys in ``IndexShard``'s field order: bytes, sha256, samples, documents, tokens, name, sidecar
_ENTRY_KEYS = ("bytes", "sha256", "samples", "documents", "tokens", "name", "sidecar")


@dataclass(frozen=True)
class IndexTokenizer(Record):
    """The tokenizer as the loader needs it: ids of the special tokens and the BOS/EOS policy."""

    source: str
    vocab_size: int
    dtype: str
    eos_id: int | None
    bos_id: int | None
    pad_id: int | None
    eos_token: str | None
    bos_token: str | None
    pad_token: str | None
    add_eos: bool
    add_bos: bool


@dataclass(frozen=True)
class IndexTotals(Record):
    shards: int
    samples: int
    documents: int
    tokens: int
    bytes: int
    skipped: dict[str, int] = field(default_factory=dict)
    trained_tokens: int | None = field(default=None, metadata=OMIT_NONE)    # chat data: tokens with a label


@dataclass(frozen=True)
class Index(Record):
    format_version: int
    created_by: str
    plan_fingerprint: str
    tokenizer_fingerprint: str
    tokenizer: IndexTokenizer
    layout: str
    dtype: str
    shards: tuple[IndexShard, ...]
    totals: IndexTotals

    @classmethod
    def parse(cls, data: bytes, where: str | Path, *, check: bool = True) -> "Index":
        """The record in ``data``; with ``check`` (every reader but ``repair``, which rebuilds a broken one)
        also its contract (``contract_problems``): ``IndexContractError`` naming the first problem."""
        with collector_paused():       # a large dataset lists 100,000 shards: see collector_paused
            f = load_json(data, str(where), "index")
            version = f.version("format_version", FORMAT_VERSIONS, hint="use the shardprep release that wrote it")
            shards = IndexShard.parse_all(f, "shards")
        if not shards:
            f.fail("shards", "lists no shards")
        t = f.obj_at("totals")
        totals = IndexTotals(t.int("shards"), t.int("samples"), t.int("documents"), t.int("tokens"), t.int("bytes"),
                             t.counts("skipped"),
                             t.int("trained_tokens", minimum=0) if t.has("trained_tokens") else None)
        index = cls(
            format_version=version, created_by=f.str("created_by"), plan_fingerprint=f.str("plan_fingerprint"),
            tokenizer_fingerprint=f.str("tokenizer_fingerprint"),
            tokenizer=record(IndexTokenizer, f.obj_at("tokenizer")),
            layout=f.str("layout", choices=LAYOUTS), dtype=f.str("dtype", choices=tuple(DTYPES)),
            shards=shards, totals=totals,
        )
        if check:
            index.check(where)
        return index

    @property
    def chat(self) -> bool:
        """Chat/SFT data: every chunk carries its trained ranges (format 2; from format 3, an index whose
        totals count trained tokens)."""
        chat = chat_in_version(self.format_version)
        return self.totals.trained_tokens is not None if chat is None else chat

    def check(self, where: str | Path) -> None:
        """Refuse an index that contradicts itself (``IndexContractError``, exit 5, naming the first problem)."""
        problems = self.contract_problems()
        if problems:
            raise IndexContractError(where, problems)

    def contract_problems(self) -> list[str]:
        """How this index contradicts itself (empty: it does not).

        Every field may be well formed while the whole is not: an entry removed, repeated or renamed by hand
        leaves totals and the plan saying otherwise, and a reader that trusted the list would read a subset
        (or a shard twice).  Entries are exactly ``shard-NNNNN.tar`` (+ ``.json``) for tasks 0..N-1 in task
        order, N = ``totals.shards``, and ``totals`` adds them up.  Its agreement with the plan (job.json,
        where one is reachable) is ``job.finalize.plan_problems``.
        """
        names = [s.name for s in self.shards]
        twice = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) < len(names) else []
        if twice:
            return [f"field 'shards': lists {twice[0]} {names.count(twice[0])} times"]
        if len(self.shards) != self.totals.shards:
            return [f"field 'shards': lists {len(self.shards)} shard(s) but 'totals.shards' is {self.totals.shards}"]
        if names != shard_names(len(names)) or [s.sidecar for s in self.shards] != sidecar_names(len(names)):
            for i, s in enumerate(self.shards):
                if (s.name, s.sidecar) != (shard_name(i), sidecar_name(i)):
                    return [f"field 'shards[{i}]': is {s.name} ({s.sidecar}), expected {shard_name(i)} "
                            f"({sidecar_name(i)}): shards are listed in task order, 0 to {len(self.shards) - 1}"]
        problems = [f"field 'totals.{key}': is {getattr(self.totals, key)} but the shards add up to {total}"
                    for key in ("samples", "documents", "tokens", "bytes")
                    if (total := sum(map(attrgetter(key), self.shards))) != getattr(self.totals, key)]
        if (self.totals.trained_tokens is not None) != self.chat:
            problems.append(f"field 'totals.trained_tokens': {'missing in' if self.chat else 'present in'} an index "
                            f"of format {self.format_version} (chat data is format 2 and counts its trained tokens)")
        tok = self.tokenizer
        if tok.dtype != self.dtype:
            problems.append(f"field 'tokenizer.dtype': is {tok.dtype} but 'dtype' is {self.dtype}")
        if tok.vocab_size < 1:
            problems.append(f"field 'tokenizer.vocab_size': is {tok.vocab_size}, not a positive integer")
        problems += [f"field 'tokenizer.{key}': is {v}, not an id below vocab_size {tok.vocab_size}"
                     for key in ("eos_id", "bos_id", "pad_id")
                     if (v := getattr(tok, key)) is not None and not 0 <= v < tok.vocab_size]
        return problems


class IndexContractError(IncompleteError):
    """index.json's entries, totals or tokenizer contradict each other or the plan: the dataset it describes
    is not the one that was finalized (exit 5, as a shard that does not verify).  ``repair`` rebuilds it."""

    def __init__(self, where: str | Path, problems: list[str]) -> None:
        from shardprep.storage.locations import is_url, split

        self.problems = problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        root = split(where)[0]
        super().__init__(f"{where}: {problems[0]}{more}: the index does not describe the dataset that was "
                         f"finalized",
                         hint="rebuild it with `shardprep repair DIR` in the output directory this copy was "
                              "uploaded from, then upload it again" if is_url(where) else
                              f"`shardprep repair {root}` rebuilds it from the plan and the checked sidecars")


def read_index(root: str | Path, *, storage: StorageOptions | None = None) -> Index:
    """Read and check ``root/index.json`` as a record (``Index``: version, layout, dtype, every field's
    type; errors name the file and the field, a torn or foreign index is never a KeyError).
    The files it lists are not looked at here: the loader checks them all at once (``loader.index.load_index``),
    ``shardprep verify`` shard by shard."""
    from shardprep.storage.locations import join, read_bytes  # local paths or any URL

    where = join(str(root), INDEX_FILE)
    try:
        data = read_bytes(where, storage=storage)
    except (FileNotFoundError, NotADirectoryError):
        raise InputDataError(f"{where} does not exist: not a finalized shardprep output",
                             hint="run `shardprep finalize`, or pass legacy tars (token_ids.json samples)") from None
    return Index.parse(data, where)


_SAME_IN_SIDECAR = ("format_version", "tokenizer_fingerprint", "plan_fingerprint", "dtype", "layout")


def sidecar_mismatches(index: Index, entry: IndexShard, side: Sidecar) -> list[tuple[str, object, object]]:
    """``(field, sidecar's value, index.json's value)`` wherever a shard's sidecar disagrees with the index.

    Its own consistency was checked when it was parsed; this says whether it belongs to this dataset (a
    shard copied in from another run, another tokenizer or format version).  The loader refuses the first
    mismatch when it opens the shard; ``verify`` lists them all.
    """
    wanted = [(k, getattr(index, k)) for k in _SAME_IN_SIDECAR] + [(k, getattr(entry, k)) for k in TOTALS]
    return [(key, getattr(side, key), want) for key, want in wanted if getattr(side, key) != want]
