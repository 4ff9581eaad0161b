"""Pack whole conversations into rows of ``seq_len`` tokens: first-fit decreasing over one window.

Chat rows must never split a conversation (a reply would be trained without its prompt), so rows are a
bin packing of conversation lengths rather than a cut of the token stream.  Two properties make it fit
the loader's exact order machinery:

* **Pure and deterministic.**  The input is the window's conversation lengths in stream order (a
  function of seed and epoch); items are taken longest first, ties by stream position, each into the
  first row with room.  Any process computes the same rows for the same window and epoch.
* **The row count does not depend on the order.**  First-fit decreasing looks only at the sorted
  lengths, so a window's number of rows (and each row's fill) is the same in every epoch; only which of
  several equal-length conversations lands where changes.  The loader can therefore size an epoch (and
  ``len(loader)``, the state, a mixture's quota) once per dataset, from the conversation lengths alone.

A conversation longer than ``seq_len`` is ``truncate``d to ``seq_len`` (a row of its own) or ``drop``ped;
both are counted in ``PackStats``.  Imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OVERFLOWS = ("truncate", "drop")


@dataclass(frozen=True)
class Packing:
    """Rows of one window in CSR form: row ``r`` holds the window positions ``members[offsets[r]:offsets[r+1]]``
    (in stream order), each taking ``takes`` tokens (its length, or ``seq_len`` when truncated)."""

    offsets: np.ndarray
    members: np.ndarray
    takes: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.offsets.size - 1)

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = int(self.offsets[r]), int(self.offsets[r + 1])
        return self.members[lo:hi], self.takes[lo:hi]


@dataclass(frozen=True)
class PackStats:
    """What packing made of some conversations: rows, real tokens, and the overlong ones (and their cut tokens)."""

    conversations: int = 0
    rows: int = 0
    tokens: int = 0           # tokens placed in rows
    truncated: int = 0        # conversations cut to seq_len
    truncated_tokens: int = 0  # tokens cut off them
    dropped: int = 0          # conversations left out
    dropped_tokens: int = 0

    def __add__(self, other: PackStats) -> PackStats:
        return PackStats(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def as_tuple(self) -> tuple[int, ...]:
        return (self.conversations, self.rows, self.tokens, self.truncated, self.truncated_tokens, self.dropped,
                self.dropped_tokens)


def check_overflow(overflow: str) -> str:
    if overflow not in OVERFLOWS:
        raise ValueError(f"overflow={overflow!r}: one of {OVERFLOWS}")
    return overflow


def _first_fit(sizes: np.ndarray, seq_len: int) -> np.ndarray:
    """The row of each item (sizes in placing order, each <= seq_len): the first row with room, else a new one.

    A max segment tree over the rows' free room finds the first row with room in O(log rows), so a
    window of thousands of conversations packs in milliseconds.
    """
    n = int(sizes.size)
    leaves = 1
    while leaves < max(1, n):
        leaves *= 2
    tree = [seq_len] * (2 * leaves)        # every row, opened or not, starts with seq_len free
    rows = [0] * n
    for i, size in enumerate(sizes.tolist()):
        node = 1
        while node < leaves:               # leftmost leaf with room >= size (an unopened row always has room)
            node = 2 * node if tree[2 * node] >= size else 2 * node + 1
        rows[i] = node - leaves
        tree[node] -= size
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return np.asarray(rows, dtype=np.int64)


def pack(lengths: np.ndarray, seq_len: int, overflow: str = "truncate") -> Packing:
    """First-fit decreasing of ``lengths`` (stream order) into rows of ``seq_len``; rows in the order they
    were opened, members of a row in stream order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    keep = np.flatnonzero((lengths > 0) & ((lengths <= seq_len) | (overflow == "truncate")))
    takes = np.minimum(lengths[keep], seq_len)
    order = keep[np.lexsort((keep, -takes))] if keep.size else keep   # longest first, ties by stream position
    placed = _first_fit(np.minimum(lengths[order], seq_len), seq_len)
    by_row = np.lexsort((order, placed))                               # rows, then stream order inside a row
    members = order[by_row]
    counts = np.bincount(placed, minlength=int(placed.max()) + 1 if placed.size else 0)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Packing(offsets, members, np.minimum(lengths[members], seq_len))


def stats(lengths: np.ndarray, seq_len: int, overflow: str = "truncate") -> PackStats:
    """``PackStats`` of one window (the rows counted by packing it)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    long = lengths > seq_len
    rows = pack(lengths, seq_len, overflow).rows
    cut = int((lengths[long] - seq_len).sum())
    if overflow == "truncate":
        return PackStats(int(lengths.size), rows, int(lengths.sum()) - cut, int(long.sum()), cut, 0, 0)
    return PackStats(int(lengths.size), rows, int(lengths[~long].sum()), 0, 0, int(long.sum()),
                     int(lengths[long].sum()))


def windows(docs_per_chunk: np.ndarray, window: int) -> np.ndarray:
    """Group a shard's chunks (file order) into packing windows of at least ``window`` conversations.

    Returns the chunk boundaries (``bounds[g]`` is window g's first chunk, last entry = chunk count).
    Consecutive chunks are added until the window holds ``window`` conversations; a last window with
    fewer than half of that joins the one before (so no window is small unless the shard is).  The
    grouping depends on the shard alone, never on the epoch: that keeps row counts fixed.
    """
    docs = np.asarray(docs_per_chunk, dtype=np.int64).tolist()
    bounds, held = [0], 0
    for c, n in enumerate(docs):
        held += n
        if held >= window:
            bounds.append(c + 1)
            held = 0
    if bounds[-1] != len(docs):
        if len(bounds) > 1 and held * 2 < window:
            bounds[-1] = len(docs)
        else:
            bounds.append(len(docs))
    return np.asarray(bounds, dtype=np.int64)
