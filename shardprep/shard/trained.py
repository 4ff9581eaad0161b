"""Which tokens of a chat shard are trained: the ``<key>.trained.u16|u32`` member beside a chunk's tokens.

Chat and SFT data carry a loss mask.  Stored per token it would cost a byte per token (half the payload of
a uint16 shard); stored as the trained *ranges* of each document it costs a few integers per conversation
(an assistant turn is one range), about 1% of a shard of ordinary conversations.

On disk, per chunk, for each document in order: ``k`` (its number of trained ranges), then ``k`` pairs
``start, end`` (token positions relative to the document's first token, ``0 <= start < end <= length``,
sorted, neither overlapping nor touching: touching ranges are written as one).  Little-endian ``u16`` when
every document of the chunk is shorter than 65,536 tokens (so every number fits), else ``u32``.  A
document with no trained token is one ``0``.

In memory a chunk's ranges are a ``Trained``: ``counts`` per document and ``ranges`` (one row per range,
relative to its document), which the writer slices at chunk boundaries by document and the loader turns
into a per-token mask.  Imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

U16_MAX = 0xFFFF


@dataclass(frozen=True)
class Trained:
    """Trained token ranges of consecutive documents: ``counts[d]`` ranges for document ``d``, their rows in
    ``ranges`` (int64, shape ``(sum(counts), 2)``, ``start, end`` relative to the document's first token)."""

    counts: np.ndarray
    ranges: np.ndarray

    @classmethod
    def empty(cls, documents: int = 0) -> Trained:
        return cls(np.zeros(documents, dtype=np.int64), np.zeros((0, 2), dtype=np.int64))

    @classmethod
    def concat(cls, parts: list[Trained]) -> Trained:
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.counts for p in parts]), np.concatenate([p.ranges for p in parts]))

    @property
    def documents(self) -> int:
        return int(self.counts.size)

    def docs(self, start: int, stop: int) -> Trained:
        """The ranges of documents ``start .. stop-1`` (views)."""
        first = np.concatenate([[0], np.cumsum(self.counts)])
        return Trained(self.counts[start:stop], self.ranges[int(first[start]):int(first[stop])])

    def trained_tokens(self) -> int:
        return int((self.ranges[:, 1] - self.ranges[:, 0]).sum()) if self.ranges.size else 0

    def mask(self, lengths: np.ndarray) -> np.ndarray:
        """One bool per token of the documents (of ``lengths``) laid end to end: True where trained."""
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        base = np.repeat(starts, self.counts)
        delta = np.zeros(int(np.sum(lengths)) + 1, dtype=np.int32)
        np.add.at(delta, base + self.ranges[:, 0], 1)
        np.add.at(delta, base + self.ranges[:, 1], -1)
        return np.cumsum(delta[:-1]) > 0


def itemsize_for(lengths: np.ndarray) -> int:
    """2 when every document (so every position, and every range count) fits in a uint16, else 4."""
    return 2 if lengths.size == 0 or int(lengths.max()) <= U16_MAX else 4


def _count_positions(counts: np.ndarray) -> np.ndarray:
    """Where each document's count sits in the member: after the counts and pairs of the documents before it."""
    return np.arange(counts.size, dtype=np.int64) + 2 * np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def encode(trained: Trained, lengths: np.ndarray) -> tuple[bytes, int]:
    """The member's bytes for documents of ``lengths``, and its itemsize (2 or 4)."""
    itemsize = itemsize_for(lengths)
    n = trained.documents
    out = np.empty(n + 2 * len(trained.ranges), dtype=np.int64)
    count_at = _count_positions(trained.counts)
    out[count_at] = trained.counts
    pair_at = np.ones(out.size, dtype=bool)
    pair_at[count_at] = False
    out[pair_at] = trained.ranges.reshape(-1)
    return out.astype(f"<u{itemsize}").tobytes(), itemsize


def decode(data: bytes, itemsize: int, lengths: np.ndarray) -> Trained:
    """Parse and check a member for documents of ``lengths``; ``ValueError`` naming the document on
    anything that is not a well-formed table (counts running past the data, a range outside its document,
    ranges out of order, overlapping or touching)."""
    flat = np.frombuffer(data, dtype=f"<u{itemsize}").astype(np.int64)
    counts = np.empty(len(lengths), dtype=np.int64)
    pos = 0
    for d in range(len(lengths)):      # one step per document: the counts say where the next one starts
        if pos >= flat.size:
            raise ValueError(f"trained ranges end at document {d} of {len(lengths)}")
        counts[d] = flat[pos]
        pos += 1 + 2 * int(counts[d])
    if pos != flat.size:
        raise ValueError(f"trained ranges hold {flat.size} numbers, {pos} expected for {len(lengths)} documents")
    count_at = _count_positions(counts)
    keep = np.ones(flat.size, dtype=bool)
    keep[count_at] = False
    trained = Trained(counts, flat[keep].reshape(-1, 2))
    check(trained, lengths)
    return trained


def check(trained: Trained, lengths: np.ndarray) -> None:
    """``ValueError`` naming the first document whose ranges are not sorted, disjoint, non-empty and inside it."""
    if trained.documents != len(lengths):
        raise ValueError(f"trained ranges for {trained.documents} documents, the chunk has {len(lengths)}")
    if not trained.ranges.size:
        return
    owner = np.repeat(np.arange(len(lengths)), trained.counts)
    start, end = trained.ranges[:, 0], trained.ranges[:, 1]
    bad = (start < 0) | (end <= start) | (end > lengths[owner])
    same_doc = np.concatenate([[False], owner[1:] == owner[:-1]])
    bad |= same_doc & (start <= np.concatenate([[-1], end[:-1]]))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        d = int(owner[i])
        raise ValueError(f"document {d} (length {int(lengths[d])}): trained range {int(start[i])}..{int(end[i])} "
                         "is empty, outside the document, or not after the range before it")
