"""Read legacy hand-written WebDataset shards whose samples hold ``<key>.token_ids.json``.

Many existing pipelines store each document as a JSON list of token ids in a tar.  To let users move to
shardprep without re-tokenizing first, the loader builds the same in-memory view it gets from index.json
and sidecars by scanning the tars once with the standard ``tarfile`` module: every sample becomes a
one-document chunk whose bytes are read later with one ranged read and parsed with orjson.  Everything
else (order, equal steps, resume, pack/pad/doc) is shared with the native format.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import re
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from shardprep.errors import ConfigError, InputDataError
from shardprep.loader.index import DatasetIndex
from shardprep.shard.index import IndexShard
from shardprep.shard.sidecar import ChunkTable
from shardprep.storage.store import ByteSource

log = logging.getLogger(__name__)

FIELD = "token_ids.json"
_KEY_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")    # webdataset's rule: key ends at the first dot


def expand_legacy(spec: str) -> list[str]:
    """Tar paths for a directory (its ``*.tar``), a glob, or a brace pattern like ``a-{000..009}.tar``."""
    p = Path(spec)
    if p.is_dir():
        files = sorted(str(x) for x in p.glob("*.tar"))
    else:
        from shardprep._extras import require

        braceexpand = require("braceexpand", feature="a {a,b} pattern in a legacy shard spec")
        files = []
        for pattern in braceexpand.braceexpand(spec):
            files.extend(sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern])
        files = list(dict.fromkeys(files))
    if not files:
        raise ConfigError(f"path={spec!r}: no index.json and no .tar files found")
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise InputDataError(f"legacy shard {missing[0]} does not exist")
    return files


def _scan(path: str) -> tuple[list[str], list[int], list[int], list[int], int]:
    """``(keys, data offsets, byte sizes, token counts, empty skipped)`` of one tar's token_ids.json members."""
    keys, offsets, sizes, counts = [], [], [], []
    empty = 0
    try:
        with tarfile.open(path, "r:") as tf:
            for member in tf:
                m = _KEY_RE.match(member.name)
                if not member.isfile() or m is None or m.group(2) != FIELD:
                    continue
                f = tf.extractfile(member)
                ids = orjson.loads(f.read()) if f is not None else None
                if not isinstance(ids, list) or not all(isinstance(x, int) and x >= 0 for x in ids[:64]):
                    raise InputDataError(f"{path}: member {member.name}: not a JSON list of token ids")
                if not ids:
                    empty += 1
                    continue
                keys.append(m.group(1))
                offsets.append(member.offset_data)
                sizes.append(member.size)
                counts.append(len(ids))
    except (tarfile.TarError, EOFError, orjson.JSONDecodeError) as e:
        raise InputDataError(f"corrupt or truncated legacy shard {path}: {e}") from None
    return keys, offsets, sizes, counts, empty


@dataclass(frozen=True)
class LegacyChunkTable(ChunkTable):
    """A scanned legacy tar: one single-document chunk per ``token_ids.json`` member, plus its byte size."""

    payload_bytes: tuple[int, ...] = ()

    @classmethod
    def scanned(cls, keys: list[str], offsets: list[int], sizes: list[int], counts: list[int]) -> "LegacyChunkTable":
        n = len(keys)
        return cls(tuple(keys), tuple(offsets), tuple(counts), (1,) * n, (-1,) * n, (0,) * n, payload_bytes=tuple(sizes))


class LegacyIndex(DatasetIndex):
    """A DatasetIndex built by scanning tars; chunks are single documents read as JSON."""

    def __init__(self, paths: list[str], tables: list[LegacyChunkTable]):
        shards = [IndexShard(name=p, sidecar="", bytes=Path(p).stat().st_size, sha256="", samples=len(t),
                             documents=len(t), tokens=sum(t.tokens))
                  for p, t in zip(paths, tables)]
        fingerprint = hashlib.sha256(orjson.dumps(
            [[Path(s.name).name, s.bytes, s.tokens, s.documents] for s in shards])).hexdigest()
        root = str(Path(paths[0]).parent)
        super().__init__(root, "doc", "json", None, shards, fingerprint, None, None)
        self._tables = tables

    def location(self, name: str) -> str:
        return name

    def chunk_table(self, shard: int) -> ChunkTable:
        return self._tables[shard]

    def read(self, src: ByteSource, table: ChunkTable, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(table, LegacyChunkTable)
        raw = src.read(table.tokens_offset[chunk], table.payload_bytes[chunk])
        tokens = np.asarray(orjson.loads(raw), dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) != table.tokens[chunk]:
            raise ValueError(f"{table.key[chunk]}.{FIELD} changed since the shard was scanned")
        return tokens, np.array([len(tokens)], dtype=np.int64)


def load_legacy(paths: list[str]) -> LegacyIndex:
    """Scan legacy tars (in the given order) into an in-memory index; errors name the tar and member."""
    started = time.monotonic()
    tables, empty_total = [], 0
    for path in paths:
        keys, offsets, sizes, counts, empty = _scan(path)
        tables.append(LegacyChunkTable.scanned(keys, offsets, sizes, counts))
        empty_total += empty
    docs = sum(len(t) for t in tables)
    if docs == 0:
        raise InputDataError(f"no {FIELD} samples found in {len(paths)} legacy tar(s), e.g. {paths[0]}")
    if empty_total:
        log.warning("skipped %d empty %s documents", empty_total, FIELD)
    log.info("scanned %d legacy tars: %d documents in %.1fs", len(paths), docs, time.monotonic() - started)
    return LegacyIndex(paths, tables)
