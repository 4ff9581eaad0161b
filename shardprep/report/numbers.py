"""The report's numbers: one plain dict that ``--json`` prints and the page and figures only render.

Keeping every number here (and nothing computed in ``html`` or ``figures``) is what lets a test compare
each number on the page with the same number computed independently from the output's files.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from shardprep.executor.slurm.state import as_json
from shardprep.job.progress import activity, estimate
from shardprep.job.state import format_array_ranges
from shardprep.report.collect import Output, Task
from shardprep.report.doclens import DocLengths
from shardprep.report.tokenizer import TokenizerBlock

REPORT_VERSION = 1
HIST_BINS = 40            # log-spaced bins of the document-length histogram
SKIP_EXAMPLES = 20        # first skipped documents listed (in task order)


def _stats(values: Any) -> dict[str, float | None]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"min": None, "max": None, "mean": None, "median": None}
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()), "median": float(np.median(a))}


def log_bin_edges(min_len: int, max_len: int, bins: int = HIST_BINS) -> np.ndarray:
    """Integer bin edges spaced evenly on a log scale from ``min_len`` to ``max_len + 1`` (0 gets its own bin)."""
    lo = max(1, min_len)
    edges = np.unique(np.round(np.geomspace(lo, max(lo + 1, max_len + 1), bins + 1)).astype(np.int64))
    return np.concatenate([[0], edges]) if min_len < 1 else edges


def doc_length_numbers(d: DocLengths) -> dict:
    lengths = d.lengths
    out: dict = {"exact": d.exact, "documents": int(lengths.size), "documents_total": d.documents_total,
                 "chunks_read": d.chunks_read, "chunks_total": d.chunks_total}
    if lengths.size == 0:
        return {**out, **_stats(lengths), "p90": None, "p99": None, "histogram": {"edges": [], "counts": []}}
    p90, p99 = np.percentile(lengths, [90, 99])
    edges = log_bin_edges(int(lengths.min()), int(lengths.max()))
    counts, _ = np.histogram(lengths, bins=edges)
    return {**out, **_stats(lengths), "p90": float(p90), "p99": float(p99),
            "histogram": {"edges": edges.tolist(), "counts": counts.tolist()}}


def totals(out: Output) -> dict:
    done = out.done
    t = {k: sum(getattr(s, k) for s in done) for k in ("samples", "documents", "tokens", "bytes")}
    t["shards"] = len(done)
    t["skipped"] = sum(sum(s.skipped.values()) for s in done)
    t["bytes_per_token"] = t["bytes"] / t["tokens"] if t["tokens"] else None
    return t


def progress(out: Output, now: float) -> dict:
    """Done/missing and failed tasks, and ``job.progress``'s estimate (the one ``status`` shows): work
    done, wall time so far, throughput so far and the whole job's ETA."""
    missing = [t for t in out.tasks if t.sidecar is None]
    done = {t.task: t.sidecar for t in out.tasks if t.sidecar is not None}
    planned = [0] * (max((t.task for t in out.tasks), default=-1) + 1)
    for t in out.tasks:
        planned[t.task] = t.planned_bytes
    running, pending = activity(done, out.logs, out.slurm)
    est = estimate(len(out.tasks), planned, done, out.logs, now, running=running, pending=pending)
    not_done_logs = sorted((out.logs[t.task] for t in missing if t.task in out.logs), key=lambda lg: lg.task)
    return {
        **est.to_dict(), "missing": len(missing), "missing_ranges": format_array_ranges([t.task for t in missing]),
        "problems": dict(Counter(t.problem for t in missing if t.problem)),
        "failed": [{"task": lg.task, "reason": lg.reason} for lg in not_done_logs if lg.status == "failed"],
        "slurm": as_json(out.slurm) if out.slurm else None,
    }


def shard_numbers(out: Output) -> dict:
    """Tokens per shard, and the target a shard was planned to reach (from ``--target-task-bytes``)."""
    done = out.done
    tokens = [s.tokens for s in done]
    target = None
    if out.target_task_bytes:
        done_work = sum(t.planned_bytes for t in out.tasks if t.sidecar is not None)
        target = out.target_task_bytes * sum(tokens) / done_work if done_work else None
    stats = _stats(tokens)
    top, mean = stats["max"], stats["mean"]
    return {
        "count": len(done), "tokens": stats, "target_tokens": target,
        "target_task_bytes": out.target_task_bytes, "target_rule": out.sizing_rule if target else None,
        "max_over_mean": top / mean if top is not None and mean else None,
        "per_shard": [{"task": s.task, "shard": s.shard, "tokens": s.tokens, "documents": s.documents,
                       "bytes": s.bytes} for s in done],
    }


