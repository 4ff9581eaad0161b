"""Conversations -> token ids and trained token ranges, a batch at a time (issue 28's chat encoding).

One conversation's ids are exactly its rendering tokenized without special tokens added (what
``apply_chat_template(tokenize=True)`` returns: the template writes any BOS and EOS itself); its trained
ranges follow :mod:`shardprep.chat.spans` and :mod:`shardprep.chat.tokens`.  A conversation the template
refuses comes back as its :class:`ChatTemplateError` in its place, so one bad record never fails a batch.

The ids come from ``tokenizers`` (the reference), or from a faster backend given as ``ids_backend`` (one
with ``encode_batch(texts) -> (flat ids, lengths)``, like ``tokenizer/backend.py``'s: opened with special
tokens allowed, since the template's markers must be matched as tokens).  Its ids are taken as they are
(checking a fast backend against ``hf`` is the task's policy) and placed with the byte-length table; a
conversation the table cannot place is encoded again with ``tokenizers`` and its offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson
from tokenizers import Encoding, Tokenizer

from shardprep.chat.render import ChatTemplateError, Renderer, Span, Tools
from shardprep.chat.segments import SegmentPlacer
from shardprep.chat.spans import SpanRule, TrainedText
from shardprep.chat.template import ChatTemplate
from shardprep.chat.tokens import ByteLengths, byte_spans, trained_token_ranges
from shardprep.tokenizer.parsed import ParsedCache

ID_DTYPE = np.uint32


@dataclass(frozen=True)
class EncodedConversation:
    """One conversation's ids and its trained tokens as ``[start, end)`` index pairs (shape ``(k, 2)``)."""

    ids: np.ndarray
    trained: np.ndarray

    @property
    def trained_tokens(self) -> int:
        return int((self.trained[:, 1].astype(np.int64) - self.trained[:, 0]).sum()) if len(self.trained) else 0


class IdsBackend(Protocol):
    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat uint32 ids, lengths), no special tokens added."""
        ...


# The placement tables of the last few tokenizers, by their JSON: building them parses the whole
# vocabulary in Python (~0.2 s for 128k ids), once per process for a tokenizer (tokenizer.parsed).
_TABLES: ParsedCache[tuple[ByteLengths | None, SegmentPlacer | None]] = ParsedCache()


def placement_tables(tokenizer_json: str) -> tuple[ByteLengths | None, SegmentPlacer | None]:
    """``(byte-length table, None)`` for a byte-level BPE; else ``(None, the segment placer)`` where
    added tokens allow one (SentencePiece-style); else ``(None, None)``: ids need offsets."""

    def build() -> tuple[ByteLengths | None, SegmentPlacer | None]:
        spec = orjson.loads(tokenizer_json)
        lengths = ByteLengths.from_tokenizer_json(spec)
        return lengths, None if lengths else SegmentPlacer.from_tokenizer_json(spec)

    return _TABLES.get(tokenizer_json, build)


class ChatEncoder:
    """Render, tokenize and mask conversations with one tokenizer and one template.

    ``mode``: ``assistant`` | ``last`` | ``all``; ``thinking``: whether think blocks are trained;
    ``template_kwargs``: extra template variables (``enable_thinking``...), as apply_chat_template's kwargs.
    ``tokenizer`` is taken over: special tokens in the text are matched (``encode_special_tokens`` off, as
    transformers encodes a render), no truncation, no padding.  ``byte_lengths``: True builds the table
    from the tokenizer, False never uses one.
    """

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate, mode: str = "assistant",
                 thinking: bool = True, template_kwargs: Mapping[str, Any] | None = None,
                 byte_lengths: ByteLengths | None | bool = True, ids_backend: IdsBackend | None = None,
                 tokenizer_json: str | None = None):
        tokenizer.encode_special_tokens = False
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.renderer = Renderer(template, template_kwargs)
        self.rule = SpanRule(self.renderer, mode, thinking)
        self.segments: SegmentPlacer | None = None
        if byte_lengths is True:    # tokenizer_json: what the tokenizer was parsed from, when the caller has it
            byte_lengths, self.segments = placement_tables(tokenizer_json or tokenizer.to_str())
        self.byte_lengths: ByteLengths | None = byte_lengths if isinstance(byte_lengths, ByteLengths) else None
        self.ids_backend = ids_backend if self.placeable else None

    @property
    def placeable(self) -> bool:
        """Whether ids alone (a fast backend's, or ``tokenizers``' without offsets) can be placed."""
        return self.byte_lengths is not None or self.segments is not None

    def trained_text(self, messages: Sequence[Mapping[str, Any]], tools: Tools = None) -> TrainedText:
        """The rendered text and its trained character spans (raises ChatTemplateError)."""
        return self.rule.apply(messages, tools)

    def encode(self, conversations: Sequence[Sequence[Mapping[str, Any]]],
               tools: Sequence[Tools] | None = None) -> list[EncodedConversation | ChatTemplateError]:
        """One result per conversation, in order: its encoding, or the template's refusal.  ``tools``:
        each conversation's tool schemas (or None), when the records carry them."""
        results: list[EncodedConversation | ChatTemplateError] = []
        done: list[tuple[int, TrainedText]] = []
        for j, messages in enumerate(conversations):
            try:
                done.append((len(results), self.rule.apply(messages, tools[j] if tools is not None else None)))
                results.append(_PENDING)
            except ChatTemplateError as e:
                results.append(e)
        texts = [trained.text for _, trained in done]
        for (slot, trained), ids in zip(done, self._ids(texts)):
            results[slot] = self._encoded(trained, ids)
        return results

    def _ids(self, texts: list[str]) -> list[np.ndarray | Encoding]:
        """Ids alone when they can be placed (no offsets to build), else full encodings."""
        if not self.placeable:
            return list(self.tokenizer.encode_batch(texts, add_special_tokens=False))
        if self.ids_backend is not None:
            flat, lengths = self.ids_backend.encode_batch(texts)
            ends = np.cumsum(lengths)
            return [np.asarray(flat[end - n:end], dtype=ID_DTYPE) for end, n in zip(ends.tolist(), lengths.tolist())]
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)  # no offsets: faster
        fast = encode(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=ID_DTYPE) for e in fast]

    def _encoded(self, trained: TrainedText, ids: np.ndarray | Encoding) -> EncodedConversation:
        if isinstance(ids, np.ndarray):
            placed = self._place(ids, trained)
            if placed is not None:
                return EncodedConversation(ids, trained_token_ranges(*placed))
            ids = self.tokenizer.encode(trained.text, add_special_tokens=False)
        offsets = np.asarray(ids.offsets, dtype=np.int64).reshape(-1, 2)
        return EncodedConversation(np.asarray(ids.ids, dtype=ID_DTYPE), trained_token_ranges(offsets, trained.spans))


    def _place(self, ids: np.ndarray, trained: TrainedText) -> tuple[np.ndarray, list[Span]] | None:
        """(token spans, trained spans) in one unit, from ids alone; None: offsets decide."""
        if self.byte_lengths is not None:
            spans = self.byte_lengths.token_spans(ids, trained.text)
            return None if spans is None else (spans, byte_spans(trained.text, trained.spans))
        return self.segments.place(ids, trained.text, trained.spans) if self.segments is not None else None


_PENDING = ChatTemplateError("(internal: not yet encoded)")
