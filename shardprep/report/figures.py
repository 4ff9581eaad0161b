"""The report's figures, drawn with matplotlib from the numbers dict only (never from the files).

Each figure is rendered twice: SVG for the page (text kept as text, so it stays sharp and searchable)
and PNG for people who paste pictures into chats.  Dense series (thousands of shards or tasks) are
rasterized inside the SVG so a 10,000-shard page stays small; axes and labels stay vector.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

from shardprep._extras import require
from shardprep.report.fmt import compact, count, duration, human_bytes

WIDTH, HEIGHT, PNG_DPI = 10.0, 3.6, 120
BARS = 80               # up to this many bars are drawn as bars (one patch each: ~3 ms apiece)
RASTER = 2000           # more points than this are rasterized inside the SVG (keeps the page small)
COLORS = ("#3b6fb6", "#e07b39", "#3a9a5b", "#b8475a", "#7a5bb0", "#8c8c8c")


@dataclass(frozen=True)
class Figure:
    name: str        # file name part: report-<name>.png
    title: str
    caption: str
    svg: str         # a bare <svg> element, ready to inline
    png: bytes


def _pyplot() -> Any:
    matplotlib = require("matplotlib", feature="`shardprep report` without --json")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.fonttype": "none", "font.size": 10, "axes.titlesize": 11, "axes.spines.top": False,
        "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
        "axes.axisbelow": True, "legend.frameon": False, "figure.dpi": 100,
    })
    return plt


def _render(plt: Any, fig: Any, name: str, title: str, caption: str) -> Figure:
    plt.rcParams["svg.hashsalt"] = name          # ids unique across the figures inlined in one page
    fig.tight_layout()
    svg_buf, png_buf = io.StringIO(), io.BytesIO()
    fig.savefig(svg_buf, format="svg", metadata={"Date": None})
    fig.savefig(png_buf, format="png", dpi=PNG_DPI, metadata={"Software": None})
    plt.close(fig)
    svg = svg_buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # Scale with the page: drop the fixed size in points, keep the viewBox.
    svg = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 class="figure" role="img" '
                 rf'aria-label="{title}"', svg, count=1)
    return Figure(name, title, caption, svg, png_buf.getvalue())


def _legend_above(ax: Any, **kw: Any) -> None:
    """Legend on the title's line, right-aligned, so it never covers data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=len(handles), borderaxespad=0.2,
                  handlelength=1.6, columnspacing=1.2, **kw)


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _index_axis(axis: Any, set_lim: Any, lo: int, hi: int) -> None:
    """An axis of whole numbers ``lo``..``hi`` (shard ranks, task ids): half a step of margin each side and
    ticks on whole numbers only, so a 1-task job shows one tick at its id (not 0.30-1.65, or -0.4-0.4)."""
    set_lim(lo - 0.5, hi + 0.5)
    if hi - lo < 10:
        axis.set_ticks(range(lo, hi + 1))
    else:
        _integer_ticks(axis)


def _doc_lengths(plt: Any, n: dict) -> Figure | None:
    d = n["doc_lengths"]
    hist = d["histogram"]
    if not hist["counts"]:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    edges = [max(e, 0.8) for e in hist["edges"]]    # a 0 edge cannot sit on a log axis
    ax.stairs(hist["counts"], edges, fill=True, color=COLORS[0], alpha=0.85)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(compact))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(compact))
    for key, style in (("median", "-"), ("p90", "--"), ("p99", ":")):
        ax.axvline(d[key], color="#222", linestyle=style, linewidth=1.1, label=f"{key} {count(d[key])}")
    one, many = ("conversation", "conversations") if "chat" in n else ("document", "documents")
    ax.set_xlabel(f"tokens per {one} (log scale, BOS/EOS included)")
    ax.set_ylabel(many)
    ax.legend(loc="upper right", frameon=True, framealpha=0.9, edgecolor="none")   # the tail is low there
    sampled = f"all {many}" if d["exact"] else \
        f"sample: {count(d['documents'])} {many} from {count(d['chunks_read'])} of {count(d['chunks_total'])} chunks"
    title = f"{one.capitalize()} lengths"
    ax.set_title(f"{title} ({sampled})", loc="left")
    return _render(plt, fig, "doc-lengths", title, sampled)


