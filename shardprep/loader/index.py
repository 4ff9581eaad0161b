"""Load and validate a finalized output (index.json + sidecars), local or on S3.

Only ``index.json`` is read up front: its per-shard totals place every shard in the epoch stream and
give ``len(loader)`` before any shard is opened.  A sidecar (the chunk table) is read only when a worker
first touches its shard, and is then checked against index.json: same format version, tokenizer, plan,
dtype, layout, bytes, sha256 and totals.  That catches a shard copied in from another run at the moment
it would be read, without paying for thousands of sidecar reads per rank at start-up; ``verify=True``
checks every sidecar and every shard's sha256 eagerly instead.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np
import orjson

from shardprep.errors import IncompleteError, InputDataError
from shardprep.records import collector_paused
from shardprep.shard.index import Index, IndexShard, IndexTokenizer, read_index, sidecar_mismatches
from shardprep.shard.reader import read_chunk
from shardprep.shard.sidecar import ChunkTable, Sidecar
from shardprep.storage.locations import StorageOptions, join, object_sizes, open_source, read_bytes, sha256_of
from shardprep.storage.store import ByteSource

log = logging.getLogger(__name__)

@dataclass
class DatasetIndex:
    """A dataset the loader can read: its shards, tokenizer ids and a fingerprint for resume checks.

    ``record`` is the parsed index.json (None for legacy tars, which have none).
    """

    root: str
    layout: str
    dtype: str
    tokenizer: IndexTokenizer | None
    shards: list[IndexShard]
    fingerprint: str
    storage: StorageOptions | None = None
    record: Index | None = None

    def __post_init__(self) -> None:
        self.shard_tokens = np.array([s.tokens for s in self.shards], dtype=np.int64)
        self.shard_docs = np.array([s.documents for s in self.shards], dtype=np.int64)
        # global number of each shard's first document (index order): doc ids are stable provenance
        self.shard_doc_start = np.concatenate([[0], np.cumsum(self.shard_docs)[:-1]]).astype(np.int64)

    def location(self, name: str) -> str:
        return join(self.root, name)

    def special_id(self, name: str) -> int | None:
        """``eos_id``, ``bos_id`` or ``pad_id`` of the dataset's tokenizer (None when it has none)."""
        return None if self.tokenizer is None else getattr(self.tokenizer, name)

    # -- reading (overridden by the legacy reader) --------------------------------------------------
    def chunk_table(self, shard: int) -> ChunkTable:
        """Read and validate the sidecar of shard ``shard`` (callers cache the result)."""
        return self.sidecar(shard).chunks

    def sidecar(self, shard: int) -> Sidecar:
        """The sidecar of shard ``shard``, parsed and checked against index.json (its chunk table is what
        the loader reads; ``trace`` reads its documents' origins too)."""
        entry = self.shards[shard]
        where = self.location(entry.sidecar)
        try:
            side = Sidecar.parse(read_bytes(where, storage=self.storage), where)
        except FileNotFoundError:
            raise IncompleteError(f"{where}: sidecar of {entry.name} is missing") from None
        _check_sidecar(self, entry, side, where)
        return side

    def open(self, shard: int) -> ByteSource:
        return open_source(self.location(self.shards[shard].name), storage=self.storage)

    def read(self, src: ByteSource, table: ChunkTable, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, doclens)`` of one chunk, in file order."""
        return read_chunk(src, table.chunk(chunk), self.dtype)


def _check_sidecar(index: DatasetIndex, entry: IndexShard, side: Sidecar, where: str) -> None:
    """The sidecar must belong to this index (its own consistency was checked when it was parsed)."""
    rec = index.record
    assert rec is not None, "legacy indexes have no sidecars"
    for key, got, want in sidecar_mismatches(rec, entry, side)[:1]:
        what = "a different tokenizer" if key == "tokenizer_fingerprint" else \
            "a different format version" if key == "format_version" else "different contents"
        raise InputDataError(
            f"{where}: {key} is {got!r} but index.json says {want!r}: shard {entry.name} comes from "
            f"{what} than the rest of the dataset",
            hint="re-run `shardprep finalize` or remove the foreign shard")


def _fingerprint(parts: object) -> str:
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()


def load_index(root: str, *, verify: bool = False, storage: StorageOptions | None = None,
               files: bool = True) -> DatasetIndex:
    """Read ``root/index.json``, check it against the files next to it, and return the dataset.

    Always checked: the record itself (:func:`read_index`: its fields, and that its entries are the shards
    0..N-1 its totals add up), its agreement with the plan where job.json is beside it
    (``job.finalize.check_against_plan``: shard count, fingerprints, tokenizer record), and, unless ``files``
    is False, that every listed shard exists with the listed size (one listing, a stat per file: seconds for
    a hundred thousand shards, which ``trace``, reading only the sidecars a step touches, does without).
    With ``verify``: every sidecar (as when a worker opens it) and every shard's sha256.
    """
    root = str(root)
    with collector_paused():        # the entries and the columns built from them (records.collector_paused)
        index = _read(root, storage)
    if files:
        _check_files(index)
    if verify:
        verify_all(index)
    return index


def _read(root: str, storage: StorageOptions | None) -> DatasetIndex:
    """index.json as a dataset, checked as a record and against the plan beside it."""
    from shardprep.job.finalize import check_against_plan

    rec = read_index(root, storage=storage)
    check_against_plan(rec, root, lambda where: read_bytes(where, storage=storage))
    shards = list(rec.shards)
    fingerprint = _fingerprint([rec.format_version, rec.plan_fingerprint, rec.tokenizer_fingerprint,
                                [[s.name, s.bytes, s.sha256] for s in shards]])
    return DatasetIndex(root, rec.layout, rec.dtype, rec.tokenizer, shards, fingerprint, storage, rec)


def _check_files(index: DatasetIndex) -> None:
    """Every shard listed exists with the listed size (one scandir / S3 LIST, not one call per shard)."""
    try:
        sizes = object_sizes(index.root, storage=index.storage)
    except FileNotFoundError:
        raise InputDataError(f"{index.root}: directory does not exist") from None
    for s in index.shards:
        got = sizes.get(s.name)
        if got is None:
            raise IncompleteError(f"{index.location(s.name)}: listed in index.json but missing")
        if got != s.bytes:
            raise IncompleteError(f"{index.location(s.name)}: {got} bytes but index.json says {s.bytes}: the "
                                  f"index does not match the files", hint="run `shardprep verify`")


def verify_all(index: DatasetIndex) -> None:
    """Eager checks: every sidecar against index.json, every shard's sha256 against both."""
    for i, s in enumerate(index.shards):
        index.chunk_table(i)
        digest = sha256_of(index.location(s.name), storage=index.storage)
        if digest != s.sha256:
            raise IncompleteError(f"{index.location(s.name)}: sha256 {digest} does not match index.json "
                                  f"({s.sha256}): corrupt or replaced shard")
    log.info("verified %d shards of %s", len(index.shards), index.root)
