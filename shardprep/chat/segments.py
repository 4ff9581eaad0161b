"""Trained tokens from ids alone, by segments between added tokens: for tokenizers without a byte table.

A SentencePiece-style tokenizer (Phi-3's: a ``▁`` prepended to each piece of text, byte-fallback tokens)
has no per-id byte length that adds up to the text, so a fast backend's ids cannot be placed token by
token (:class:`shardprep.chat.tokens.ByteLengths`), and ``tokenizers``' offsets cost most of the encoding.
But ``tokenizers`` cuts the text at every added token (``<|assistant|>``, ``<|end|>``...) before anything
else, so the ids are the added tokens with, between them, the tokens of each *segment* of plain text.  A
chat template's turns start and end at its markers, which are added tokens: the trained spans' boundaries
then fall on segment boundaries, and a segment's tokens are all trained or all not.

The rule (the same answer as offsets, or no answer): each added token's characters are found in the text
in order (its content, with the whitespace its ``lstrip``/``rstrip`` flags absorb, as ``tokenizers``
matches it); every other token gets its whole segment's span.  When a trained span starts or ends strictly
inside a segment that holds tokens (its tokens' own offsets would decide), when the added tokens are not
found in order, or when a segment holds text but no token (or tokens but no text), there is no answer and
the caller uses offsets.  Used only for tokenizers whose added tokens are matched on the raw text
(``normalized`` false, no ``single_word``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardprep.chat.render import Span


@dataclass(frozen=True)
class _Added:
    content: str
    lstrip: bool
    rstrip: bool


class SegmentPlacer:
    """Places ids by the added tokens among them (see the module docstring)."""

    def __init__(self, added: Mapping[int, _Added]):
        self.added = dict(added)

    @classmethod
    def from_tokenizer_json(cls, spec: Mapping[str, Any]) -> SegmentPlacer | None:
        entries = [t for t in spec.get("added_tokens") or [] if isinstance(t, dict)]
        if not entries or any(t.get("normalized") or t.get("single_word") or not t.get("content") for t in entries):
            return None
        return cls({int(t["id"]): _Added(str(t["content"]), bool(t.get("lstrip")), bool(t.get("rstrip")))
                    for t in entries})

    def place(self, ids: np.ndarray, text: str, spans: Sequence[Span]) -> tuple[np.ndarray, list[Span]] | None:
        """(each token's character span, ``spans``) when the segments decide every token, else None."""
        found = self._spans(ids.tolist(), text)
        if found is None:
            return None
        token_spans, segments = found
        if segments.size and spans:
            bounds = np.array([b for span in spans for b in span], dtype=np.int64)
            inside = (segments[:, :1] < bounds[None, :]) & (bounds[None, :] < segments[:, 1:])
            if inside.any() or any(a == b for a, b in spans):     # an empty span: its token's offsets decide
                return None
        return token_spans, list(spans)

    def _spans(self, ids: list[int], text: str) -> tuple[np.ndarray, np.ndarray] | None:
        out = np.empty((len(ids), 2), dtype=np.int64)
        segments: list[tuple[int, int]] = []
        begin, first = 0, 0            # where the current segment starts, in characters and in tokens
        for i in range(len(ids) + 1):
            added = self.added.get(ids[i]) if i < len(ids) else None
            if i < len(ids) and added is None:
                continue
            if added is None:          # the end of the ids: the last segment runs to the end of the text
                start = end = len(text)
            else:
                at = text.find(added.content, begin)
                if at < 0:
                    return None
                start, end = at, at + len(added.content)
                while added.lstrip and start > begin and text[start - 1].isspace():
                    start -= 1
                while added.rstrip and end < len(text) and text[end].isspace():
                    end += 1
            if (first < i) != (begin < start):       # text without tokens, or tokens without text
                return None
            if first < i:
                out[first:i] = (begin, start)
                segments.append((begin, start))
            if i < len(ids):
                out[i] = (start, end)
            begin, first = end, i + 1
        return out, np.asarray(segments, dtype=np.int64).reshape(-1, 2)
