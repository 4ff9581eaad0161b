"""Trained character spans -> trained token ranges.

A token is trained when its span overlaps a trained span: token ``[s, e)`` and span ``[a, b)`` with
``e > a`` and ``s < b``.  This is transformers' rule for ``return_assistant_tokens_mask`` (its loop over
the token offsets), empty spans included: an empty span strictly inside a token trains it.

Two ways to know a token's span.  The tokenizer's character offsets (``tokenizers`` gives them with every
encoding), or, faster, byte offsets summed from a per-id byte-length table (:class:`ByteLengths`) with
the spans moved to UTF-8 byte positions.  The table is used only when the ids' byte lengths add up to the
text's UTF-8 length; it is built only for byte-level BPE tokenizers whose offsets are not trimmed, where a
token's bytes are what its vocabulary string spells in the GPT-2 byte alphabet (an added token: its
content), and with no normalizer (one could move text without changing its length).  Both give the same answer: a token covers whole characters' worth of overlap in bytes exactly
when its character range overlaps (spans start and end on character boundaries).

Trained tokens are returned as ranges: an ``(k, 2)`` array of ``[start, end)`` token indices, sorted and
merged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shardprep.chat.render import Span

RANGE_DTYPE = np.uint32


def trained_token_ranges(token_spans: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Ranges of the tokens (rows ``[s, e)`` of ``token_spans``) that overlap a trained span."""
    n = len(token_spans)
    if not spans or n == 0:
        return np.zeros((0, 2), dtype=RANGE_DTYPE)
    bounds = np.asarray(spans, dtype=np.int64)
    # the first span that ends after the token starts; the token is trained when that span starts before it ends
    first = np.searchsorted(bounds[:, 1], token_spans[:, 0], side="right")
    inside = first < len(bounds)
    trained = np.zeros(n, dtype=bool)
    trained[inside] = bounds[first[inside], 0] < token_spans[inside, 1]
    return ranges_of(trained)


def ranges_of(mask: np.ndarray) -> np.ndarray:
    """``[start, end)`` index pairs of the runs of True in a boolean mask."""
    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return edges.reshape(-1, 2).astype(RANGE_DTYPE)


def mask_of(ranges: np.ndarray, length: int) -> np.ndarray:
    """The per-token 0/1 mask of ``ranges`` (for comparisons with transformers' ``assistant_masks``)."""
    mask = np.zeros(length, dtype=np.int8)
    for start, end in ranges:
        mask[start:end] = 1
    return mask


def byte_spans(text: str, spans: Sequence[Span]) -> list[Span]:
    """Character spans of ``text`` as UTF-8 byte spans."""
    if text.isascii():
        return list(spans)
    return [(len(text[:a].encode("utf-8")), len(text[:b].encode("utf-8"))) for a, b in spans]


def _gpt2_alphabet() -> frozenset[str]:
    """The 256 characters byte-level BPE spells bytes with (printable bytes as themselves, others shifted)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [256 + i for i in range(256 - len(kept))]
    return frozenset(chr(c) for c in kept + shifted)


class ByteLengths:
    """Each id's length in UTF-8 bytes (-1 where unknown), for byte-level BPE tokenizers."""

    def __init__(self, lengths: np.ndarray):
        self.lengths = lengths

    @classmethod
    def from_tokenizer_json(cls, spec: Mapping[str, Any]) -> ByteLengths | None:
        """The table of a parsed ``tokenizer.json``, or None when it is not byte-level BPE or may trim offsets."""
        model = spec.get("model") or {}
        if not _byte_level(spec) or not isinstance(model.get("vocab"), dict) or _trims_offsets(spec):
            return None
        vocab: dict[str, int] = model["vocab"]
        added = [t for t in spec.get("added_tokens") or [] if isinstance(t, dict)]
        size = 1 + max([*vocab.values(), *(int(e["id"]) for e in added)], default=-1)
        lengths = np.full(size, -1, dtype=np.int64)
        outside = re.compile("[^" + "".join(sorted(map(re.escape, _gpt2_alphabet()))) + "]")
        for token, index in vocab.items():
            if not outside.search(token):
                lengths[index] = len(token)
        for entry in added:
            lengths[int(entry["id"])] = len(str(entry["content"]).encode("utf-8"))
        return cls(lengths)

    def token_spans(self, ids: np.ndarray, text: str) -> np.ndarray | None:
        """Byte spans of the tokens, or None when the lengths do not spell ``text`` (use offsets then)."""
        if len(ids) and int(ids.max()) >= len(self.lengths):
            return None
        lengths = self.lengths[ids]
        ends = np.cumsum(lengths)
        if (len(ids) and int(lengths.min()) < 0) or (int(ends[-1]) if len(ids) else 0) != len(text.encode("utf-8")):
            return None
        return np.stack([ends - lengths, ends], axis=1)


def _byte_level(spec: Mapping[str, Any]) -> bool:
    model = spec.get("model") or {}
    decoder = spec.get("decoder") or {}
    kind = model.get("type", "BPE" if "merges" in model else None)
    normalizer = spec.get("normalizer")
    plain = normalizer is None or (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers"))
    return kind == "BPE" and decoder.get("type") == "ByteLevel" and not model.get("byte_fallback") and plain


def _trims_offsets(spec: Mapping[str, Any]) -> bool:
    post = spec.get("post_processor") or {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    return any(isinstance(step, dict) and step.get("trim_offsets") for step in steps)