def _shard_tokens(plt: Any, n: dict) -> Figure | None:
    s = n["shards"]
    tokens = sorted((r["tokens"] for r in s["per_shard"]), reverse=True)
    if not tokens:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    x = range(1, len(tokens) + 1)
    if len(tokens) <= BARS:
        ax.bar(x, tokens, width=0.85 if len(tokens) > 1 else 0.5, color=COLORS[0])
    else:
        ax.fill_between(x, tokens, step="mid", color=COLORS[0], alpha=0.85, rasterized=len(tokens) > RASTER)
    if s["target_tokens"]:
        chosen = ("--target-task-bytes " if s["target_rule"] == "target" else "auto sizing: ") + \
            f"{human_bytes(s['target_task_bytes'])} of input per task"
        ax.axhline(s["target_tokens"], color=COLORS[3], linestyle="--", linewidth=1.4,
                   label=f"target ≈ {compact(s['target_tokens'])} tokens ({chosen})")
    ax.axhline(s["tokens"]["mean"], color="#222", linestyle=":", linewidth=1.2,
               label=f"mean {compact(s['tokens']['mean'])}")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(compact))
    _index_axis(ax.xaxis, ax.set_xlim, 1, len(tokens))
    ax.set_xlabel(f"shards, largest first ({count(len(tokens))})")
    ax.set_ylabel("tokens")
    ax.set_ylim(0, max(tokens[0], s["target_tokens"] or 0) * 1.08)
    _legend_above(ax)
    title = "Tokens per shard"
    ax.set_title(f"{title} (largest / mean = {s['max_over_mean']:.2f})", loc="left")
    return _render(plt, fig, "shard-tokens", title, "sorted largest first, with the target and the mean")


def _tasks(plt: Any, n: dict) -> Figure | None:
    rows = [r for r in n["tasks"]["per_task"] if r["elapsed_s"] is not None]
    if not rows:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(WIDTH, HEIGHT * 1.5), sharex=True)
    backends = sorted({r["backend"] or "?" for r in rows})
    dense = len(rows) > BARS
    for i, name in enumerate(backends):
        mine = [r for r in rows if (r["backend"] or "?") == name]
        x = [r["task"] for r in mine]
        color = COLORS[i % len(COLORS)]
        for ax, key in ((top, "mtok_per_s"), (bottom, "elapsed_s")):
            y = [r[key] or 0 for r in mine]
            if dense:   # one point per task: a patch per bar costs ~3 ms each and hides the spread
                ax.scatter(x, y, s=5, color=color, label=name, alpha=0.7, linewidths=0,
                           rasterized=len(rows) > RASTER)
            else:
                ax.bar(x, y, width=0.8, color=color, label=name)
    top.set_ylim(bottom=0)
    bottom.set_ylim(bottom=0)
    top.set_ylabel("Mtok/s")
    top.set_title("Throughput per task (Mtok/s, from the sidecars)", loc="left")
    _legend_above(top, title=None)
    bottom.set_ylabel("seconds")
    bottom.set_title("Duration per task", loc="left")
    bottom.set_xlabel("task")
    _index_axis(bottom.xaxis, bottom.set_xlim, min(r["task"] for r in rows), max(r["task"] for r in rows))
    return _render(plt, fig, "tasks", "Tasks: throughput and duration", "per task, coloured by backend")


def _timeline(plt: Any, n: dict) -> Figure | None:
    rows = [r for r in n["tasks"]["per_task"] if r["started"] is not None]
    t0 = n["progress"]["started_at"]
    if not rows or t0 is None:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    colors = {"done": COLORS[0], "running": COLORS[1], "failed": COLORS[3], "missing": COLORS[5]}
    for status, color in colors.items():
        mine = [r for r in rows if r["status"] == status]
        if not mine:
            continue
        ends = [(r["ended"] if r["ended"] is not None else n["generated_at"]) - t0 for r in mine]
        ax.hlines([r["task"] for r in mine], [r["started"] - t0 for r in mine], ends, color=color,
                  linewidth=max(0.5, min(6.0, 240 / len(rows))), label=status, rasterized=len(rows) > RASTER)
    ax.set_xlabel("seconds since the first task started")
    ax.set_ylabel("task")
    _index_axis(ax.yaxis, ax.set_ylim, min(r["task"] for r in rows), max(r["task"] for r in rows))
    ax.invert_yaxis()
    _legend_above(ax)
    elapsed = n["progress"]["elapsed_s"]
    ax.set_title(f"Task timeline (from logs/; wall time {duration(elapsed)})", loc="left")
    return _render(plt, fig, "timeline", "Task timeline", "last attempt of each task, from its log")


def draw_figures(numbers: dict) -> list[Figure]:
    """Every figure the numbers allow (a job with no finished task has none of the per-shard ones)."""
    plt = _pyplot()
    drawn = (f(plt, numbers) for f in (_doc_lengths, _shard_tokens, _tasks, _timeline))
    return [f for f in drawn if f is not None]
