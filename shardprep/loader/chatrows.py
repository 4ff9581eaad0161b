"""How many packed rows a chat dataset has, per shard and per packing window, before any epoch starts.

Pack mode over chat data yields rows of whole conversations (``binpack``), so the number of rows is not
``tokens // seq_len``: it needs every conversation's length.  ``ChatRows`` reads them once per dataset:
every shard's sidecar (cached with the loader's other tables) and one small ranged read of each chunk's
document lengths (``shard.reader.read_doclens``: 2 or 4 bytes per conversation, none of the tokens),
then packs every window once to count its rows.  Because first-fit decreasing gives the same row count
whatever the order inside a window, these counts hold in every epoch: the stream, ``len(loader)``, the
state and a mixture's source epochs are sized from them exactly as from pretraining rows.

Cost: for a dataset of C chunks and N conversations, C small reads (sequential; local files take a few
milliseconds per thousand chunks, object stores one request each) and about 4 ms of packing per 1,000
conversations, on every rank, at construction.  DataLoader workers receive the counts with the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardprep.errors import InputDataError
from shardprep.loader.binpack import PackStats, stats, windows
from shardprep.loader.index import DatasetIndex
from shardprep.loader.layout import ConversationPacking
from shardprep.shard.reader import read_doclens
from shardprep.shard.sidecar import ChunkTable


@dataclass
class ChatRows:
    """A chat dataset's packed rows at ``seq_len``: windows (chunk bounds) and rows of every shard, and totals."""

    seq_len: int
    packing: ConversationPacking
    bounds: list[np.ndarray] = field(default_factory=list)         # per shard: window -> first chunk (+ end)
    window_rows: list[np.ndarray] = field(default_factory=list)    # per shard: rows of each window
    stats: PackStats = PackStats()

    @property
    def shard_rows(self) -> np.ndarray:
        return np.array([int(r.sum()) for r in self.window_rows], dtype=np.int64)

    @property
    def rows(self) -> int:
        return int(sum(int(r.sum()) for r in self.window_rows))

    def summary(self) -> dict:
        """The numbers a user checks: rows, real tokens, padding share, truncated and dropped conversations."""
        s = self.stats
        slots = s.rows * self.seq_len
        return {"seq_len": self.seq_len, "window": self.packing.window, "overflow": self.packing.overflow,
                "conversations": s.conversations, "rows": s.rows, "tokens": s.tokens,
                "efficiency": s.tokens / slots if slots else 0.0, "padding_share": 1 - s.tokens / slots if slots else 0.0,
                "truncated": s.truncated, "truncated_tokens": s.truncated_tokens, "dropped": s.dropped,
                "dropped_tokens": s.dropped_tokens}

    def identity(self) -> dict:
        """What the loader state records so a position is only resumed with the same rows."""
        return {"window": self.packing.window, "overflow": self.packing.overflow}


def chat_rows(index: DatasetIndex, seq_len: int, packing: ConversationPacking,
              tables: dict[int, ChunkTable]) -> ChatRows:
    """Size ``index`` (a chat dataset) at ``seq_len``; ``tables`` caches the sidecars it reads (the loader's own)."""
    out = ChatRows(seq_len, packing)
    for shard in range(len(index.shards)):
        table = tables.get(shard)
        if table is None:
            table = tables[shard] = index.chunk_table(shard)
        lens = _doclens(index, shard, table)
        bounds = windows(table.docs_array, packing.window)
        rows = []
        for w in range(len(bounds) - 1):
            st = stats(np.concatenate(lens[bounds[w]:bounds[w + 1]]), seq_len, packing.overflow)
            out.stats = out.stats + st
            rows.append(st.rows)
        out.bounds.append(bounds)
        out.window_rows.append(np.asarray(rows, dtype=np.int64))
    return out


def _doclens(index: DatasetIndex, shard: int, table: ChunkTable) -> list[np.ndarray]:
    """Every chunk's document lengths (one ranged read each), checked against the chunk table."""
    src = index.open(shard)
    try:
        lens = []
        for c in range(len(table)):
            chunk = table.chunk(c)
            try:
                got = read_doclens(src, chunk)
            except (EOFError, OSError, ValueError) as e:
                raise InputDataError(f"corrupt or truncated shard {index.location(index.shards[shard].name)}: "
                                     f"sample {chunk.key}: {e}", hint="run `shardprep verify`") from None
            if len(got) != chunk.docs or int(got.sum()) != chunk.tokens:
                raise InputDataError(f"corrupt shard {index.location(index.shards[shard].name)}: sample {chunk.key}: "
                                     f"{len(got)} document lengths summing to {int(got.sum())}, the sidecar says "
                                     f"{chunk.docs} documents of {chunk.tokens} tokens", hint="run `shardprep verify`")
            lens.append(got)
        return lens
    finally:
        src.close()
