"""Which characters of a render each assistant message produced, for templates without generation markers.

The rule (docs/format.md takes it from here).  For an assistant message k, a *placeholder render* renders
the conversation again with every string leaf of message k (its content or its content parts' text, its
reasoning, its tool calls' names and arguments...) replaced by a placeholder, leaving the values under the
keys ``role`` and ``type`` as they are (templates branch on those) and null values absent as before.  The
placeholder is two characters of Unicode's supplementary private-use plane that occur nowhere in the real
render (``o_k`` and ``c_k``, the same pair for every leaf of message k).  A leaf that holds think tags
(``<think>``, ``</think>``) keeps the tags and its whitespace-only pieces: each other piece between them
becomes the placeholder (a leaf with no such piece gets one placeholder at its end), so a template that
splits reasoning from the answer takes the same branch for the placeholder as for the real text.

*Region of message k*: the characters of the real render that differ from its placeholder render: after
their longest common prefix and before their longest common suffix.  Because the placeholder's characters
occur nowhere in the real render, neither the prefix nor the suffix can reach into them, so the region
starts exactly where message k's first content-dependent character is and ends after its last.  A message
whose placeholder render equals the real render produced nothing that depends on it: it has no region.

To keep renders per conversation at two, every assistant message is replaced at once (each with its own
pair) and the real render is aligned against the text between the placeholder regions: that text must
occur in the real render in order, and the regions are kept only when the alignment is unique (the
leftmost and the rightmost placements agree).  Then each region equals the per-message one above.  When
it is not unique, or the all-at-once render fails or disorders the placeholders, the regions are computed
one message at a time, by the rule itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from shardprep.chat.render import ChatTemplateError, Renderer, Span, Tools

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK_SPLIT = re.compile(f"({re.escape(THINK_OPEN)}|{re.escape(THINK_CLOSE)})")
KEPT_KEYS = frozenset({"role", "type"})
_PRIVATE_FIRST = 0xF0000
_PRIVATE_LAST = 0xFFFFD


def assistant_regions(renderer: Renderer, prepared: list[dict[str, Any]], text: str,
                      tools: Tools = None) -> dict[int, Span]:
    """Message index -> its region in ``text`` (the real render of ``prepared``), for every assistant
    message that has one.  Raises ChatTemplateError when a placeholder render is refused."""
    indices = [i for i, m in enumerate(prepared) if m.get("role") == "assistant"]
    if not indices:
        return {}
    pairs = _placeholder_pairs(text, len(indices))
    regions = _all_at_once(renderer, prepared, text, indices, pairs, tools)
    if regions is None:
        regions = {}
        for i, pair in zip(indices, pairs):
            region = _one_message(renderer, prepared, text, i, pair, tools)
            if region is not None:
                regions[i] = region
    return regions


def _placeholder_pairs(text: str, count: int) -> list[tuple[str, str]]:
    """``count`` pairs of private-use characters, none of which occurs in ``text``."""
    used = {c for c in text if ord(c) >= _PRIVATE_FIRST} if text and max(text) >= chr(_PRIVATE_FIRST) else set()
    free = (chr(cp) for cp in range(_PRIVATE_FIRST, _PRIVATE_LAST + 1) if chr(cp) not in used)
    return [(next(free), next(free)) for _ in range(count)]


def substitute(value: Any, pair: tuple[str, str]) -> Any:
    """``value`` with every string leaf replaced by the placeholder (see the module docstring)."""
    if isinstance(value, str):
        return placeholder(value, pair)
    if isinstance(value, Mapping):
        return {key: item if key in KEPT_KEYS else substitute(item, pair) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute(item, pair) for item in value]
    return value


def placeholder(text: str, pair: tuple[str, str]) -> str:
    mark = pair[0] + pair[1]
    pieces = _THINK_SPLIT.split(text)
    if len(pieces) == 1:
        return mark
    out, placed = [], False
    for piece in pieces:
        if piece in (THINK_OPEN, THINK_CLOSE) or not piece.strip():
            out.append(piece)
        else:
            out.append(mark)
            placed = True
    return "".join(out) if placed else "".join(out) + mark


def _all_at_once(renderer: Renderer, prepared: list[dict[str, Any]], text: str, indices: list[int],
                 pairs: list[tuple[str, str]], tools: Tools = None) -> dict[int, Span] | None:
    replaced = list(prepared)
    for i, pair in zip(indices, pairs):
        replaced[i] = substitute(prepared[i], pair)
    try:
        other = renderer.render_prepared(replaced, tools)
    except ChatTemplateError:
        return None
    found = [(i, _extent(other, pair)) for i, pair in zip(indices, pairs)]
    present = [(i, extent) for i, extent in found if extent is not None]
    if not present:
        return {} if other == text else None
    cuts = [0]
    for _, (start, end) in present:
        if start < cuts[-1]:
            return None                     # placeholders out of order or interleaved
        cuts += [start, end]
    cuts.append(len(other))
    between = [other[cuts[j]:cuts[j + 1]] for j in range(0, len(cuts), 2)]
    left, right = _align_left(text, between), _align_right(text, between)
    if left is None or left != right:
        return None
    return {i: span for (i, _), span in zip(present, left)}


def _extent(text: str, pair: tuple[str, str]) -> Span | None:
    starts = [p for p in (text.find(pair[0]), text.find(pair[1])) if p >= 0]
    if not starts:
        return None
    return min(starts), max(text.rfind(pair[0]), text.rfind(pair[1])) + 1


def _align_left(text: str, between: Sequence[str]) -> list[Span] | None:
    """Regions with each separating text placed as early as it can be (None when it does not fit)."""
    first, last = between[0], between[-1]
    end = len(text) - len(last)
    if not text.startswith(first) or not text.endswith(last) or end < len(first):
        return None
    spans, pos = [], len(first)
    for sep in between[1:-1]:
        found = text.find(sep, pos, end)
        if found < 0:
            return None
        spans.append((pos, found))
        pos = found + len(sep)
    spans.append((pos, end))
    return spans


def _align_right(text: str, between: Sequence[str]) -> list[Span] | None:
    """Regions with each separating text placed as late as it can be (None when it does not fit)."""
    first, last = between[0], between[-1]
    start = len(first)
    if not text.startswith(first) or not text.endswith(last) or len(text) - len(last) < start:
        return None
    spans, pos = [], len(text) - len(last)
    for sep in reversed(between[1:-1]):
        found = text.rfind(sep, start, pos)
        if found < 0:
            return None
        spans.append((found + len(sep), pos))
        pos = found
    spans.append((start, pos))
    return spans[::-1]


def _one_message(renderer: Renderer, prepared: list[dict[str, Any]], text: str, index: int,
                 pair: tuple[str, str], tools: Tools = None) -> Span | None:
    replaced = list(prepared)
    replaced[index] = substitute(prepared[index], pair)
    try:
        other = renderer.render_prepared(replaced, tools)
    except ChatTemplateError as e:
        raise ChatTemplateError(f"{e.template_message} (rendering a placeholder for message {index})") from None
    if other == text:
        return None
    prefix = common_prefix(text, other)
    suffix = common_suffix(text[prefix:], other[prefix:])
    return prefix, len(text) - suffix


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search on slices: C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str, b: str) -> int:
    """Length of the longest common suffix."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:len(a) - lo] == b[len(b) - mid:len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo
