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
from dataclasses import dataclass, field

import numpy as np
import orjson

from shardprep.errors import IncompleteError, InputDataError
from shardprep.shard.format import DTYPES, FORMAT_VERSION, INDEX_FILE, LAYOUTS
from shardprep.shard.reader import ByteSource, Chunk, read_chunk
from shardprep.loader.sources import StorageOptions, join, object_sizes, open_source, read_bytes, sha256_of

log = logging.getLogger(__name__)

_TOTALS = ("samples", "documents", "tokens")
_TABLE_FIELDS = ("key", "tokens_offset", "tokens", "docs", "doclens_offset", "doclens_itemsize")


@dataclass(frozen=True)
class ShardEntry:
    """One shard as listed in index.json."""

    name: str
    sidecar: str
    bytes: int
    sha256: str
    samples: int
    documents: int
    tokens: int


@dataclass
class ChunkTable:
    """A shard's samples (chunks) in file order, as int64 arrays; ``doc_start`` numbers documents."""

    keys: list[str]
    tokens: np.ndarray
    docs: np.ndarray
    tokens_offset: np.ndarray
    doclens_offset: np.ndarray
    doclens_itemsize: np.ndarray
    payload_bytes: np.ndarray | None = None     # legacy JSON members: byte size of each token payload
    doc_start: np.ndarray = field(init=False)   # index (within the shard) of each chunk's first document

    def __post_init__(self) -> None:
        self.doc_start = np.concatenate([[0], np.cumsum(self.docs)[:-1]]).astype(np.int64)

    def chunk(self, i: int) -> Chunk:
        return Chunk(i, self.keys[i], int(self.tokens_offset[i]), int(self.tokens[i]), int(self.docs[i]),
                     int(self.doclens_offset[i]), int(self.doclens_itemsize[i]))