def _task_row(t: Task, out: Output) -> dict:
    """One task: done only when its sidecar checks out (as ``status`` and ``finalize`` decide); a log that
    says done without such a sidecar (torn, removed, another plan's) is ``missing``, with the problem."""
    lg = out.logs.get(t.task)
    s = t.sidecar
    status = "done" if s else "not started" if lg is None else "missing" if lg.status == "done" else lg.status
    return {
        "task": t.task, "status": status, "problem": t.problem,
        "elapsed_s": s.elapsed_s if s else None,
        "tokens": s.tokens if s else None,
        "mtok_per_s": s.stats.tokens_per_s / 1e6 if s and s.stats.tokens_per_s is not None else None,
        "backend": s.backend.name if s else None,
        "started": lg.started if lg else None, "ended": lg.ended if lg else None,
        "attempts": lg.attempts if lg else 0,
    }


def task_numbers(out: Output) -> dict:
    rows = [_task_row(t, out) for t in out.tasks]
    timed = [r for r in rows if r["elapsed_s"] is not None]
    rates = [r["mtok_per_s"] for r in rows if r["mtok_per_s"] is not None]
    task_s = sum(r["elapsed_s"] for r in timed)
    slowest = sorted(timed, key=lambda r: (-r["elapsed_s"], r["task"]))[:5]
    return {
        "elapsed_s": {**_stats([r["elapsed_s"] for r in timed]), "sum": task_s},
        "mtok_per_s": _stats(rates),
        "mtok_per_task_s": sum(r["tokens"] for r in timed) / task_s / 1e6 if task_s else None,
        "retried": sum(1 for r in rows if r["attempts"] > 1),
        "slowest": [r["task"] for r in slowest],
        "per_task": rows,
    }


def skipped_numbers(out: Output) -> dict:
    by_reason: dict[str, int] = defaultdict(int)
    examples: list[dict] = []
    for s in out.done:
        for reason, n in s.skipped.items():
            by_reason[reason] += n
        examples += [{"reason": e.reason, "task": s.task, "file": e.file, "line": e.line, "byte": e.byte}
                     for e in s.skipped_examples[:SKIP_EXAMPLES - len(examples)]]
    return {"total": sum(by_reason.values()), "by_reason": dict(by_reason), "examples": examples}


def chat_numbers(out: Output) -> dict:
    """Chat data (issue 28): conversations, how many of their tokens are trained, and the conversations
    skipped for the chat reasons; the options that decided the trained tokens when job.json is there."""
    from shardprep.job.chat_encode import CHAT_SKIP_REASONS  # chat outputs only: the chat core's imports

    done = out.done
    tokens = sum(s.tokens for s in done)
    trained = sum(s.trained_tokens or 0 for s in done)
    o = out.chat_options
    return {
        "conversations": sum(s.documents for s in done), "tokens": tokens, "trained_tokens": trained,
        "trained_share": trained / tokens if tokens else None,
        "skipped": {r: sum(s.skipped.get(r, 0) for s in done) for r in CHAT_SKIP_REASONS},
        "train_on": o.train_on if o else None, "train_thinking": o.train_thinking if o else None,
        "messages_field": o.messages_field if o else None, "template": o.template_origin if o else None,
    }


def backend_numbers(out: Output) -> list[dict]:
    """One row per distinct (backend, version, requested, fallback reason), with the tasks that ran it."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for s in out.done:
        b = s.backend
        groups[(b.name, b.version, b.requested, b.fallback_reason)].append(s.task)
    return [{"name": k[0], "version": k[1], "requested": k[2], "fallback_reason": k[3], "tasks": len(v),
             "task_ranges": format_array_ranges(v)} for k, v in sorted(groups.items(), key=lambda kv: -len(kv[1]))]


def build_numbers(out: Output, lengths: DocLengths, tokenizer: TokenizerBlock, samples: list[dict],
                  now: float | None = None) -> dict:
    """Every number of the report, as one JSON-ready dict."""
    now = time.time() if now is None else now
    numbers = {
        "report_version": REPORT_VERSION, "output": out.location, "generated_at": now,
        "finalized": out.finalized, "layout": out.layout, "dtype": out.dtype, "chunk_tokens": out.chunk_tokens,
        "plan_fingerprint": out.fingerprint,
        "totals": totals(out), "progress": progress(out, now), "tokenizer": tokenizer.to_dict(),
        "doc_lengths": doc_length_numbers(lengths), "shards": shard_numbers(out), "tasks": task_numbers(out),
        "skipped": skipped_numbers(out), "backends": backend_numbers(out), "samples": samples,
    }
    if out.chat:        # a text job's report keeps exactly its keys
        numbers["chat"] = chat_numbers(out)
    return numbers
