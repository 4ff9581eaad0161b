"""The frozen tokenizer: what kind it is, and a few documents decoded with it.

Decoding uses ``OUTPUT/tokenizer.json``, the exact tokenizer every task loaded, so what the page shows is
what the ids mean (never a hub download or the source the plan named).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np
import orjson

from shardprep.report.collect import Output, Sidecar
from shardprep.shard.index import IndexTokenizer
from shardprep.shard.reader import read_chunk, split_docs
from shardprep.storage.locations import join, open_source
from shardprep.tokenizer.parsed import shared_tokenizer

EDGE_TOKENS = 48       # tokens decoded at each end of a sample document
EDGE_IDS = 12          # raw ids listed at each end


def _component(spec: Any) -> str | None:
    """``{"type": "Sequence", "pretokenizers": [{"type": "Split"}, ...]}`` -> ``"Sequence[Split, ...]"``."""
    if not isinstance(spec, dict):
        return None
    name = spec.get("type") or "?"
    inner = next((v for k, v in spec.items() if isinstance(v, list) and v and isinstance(v[0], dict)), None)
    return f"{name}[{', '.join(_component(s) or '?' for s in inner)}]" if inner else name


def family(model: str, pre_tokenizer: str | None, decoder: str | None, byte_fallback: bool) -> str:
    """A plain name for the kind of tokenizer (what a person would call it)."""
    if model == "BPE":
        if "ByteLevel" in f"{pre_tokenizer} {decoder}":
            return "byte-level BPE"
        return "SentencePiece-style BPE with byte fallback" if byte_fallback else "BPE"
    if model == "Unigram":
        return "Unigram (SentencePiece)"
    return model


@dataclass(frozen=True)
class TokenizerBlock(IndexTokenizer):
    """The report's tokenizer (its numbers' ``tokenizer``): the plan's record, then what the frozen
    tokenizer.json says about itself (all None without one)."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "source", "vocab_size", "dtype", "eos_token", "eos_id", "bos_token", "bos_id", "pad_token", "pad_id",
        "add_eos", "add_bos", "model", "family", "pre_tokenizer", "normalizer", "decoder", "byte_fallback",
        "added_tokens")

    model: str | None = None
    family: str | None = None
    pre_tokenizer: str | None = None
    normalizer: str | None = None
    decoder: str | None = None
    byte_fallback: bool | None = None
    added_tokens: int | None = None


def describe_tokenizer(record: IndexTokenizer, tokenizer_json: str | None) -> TokenizerBlock:
    """The plan's tokenizer record plus what the frozen tokenizer.json says about itself."""
    plan = TokenizerBlock(**{f.name: getattr(record, f.name) for f in fields(record)})
    if tokenizer_json is None:
        return plan
    spec = orjson.loads(tokenizer_json)
    # the parsed model's class: infers legacy files without "type"
    model = type(shared_tokenizer(tokenizer_json, match_specials=False).model).__name__
    byte_fallback = bool((spec.get("model") or {}).get("byte_fallback"))
    pre_tokenizer, decoder = _component(spec.get("pre_tokenizer")), _component(spec.get("decoder"))
    return replace(plan, model=model, family=family(model, pre_tokenizer, decoder, byte_fallback),
                   pre_tokenizer=pre_tokenizer, normalizer=_component(spec.get("normalizer")), decoder=decoder,
                   byte_fallback=byte_fallback, added_tokens=len(spec.get("added_tokens") or []))


@dataclass(frozen=True)
class SampleDoc:
    shard: str
    document: int            # index of the document within its shard
    ids: np.ndarray


def _doc_at(out: Output, side: Sidecar, doc: int) -> np.ndarray:
    """Document ``doc`` of one shard: one chunk read through the sidecar's chunk table."""
    chunk = int(np.searchsorted(side.chunks.doc_start, doc, side="right") - 1)
    src = open_source(join(out.location, side.shard), storage=out.storage)
    try:
        tokens, lens = read_chunk(src, side.chunks.chunk(chunk), out.dtype)
    finally:
        src.close()
    return split_docs(tokens, lens)[doc - int(side.chunks.doc_start[chunk])]


def sample_documents(out: Output) -> list[SampleDoc]:
    """The first document of the first shard, the middle one of the middle shard, the last of the last."""
    done = [s for s in out.done if s.documents]
    if not done:
        return []
    middle = done[len(done) // 2]
    picks = [(done[0], 0), (middle, middle.documents // 2), (done[-1], done[-1].documents - 1)]
    seen: set[tuple[str, int]] = set()
    docs = []
    for side, doc in picks:
        if (side.shard, doc) not in seen:
            seen.add((side.shard, doc))
            docs.append(SampleDoc(side.shard, doc, _doc_at(out, side, doc)))
    return docs


def decode_samples(docs: list[SampleDoc], tokenizer_json: str | None) -> list[dict]:
    """First and last tokens of each document, decoded (special tokens kept visible)."""
    tok = None
    if tokenizer_json is not None:
        tok = shared_tokenizer(tokenizer_json, match_specials=False)

    def text(ids: np.ndarray) -> str | None:
        return tok.decode(ids.tolist(), skip_special_tokens=False) if tok is not None else None

    out = []
    for d in docs:
        whole = d.ids.size <= 2 * EDGE_TOKENS
        out.append({
            "shard": d.shard, "document": d.document, "tokens": int(d.ids.size),
            "first_ids": d.ids[:EDGE_IDS].tolist(), "last_ids": d.ids[-EDGE_IDS:].tolist(),
            "head": text(d.ids if whole else d.ids[:EDGE_TOKENS]),
            "tail": None if whole else text(d.ids[-EDGE_TOKENS:]),
        })
    return out
