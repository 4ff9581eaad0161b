"""Chat (format 2) and pretraining (format 1) datasets for the loader tests, written without the CLI.

Shards come from ``ShardWriter`` (``chat=True`` with trained ranges), sidecars and index.json are shaped
as ``job.task.build_sidecar`` and ``job.finalize.build_index`` shape them (no job.json: the loader then
holds the index to its own contract only).  Token ids are random; every conversation's trained ranges
too, so a test can rebuild the expected labels of any conversation from ``ChatCorpus``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardprep.shard.format import format_version, shard_name
from shardprep.shard.index import Index, IndexShard, IndexTokenizer, IndexTotals
from shardprep.shard.sidecar import Sidecar
from shardprep.shard.trained import Trained
from shardprep.shard.writer import ShardWriter
from shardprep.storage.atomic import write_json_atomic

VOCAB = 1000
EOS = 0


@dataclass
class Conversation:
    ids: np.ndarray         # int64 token ids
    trained: np.ndarray     # bool per token

    @property
    def length(self) -> int:
        return int(self.ids.size)


@dataclass
class ChatCorpus:
    """What was written: per shard, its conversations in file order (global doc id = position in ``all``)."""

    root: Path
    shards: list[list[Conversation]]

    @property
    def all(self) -> list[Conversation]:
        return [c for s in self.shards for c in s]


def _ranges(rng: np.random.Generator, n: int) -> np.ndarray:
    """A few disjoint, non-touching trained ranges inside a conversation of ``n`` tokens (maybe none)."""
    cuts = np.sort(rng.choice(np.arange(1, n + 1), size=2 * min(n // 2, int(rng.integers(0, 4))), replace=False))
    pairs = cuts.reshape(-1, 2)
    keep = [(int(a), int(b)) for a, b in pairs if b > a]
    merged: list[tuple[int, int]] = []
    for a, b in keep:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return np.array(merged, dtype=np.int64).reshape(-1, 2)


def conversations(rng: np.random.Generator, lengths: list[int]) -> list[Conversation]:
    out = []
    for n in lengths:
        ranges = _ranges(rng, n)
        mask = np.zeros(n, dtype=bool)
        for a, b in ranges.tolist():
            mask[a:b] = True
        out.append(Conversation(rng.integers(1, VOCAB, size=n), mask))
    return out


def _tokenizer() -> IndexTokenizer:
    return IndexTokenizer("test-tokenizer", VOCAB, "uint16", EOS, None, None, "<eos>", None, None, False, False)


def write_dataset(root: Path, shards: list[list[Conversation]], *, chunk_tokens: int, chat: bool = True,
                  plan: str = "chat-plan") -> ChatCorpus:
    """Write ``shards`` (conversations per shard) as a finalized output; ``chat=False``: pretraining data."""
    root.mkdir(parents=True, exist_ok=True)
    entries, totals, trained_total = [], [0, 0, 0, 0], 0
    for t, convs in enumerate(shards):
        name = shard_name(t)
        writer = ShardWriter(root / name, task=t, layout="pack", dtype="uint16", chunk_tokens=chunk_tokens, chat=chat)
        lengths = np.array([c.length for c in convs], dtype=np.int64)
        ranges = [_mask_ranges(c.trained) for c in convs]
        trained = Trained(np.array([len(r) for r in ranges], dtype=np.int64),
                          np.concatenate(ranges) if ranges else np.zeros((0, 2), dtype=np.int64)) if chat else None
        writer.add(np.concatenate([c.ids for c in convs]), lengths, trained)
        result = writer.close()
        side = Sidecar.holding(result, format_version=format_version(chat, origins=False), created_by="tests", task=t, shard=name,
                               plan_fingerprint=plan, tokenizer_fingerprint="tok", layout="pack", dtype="uint16",
                               chunks=result.chunks, trained_tokens=writer.trained_tokens if chat else None)
        write_json_atomic(root / name.replace(".tar", ".json"), side.to_dict())
        entries.append(IndexShard.holding(side, name=name, sidecar=name.replace(".tar", ".json")))
        totals = [totals[0] + side.samples, totals[1] + side.documents, totals[2] + side.tokens,
                  totals[3] + side.bytes]
        trained_total += writer.trained_tokens
    index = Index(format_version=format_version(chat, origins=False), created_by="tests", plan_fingerprint=plan,
                  tokenizer_fingerprint="tok", tokenizer=_tokenizer(), layout="pack", dtype="uint16",
                  shards=tuple(entries), totals=IndexTotals(len(entries), totals[0], totals[1], totals[2], totals[3],
                                                            {}, trained_total if chat else None))
    write_json_atomic(root / "index.json", index.to_dict())
    return ChatCorpus(root, shards)


def _mask_ranges(mask: np.ndarray) -> np.ndarray:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return edges.reshape(-1, 2).astype(np.int64)


def lognormal_lengths(rng: np.random.Generator, n: int, *, median: int = 500, lo: int = 50, hi: int = 4000) -> list[int]:
    """A realistic mix of conversation lengths: lognormal around ``median``, clipped to ``[lo, hi]``."""
    return np.clip(rng.lognormal(np.log(median), 1.0, n).astype(np.int64), lo, hi).tolist()


def chat_corpus(root: Path, lengths_per_shard: list[list[int]], *, seed: int = 0, chunk_tokens: int = 2000,
                chat: bool = True, plan: str = "chat-plan") -> ChatCorpus:
    rng = np.random.default_rng(seed)
    return write_dataset(root, [conversations(rng, lens) for lens in lengths_per_shard], chunk_tokens=chunk_tokens,
                         chat=chat, plan=plan)
