"""Read shards: one ranged read per sample through the sidecar's chunk table, or a full tar walk.

Where a sample lies comes from the sidecar's chunk table (``shard.sidecar.ChunkTable``).  Where the bytes
live is ``storage/``'s concern: a ``ByteSource`` (a local/Lustre file via ``pread``, an object via
ranged GETs) is handed in, and the decoding of samples is the same for every source.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from shardprep.shard import trained as trained_member
from shardprep.shard.format import DTYPE_FOR_EXT, DTYPES
from shardprep.shard.trained import Trained

if TYPE_CHECKING:  # pragma: no cover - types only: reading a shard needs neither records nor stores
    from shardprep.shard.sidecar import Chunk, Sidecar
    from shardprep.storage.store import ByteSource


def read_chunk(src: ByteSource, chunk: Chunk, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(tokens, doclens)`` of one sample with exactly two ranged reads (one in doc layout)."""
    dt = np.dtype(DTYPES[dtype])
    tokens = np.frombuffer(src.read(chunk.tokens_offset, chunk.tokens * dt.itemsize), dtype=dt)
    return tokens, read_doclens(src, chunk)


def read_doclens(src: ByteSource, chunk: Chunk) -> np.ndarray:
    """Document lengths of one sample (int64) without its tokens: one small ranged read in pack layout,
    none in doc layout (the sample is one document of ``chunk.tokens`` tokens)."""
    if not chunk.doclens_itemsize:
        return np.array([chunk.tokens], dtype=np.int64)
    ldt = np.dtype(f"<u{chunk.doclens_itemsize}")
    return np.frombuffer(src.read(chunk.doclens_offset, chunk.docs * ldt.itemsize), dtype=ldt).astype(np.int64)


def read_trained(src: ByteSource, chunk: Chunk, lengths: np.ndarray) -> Trained | None:
    """A chat sample's trained ranges (one ranged read; checked against ``lengths``), None elsewhere;
    ``ValueError`` naming the document when the member is not well formed."""
    if not chunk.trained_itemsize:
        return None
    data = src.read(chunk.trained_offset, chunk.trained_itemsize * (chunk.docs + 2 * chunk.trained_ranges))
    return trained_member.decode(data, chunk.trained_itemsize, lengths)


def split_docs(tokens: np.ndarray, lens: np.ndarray) -> list[np.ndarray]:
    """Split a chunk's concatenated tokens into per-document views."""
    return np.split(tokens, np.cumsum(lens)[:-1]) if len(lens) else []


def iter_shard_documents(path: str | Path, sidecar: Sidecar) -> Iterator[np.ndarray]:
    """Every document of a local shard, in order, as a 1-D array of the shard's dtype."""
    from shardprep.storage.local import LocalSource

    src = LocalSource(path)
    try:
        for ch in sidecar.chunks.chunks():
            tokens, lens = read_chunk(src, ch, sidecar.dtype)
            yield from split_docs(tokens, lens)
    finally:
        src.close()


@dataclass
class ParsedSample:
    key: str
    tokens: np.ndarray
    doclens: np.ndarray | None      # None in the doc layout (no doclens member)
    tokens_offset: int
    doclens_offset: int
    trained: Trained | None = None  # a chat sample's trained ranges (checked against its documents)
    trained_offset: int = -1

    @property
    def lengths(self) -> np.ndarray:
        """Document lengths in tokens; a doc-layout sample is one document."""
        return self.doclens if self.doclens is not None else np.array([self.tokens.size], dtype=np.int64)

    def documents(self) -> list[np.ndarray]:
        return split_docs(self.tokens, self.lengths)


def walk_tar(path: str | Path, stream: io.BufferedIOBase | None = None) -> Iterator[ParsedSample]:
    """Parse a shard as a plain tar (no sidecar needed): used by ``verify`` and ``inspect``.

    With ``stream`` (a seekable file: any store's shard through ``storage.store.SourceFile``) the shard
    is read from it, front to back, and ``path`` only names it in errors.  Raises ``ValueError`` naming
    the member on anything that is not a well-formed shard member.
    """
    with (tarfile.open(path, "r:") if stream is None else tarfile.open(fileobj=stream, mode="r:")) as tf:
        current: dict[str, Any] | None = None
        for member in tf:
            if not member.isfile():
                raise ValueError(f"{path}: unexpected tar entry {member.name!r} (not a regular file)")
            key, _, ext = member.name.partition(".")
            kind, _, type_ext = ext.partition(".")
            if kind not in ("tokens", "doclens", "trained") or type_ext not in ("u16", "u32"):
                raise ValueError(f"{path}: unexpected member {member.name!r}")
            f = tf.extractfile(member)
            assert f is not None
            data = f.read()
            arr = np.frombuffer(data, dtype=DTYPES[DTYPE_FOR_EXT[type_ext]])
            if current is not None and current["key"] != key:
                yield ParsedSample(**current)
                current = None
            if current is None:
                current = {"key": key, "tokens": None, "doclens": None, "tokens_offset": -1, "doclens_offset": -1}
            if kind == "tokens":
                current["tokens"], current["tokens_offset"] = arr, member.offset_data
            elif kind == "doclens":
                current["doclens"], current["doclens_offset"] = arr.astype(np.int64), member.offset_data
            else:
                if current["doclens"] is None:
                    raise ValueError(f"{path}: {member.name!r} comes before its sample's doclens")
                try:
                    current["trained"] = trained_member.decode(data, arr.itemsize, current["doclens"])
                except ValueError as e:
                    raise ValueError(f"{path}: {member.name!r}: {e}") from None
                current["trained_offset"] = member.offset_data
        if current is not None:
            yield ParsedSample(**current)