@dataclass
class DatasetIndex:
    """A dataset the loader can read: its shards, tokenizer ids and a fingerprint for resume checks."""

    root: str
    layout: str
    dtype: str
    tokenizer: dict
    shards: list[ShardEntry]
    fingerprint: str
    storage: StorageOptions | None = None
    raw: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.shard_tokens = np.array([s.tokens for s in self.shards], dtype=np.int64)
        self.shard_docs = np.array([s.documents for s in self.shards], dtype=np.int64)
        # global number of each shard's first document (index order): doc ids are stable provenance
        self.shard_doc_start = np.concatenate([[0], np.cumsum(self.shard_docs)[:-1]]).astype(np.int64)

    def location(self, name: str) -> str:
        return join(self.root, name)

    def special_id(self, name: str) -> int | None:
        v = self.tokenizer.get(name)
        return None if v is None else int(v)

    # -- reading (overridden by the legacy reader) --------------------------------------------------
    def chunk_table(self, shard: int) -> ChunkTable:
        """Read and validate the sidecar of shard ``shard`` (callers cache the result)."""
        entry = self.shards[shard]
        where = self.location(entry.sidecar)
        try:
            side = orjson.loads(read_bytes(where, storage=self.storage))
        except FileNotFoundError:
            raise IncompleteError(f"{where}: sidecar of {entry.name} is missing") from None
        except orjson.JSONDecodeError as e:
            raise InputDataError(f"{where}: sidecar is not valid JSON ({e})") from None
        return _validated_table(self, entry, side, where)

    def open(self, shard: int) -> ByteSource:
        return open_source(self.location(self.shards[shard].name), storage=self.storage)

    def read(self, src: ByteSource, table: ChunkTable, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, doclens)`` of one chunk, in file order."""
        return read_chunk(src, table.chunk(chunk), self.dtype)


def _validated_table(index: DatasetIndex, entry: ShardEntry, side: dict, where: str) -> ChunkTable:
    """The sidecar's chunk table, after checking that the sidecar belongs to this index."""
    raw = index.raw
    checks = [
        ("format_version", side.get("format_version"), raw.get("format_version")),
        ("tokenizer_fingerprint", side.get("tokenizer_fingerprint"), raw.get("tokenizer_fingerprint")),
        ("plan_fingerprint", side.get("plan_fingerprint"), raw.get("plan_fingerprint")),
        ("dtype", side.get("dtype"), index.dtype),
        ("layout", side.get("layout"), index.layout),
        ("bytes", side.get("bytes"), entry.bytes),
        ("sha256", side.get("sha256"), entry.sha256),
    ] + [(k, side.get(k), getattr(entry, k)) for k in _TOTALS]
    for key, got, want in checks:
        if got != want:
            what = "a different tokenizer" if key == "tokenizer_fingerprint" else \
                "a different format version" if key == "format_version" else "different contents"
            raise InputDataError(
                f"{where}: {key} is {got!r} but index.json says {want!r}: shard {entry.name} comes from "
                f"{what} than the rest of the dataset",
                hint="re-run `shardprep finalize` or remove the foreign shard")
    try:
        t = side["chunks"]
        cols = {k: np.asarray(t[k], dtype=np.int64) for k in _TABLE_FIELDS[1:]}
        keys = list(t["key"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputDataError(f"{where}: malformed chunk table ({e!r})") from None
    if any(len(c) != len(keys) for c in cols.values()) or len(keys) != entry.samples:
        raise InputDataError(f"{where}: chunk table columns disagree with samples={entry.samples}")
    table = ChunkTable(keys, **cols)
    if int(table.tokens.sum()) != entry.tokens or int(table.docs.sum()) != entry.documents:
        raise InputDataError(f"{where}: chunk table totals do not match tokens={entry.tokens} "
                             f"documents={entry.documents}")
    return table


def _fingerprint(parts: object) -> str:
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()


def read_index(root: str, *, storage: StorageOptions | None = None) -> tuple[dict, list[ShardEntry]]:
    """Read and check ``root/index.json`` as a document: (its contents, its shards).

    Checked: it is JSON, an object, of our format version, with a known layout and dtype and a non-empty,
    well-formed shard list; every failure is one InputDataError naming the file (a torn or foreign
    index.json must not surface as a KeyError).  The files it lists are not looked at here: the loader
    checks them all at once (:func:`load_index`), ``shardprep verify`` shard by shard.
    """
    where = join(str(root), INDEX_FILE)
    try:
        raw = orjson.loads(read_bytes(where, storage=storage))
    except (FileNotFoundError, NotADirectoryError):
        raise InputDataError(f"{where} does not exist: not a finalized shardprep output",
                             hint="run `shardprep finalize`, or pass legacy tars (token_ids.json samples)") from None
    except orjson.JSONDecodeError as e:
        raise InputDataError(f"{where}: not valid JSON ({e}): torn, or not written by shardprep") from None
    if not isinstance(raw, dict):
        raise InputDataError(f"{where}: not a shardprep index (a JSON {type(raw).__name__}, not an object)")
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise InputDataError(f"{where}: format_version {version!r} is not supported (this shardprep reads "
                             f"version {FORMAT_VERSION})", hint="use the shardprep release that wrote it")
    layout, dtype = raw.get("layout"), raw.get("dtype")
    if layout not in LAYOUTS or dtype not in DTYPES:
        raise InputDataError(f"{where}: unknown layout {layout!r} or dtype {dtype!r}")
    try:
        shards = [ShardEntry(s["name"], s["sidecar"], int(s["bytes"]), s["sha256"], int(s["samples"]),
                             int(s["documents"]), int(s["tokens"])) for s in raw["shards"]]
    except (KeyError, TypeError, ValueError) as e:
        raise InputDataError(f"{where}: malformed shard list ({e!r})") from None
    if not shards:
        raise InputDataError(f"{where}: lists no shards")
    return raw, shards


def load_index(root: str, *, verify: bool = False, storage: StorageOptions | None = None) -> DatasetIndex:
    """Read ``root/index.json``, check it against the files next to it, and return the dataset.

    Always checked: format version, layout, dtype, every listed shard exists with the listed size.
    With ``verify``: every sidecar (as when a worker opens it) and every shard's sha256.
    """
    root = str(root)
    raw, shards = read_index(root, storage=storage)
    fingerprint = _fingerprint([raw["format_version"], raw.get("plan_fingerprint"), raw.get("tokenizer_fingerprint"),
                                [[s.name, s.bytes, s.sha256] for s in shards]])
    index = DatasetIndex(root, raw["layout"], raw["dtype"], dict(raw.get("tokenizer") or {}), shards, fingerprint,
                         storage, raw)
    _check_files(index)
    if verify:
        verify_all(index)
    return index


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
