"""How the page and the figures write numbers for people (the JSON keeps them raw)."""

from __future__ import annotations

import math

from shardprep.units import human_bytes  # binary units, as df -h and Slurm use

__all__ = ["human_bytes", "count", "compact", "duration", "number", "rate", "chat_line"]


def count(n: float | None) -> str:
    """12345 -> '12,345'."""
    return "–" if n is None else f"{n:,.0f}"


def compact(n: float | None, _pos: object = None) -> str:
    """12_345_678 -> '12.3M' (axis ticks; also a matplotlib FuncFormatter)."""
    if n is None:
        return "–"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.0f}{unit}" if v >= 100 or v == int(v) else f"{v:.1f}{unit}"
    return f"{n:g}"


def duration(seconds: float | None) -> str:
    """90061 -> '1d 1h 01m', 75.2 -> '1m 15s', 3.2 -> '3.2 s'."""
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.3g} s"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m:02d}m"
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s"


def number(v: float | None, digits: int = 3) -> str:
    """A float with ``digits`` significant digits, thousands separated when large."""
    if v is None:
        return "–"
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def rate(tokens_per_s: float | None) -> str:
    """Tokens per second in the unit that reads best: 2.5e6 -> '2.5 Mtok/s', 251 -> '251 tok/s'."""
    if tokens_per_s is None:
        return "–"
    for div, unit in ((1e6, "Mtok/s"), (1e3, "ktok/s")):
        if tokens_per_s >= div:
            return f"{tokens_per_s / div:.3g} {unit}"
    return f"{tokens_per_s:.3g} tok/s"


def chat_line(chat: dict) -> str:
    """The report's chat block in one line, worded as ``inspect`` words a shard's."""
    share = "–" if chat["trained_share"] is None else f"{100 * chat['trained_share']:.1f}%"
    return (f"chat: {count(chat['conversations'])} conversations, {count(chat['trained_tokens'])} of "
            f"{count(chat['tokens'])} tokens trained ({share})")
