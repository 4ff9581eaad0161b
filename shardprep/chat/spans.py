"""The trained characters of a rendered conversation (issue 28's loss masks, in character space).

Modes: ``assistant`` (the default) trains what each assistant message produced and the end-of-turn marker
that closes it; ``last`` only that of the last assistant message; ``all`` every character.  Nothing of
system, user or tool messages is trained, nor the role headers around them.

*Templates with ``{% generation %}`` markers*: the trained characters are the generation spans, exactly
those transformers' ``return_assistant_tokens_mask`` uses; ``last`` keeps the last run of touching spans
(TRL's Phi-3 template closes the final turn with a separate span holding the EOS, right after the turn).

*Other templates* (the rule; docs/format.md states it):

1. Each assistant message's *region* is found as :mod:`shardprep.chat.attribution` defines it: the
   characters of the render that depend on the message's own strings.
2. A think block the template writes right before the region belongs to it: when the text before the
   region ends with ``<think>`` and whitespace, or with ``<think>``, whitespace, ``</think>`` and
   whitespace (an empty block, as Qwen3 writes before its final answer), the region starts at that
   ``<think>``.
3. *End-of-turn marker*: the template's ``eos_token``, and each of :data:`END_MARKERS` (``<|im_end|>``,
   ``<|end|>``, ``<|eot_id|>``, ``<|eom_id|>``, ``<end_of_turn>``, ``<|end_of_turn|>``, ``<|endoftext|>``,
   ``</s>``, ``<|return|>``, ``<|call|>``, ``<｜end▁of▁sentence｜>``, ``<|END_OF_TURN_TOKEN|>``, ``<|eot|>``)
   that occurs in the template's source.  The region is extended over the text that follows it up to the
   end of the first end-of-turn marker found before the next assistant region starts (or the render
   ends; the longer marker when two start at the same place); when there is none, it is not extended.  So Qwen3 trains ``<|im_end|>`` (not the newline after it), Phi-3 ``<|end|>``,
   DeepSeek-V3 ``<｜end▁of▁sentence｜>`` and, after tool calls, the closing tool-call markers before it.
   A message with no region trains nothing (the template wrote nothing that depends on it); in mode
   ``last``, when the last assistant message has no region, nothing is trained.

*Thinking off* (``thinking=False``): inside every trained span, each ``<think>`` ... ``</think>`` block and
the whitespace after it is not trained; a ``</think>`` with no ``<think>`` before it in the span stops
training from the span's start to after it (and its whitespace); a ``<think>`` never closed stops it to
the span's end.  With mode ``all`` this applies to the whole render.

A token is then trained when its characters overlap a trained span (:mod:`shardprep.chat.tokens`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardprep.chat.attribution import THINK_CLOSE, THINK_OPEN, assistant_regions
from shardprep.chat.render import Renderer, Span, Tools, prepare_messages
from shardprep.chat.template import ChatTemplate
from shardprep.errors import ConfigError

MODES = ("assistant", "last", "all")
END_MARKERS = ("<|im_end|>", "<|end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end_of_turn|>",
               "<|endoftext|>", "</s>", "<|return|>", "<|call|>", "<｜end▁of▁sentence｜>",
               "<|END_OF_TURN_TOKEN|>", "<|eot|>")
_THINK_BEFORE = re.compile(rf"{re.escape(THINK_OPEN)}\s*(?:{re.escape(THINK_CLOSE)}\s*)?\Z")
_THINK_BLOCK = re.compile(rf"{re.escape(THINK_OPEN)}.*?(?:{re.escape(THINK_CLOSE)}\s*|\Z)", re.S)
_CLOSE_AND_SPACE = re.compile(rf"{re.escape(THINK_CLOSE)}\s*")
_LOOK_BACK = 512


@dataclass(frozen=True)
class TrainedText:
    """A rendered conversation and its trained character spans (sorted, disjoint, not touching)."""

    text: str
    spans: list[Span]


def end_markers(template: ChatTemplate) -> tuple[str, ...]:
    """The end-of-turn markers of the rule: the eos token, then the known markers in the template."""
    found = [m for m in END_MARKERS if m in template.text]
    eos = template.eos_token
    return tuple([eos] + [m for m in found if m != eos]) if eos else tuple(found)


class SpanRule:
    """Mode and thinking, checked once; :meth:`apply` gives one conversation's trained text."""

    def __init__(self, renderer: Renderer, mode: str = "assistant", thinking: bool = True):
        if mode not in MODES:
            raise ConfigError(f"chat loss mode {mode!r} is not one of {', '.join(MODES)}")
        self.renderer = renderer
        self.mode = mode
        self.thinking = thinking
        self.markers = end_markers(renderer.template)

    def apply(self, messages: Sequence[Mapping[str, Any]], tools: Tools = None) -> TrainedText:
        """Render and find the trained spans; raises ChatTemplateError when the template refuses."""
        prepared = prepare_messages(messages)
        if self.mode == "all":
            text = self.renderer.render_prepared(prepared, tools)
            spans = [(0, len(text))] if text else []
        elif self.renderer.markers:
            rendered = self.renderer.render_tracked(prepared, tools)
            text, spans = rendered.text, merge(rendered.generation or [], keep_empty=True)
            if self.mode == "last":
                spans = spans[-1:]
        else:
            text = self.renderer.render_prepared(prepared, tools)
            spans = self._regions(prepared, text, tools)
        if not self.thinking:
            spans = cut_thinking(text, spans)
        return TrainedText(text, spans)

    def _regions(self, prepared: list[dict[str, Any]], text: str, tools: Tools) -> list[Span]:
        found = assistant_regions(self.renderer, prepared, text, tools)
        order = sorted(found)
        trained = []
        for j, index in enumerate(order):
            start, end = found[index]
            limit = found[order[j + 1]][0] if j + 1 < len(order) else len(text)
            trained.append((_think_start(text, start), self._turn_end(text, end, limit)))
        if self.mode == "last":
            last = max(i for i, m in enumerate(prepared) if m.get("role") == "assistant") if found else None
            trained = trained[-1:] if last in found else []
        return merge(trained)

    def _turn_end(self, text: str, end: int, limit: int) -> int:
        best: tuple[int, int] | None = None
        for marker in self.markers:
            at = text.find(marker, end, limit)
            if at >= 0 and (best is None or (at, -len(marker)) < (best[0], -best[1])):
                best = (at, len(marker))
        return end if best is None else best[0] + best[1]


def _think_start(text: str, start: int) -> int:
    window = max(0, start - _LOOK_BACK)
    found = _THINK_BEFORE.search(text, window, start)
    return found.start() if found else start


def merge(spans: Iterable[Span], keep_empty: bool = False) -> list[Span]:
    """Sorted, with overlapping or touching spans joined.  Empty spans are dropped unless ``keep_empty``:
    transformers trains a token that an empty generation span falls strictly inside, so for marker
    templates an empty span is kept (joined into a neighbour it touches, which trains the same tokens)."""
    out: list[Span] = []
    for start, end in sorted(s for s in spans if keep_empty or s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def cut_thinking(text: str, spans: Sequence[Span]) -> list[Span]:
    """``spans`` without their think blocks (see the module docstring)."""
    out: list[Span] = []
    for start, end in spans:
        cuts: list[Span] = []
        first_close, first_open = text.find(THINK_CLOSE, start, end), text.find(THINK_OPEN, start, end)
        pos = start
        if first_close >= 0 and (first_open < 0 or first_close < first_open):
            found = _CLOSE_AND_SPACE.match(text, first_close, end)
            pos = found.end() if found else first_close + len(THINK_CLOSE)
            cuts.append((start, pos))
        cuts += [m.span() for m in _THINK_BLOCK.finditer(text, pos, end)]
        out += _subtract(start, end, cuts)
    return merge(out)


def _subtract(start: int, end: int, cuts: Sequence[Span]) -> list[Span]:
    kept, pos = [], start
    for cut_start, cut_end in cuts:
        if cut_start > pos:
            kept.append((pos, cut_start))
        pos = max(pos, cut_end)
    if pos < end:
        kept.append((pos, end))
    return kept
