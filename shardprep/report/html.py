"""One self-contained HTML page: inline CSS and SVG, no script, nothing fetched, opens from a file.

Every number on the page is written by :func:`num` as ``<span data-key="totals.tokens"
data-value="71792">71,792</span>``: the key is its path in the ``--json`` document and the value its
exact JSON value, so a test (or a person with the DOM inspector) can check each one against the JSON.
Text taken from documents and file names is escaped; control characters are shown as escapes.
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any, Callable, Sequence

from shardprep.report.figures import Figure
from shardprep.report.fmt import chat_line, count, duration, human_bytes, number, rate

_CSS = """
:root { --fg:#1d2430; --muted:#5b6575; --line:#dde2ea; --card:#f6f8fb; --accent:#3b6fb6; --warn:#b8475a; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color:var(--fg); }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 2px; }
h2 { font-size: 19px; margin: 34px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.muted, .note { color: var(--muted); } .note { font-size: 13px; margin: 4px 0 10px; }
.path { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 14px; word-break: break-all; }
.badge { display:inline-block; padding: 2px 10px; border-radius: 12px; font-size: 13px; font-weight: 600;
         background: #e3f1e7; color: #24663c; } .badge.running { background: #fdf0e3; color: #8a4b12; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(165px, 1fr)); gap: 10px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .label { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.card .value { font-size: 22px; font-weight: 600; } .card .sub { font-size: 12px; color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 14px; }
th, td { text-align: left; padding: 4px 12px 4px 0; border-bottom: 1px solid var(--line); vertical-align: top; }
td.r, th.r { text-align: right; } th { font-weight: 600; color: var(--muted); font-size: 13px; }
svg.figure { width: 100%; height: auto; display: block; margin: 6px 0; }
pre.doc { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px;
          white-space: pre-wrap; word-break: break-word; font-size: 13px; margin: 4px 0 8px; }
code, .ids { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.warn { color: var(--warn); } footer { margin-top: 40px; font-size: 13px; color: var(--muted); }
"""


def esc(value: Any) -> str:
    return html.escape("–" if value is None else str(value))


def visible(text: str | None) -> str:
    """Document text for a ``<pre>``: HTML-escaped, control characters (except newline) as escapes."""
    if text is None:
        return "(no tokenizer.json to decode with)"
    out = []
    for ch in text:
        o = ord(ch)
        out.append(ch if ch == "\n" or o >= 32 and o != 127 else ("\\t" if ch == "\t" else f"\\x{o:02x}"))
    return html.escape("".join(out))


def num(key: str, value: Any, fmt: Callable[[Any], str] = count) -> str:
    """A number on the page, tied to its path in the JSON (see the module docstring)."""
    raw = "" if value is None else repr(value) if isinstance(value, float) else str(value)
    return f'<span class="num" data-key="{esc(key)}" data-value="{esc(raw)}">{esc(fmt(value))}</span>'


def _card(label: str, value_html: str, sub_html: str = "") -> str:
    return (f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{value_html}</div>'
            f'<div class="sub">{sub_html}</div></div>')


def _table(head: Sequence[str], rows: list[list[str]], right: Sequence[int] = ()) -> str:
    th = "".join(f'<th class="{"r" if i in right else ""}">{esc(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"r" if i in right else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _header(n: dict) -> str:
    p = n["progress"]
    when = dt.datetime.fromtimestamp(n["generated_at"]).strftime("%Y-%m-%d %H:%M:%S")
    badge = ('<span class="badge">finalized</span>' if n["finalized"] else
             f'<span class="badge running">{"complete, not finalized" if not p["missing"] else "in progress"}</span>')
    return (f"<header><h1>shardprep report {badge}</h1><div class=\"path\">{esc(n['output'])}</div>"
            f"<div class=\"muted\">generated {esc(when)} · plan {esc(n['plan_fingerprint'][:12])} · layout "
            f"{esc(n['layout'])} · {esc(n['dtype'])}</div></header>")


def _totals(n: dict) -> str:
    t = n["totals"]
    cards = [
        _card("tokens", num("totals.tokens", t["tokens"])),
        _card("documents", num("totals.documents", t["documents"])),
        _card("shards", num("totals.shards", t["shards"]), f'{num("totals.samples", t["samples"])} samples'),
        _card("bytes", num("totals.bytes", t["bytes"], human_bytes),
              f'{num("totals.bytes_per_token", t["bytes_per_token"], number)} bytes/token'),
        _card("skipped documents", num("totals.skipped", t["skipped"])),
    ]
    return f'<section id="totals"><h2>Totals</h2><div class="cards">{"".join(cards)}</div></section>'


def _chat(n: dict) -> str:
    """Chat data only: the conversations, their trained share and the chat skips (a text job has no section)."""
    c = n.get("chat")
    if c is None:
        return ""
    cards = [
        _card("conversations", num("chat.conversations", c["conversations"])),
        _card("trained tokens", num("chat.trained_tokens", c["trained_tokens"]),
              f'of {num("chat.tokens", c["tokens"])} tokens'),
        _card("trained share", num("chat.trained_share", c["trained_share"], _pct)),
        *(_card(f"skipped: {reason.replace('_', ' ')}", num(f"chat.skipped.{reason}", k))
          for reason, k in c["skipped"].items()),
    ]
    options = [f"{label} <code>{esc(c[key])}</code>" for label, key in
               (("--train-on", "train_on"), ("--train-thinking", "train_thinking"), ("template", "template"),
                ("--messages-field", "messages_field")) if c[key] is not None]
    note = f'<p class="note">{esc(chat_line(c))}{"; " if options else ""}{", ".join(options)}</p>'
    return f'<section id="chat"><h2>Chat data</h2>{note}<div class="cards">{"".join(cards)}</div></section>'


def _per_s(bytes_per_s: float | None) -> str:
    return "–" if bytes_per_s is None else f"{human_bytes(bytes_per_s)}/s"


def _progress(n: dict) -> str:
    p = n["progress"]
    cards = [
        _card("tasks done", f'{num("progress.done", p["done"])} / {num("progress.tasks", p["tasks"])}',
              f'{num("progress.work_done", p["work_done"], _pct)} of the planned input'),
        _card("missing", num("progress.missing", p["missing"]), esc(p["missing_ranges"] or "none")),
        _card("wall time", num("progress.elapsed_s", p["elapsed_s"], duration), "from the task logs"),
        _card("throughput", num("progress.tokens_per_s", p["tokens_per_s"], rate),
              f'{num("progress.input_bytes_per_s", p["input_bytes_per_s"], _per_s)} of input; job total, wall clock'),
        _card("ETA", num("progress.eta_s", p["eta_s"], duration), esc(p["eta_basis"] or "")),
    ]
    extra = []
    if p["running"]:
        extra.append(f"<p>Started, not finished (running, or killed without a word): tasks "
                     f"<code>{esc(_ranges(p['running']))}</code></p>")
    if p["failed"]:
        extra.append("<p class=\"warn\">Failed, last attempt:</p>" + _table(
            ["task", "reason"], [[esc(f["task"]), esc(f["reason"])] for f in p["failed"][:20]]))
    if p["problems"]:
        extra.append(_table(["why not done", "tasks"], [[esc(k), esc(v)] for k, v in p["problems"].items()], [1]))
    return (f'<section id="progress"><h2>Progress</h2><div class="cards">{"".join(cards)}</div>'
            f'{"".join(extra)}</section>')


def _ranges(ids: list[int]) -> str:
    from shardprep.job.state import format_array_ranges

    return format_array_ranges(ids)


def _figure(figs: dict[str, Figure], name: str) -> str:
    f = figs.get(name)
    return f"<figure>{f.svg}</figure>" if f else '<p class="muted">(nothing to draw yet)</p>'


def _doc_lengths(n: dict, figs: dict[str, Figure]) -> str:
    d = n["doc_lengths"]
    keys = ("min", "median", "mean", "p90", "p99", "max")
    row = [num(f"doc_lengths.{k}", d[k], number) for k in keys]
    one, many = ("conversation", "conversations") if "chat" in n else ("document", "documents")
    if d["exact"]:
        note = f'every {one} ({num("doc_lengths.documents", d["documents"])})'
    else:
        note = (f'a sample: {num("doc_lengths.documents", d["documents"])} of '
                f'{num("doc_lengths.documents_total", d["documents_total"])} {many}, from '
                f'{num("doc_lengths.chunks_read", d["chunks_read"])} of '
                f'{num("doc_lengths.chunks_total", d["chunks_total"])} '
                f"chunks spread evenly over the job (<code>--max-chunks</code>)")
    return (f'<section id="doc-lengths"><h2>{one.capitalize()} lengths (tokens)</h2><p class="note">Measured on '
            f"{note}; log-spaced bins.</p>{_figure(figs, 'doc-lengths')}{_table(keys, [row], range(6))}</section>")


def _shards(n: dict, figs: dict[str, Figure]) -> str:
    s = n["shards"]
    keys = ("min", "median", "mean", "max")
    row = [num(f"shards.tokens.{k}", s["tokens"][k], number) for k in keys]
    row.append(num("shards.max_over_mean", s["max_over_mean"], lambda v: "–" if v is None else f"{v:.3f}"))
    target = (f'Target ≈ {num("shards.target_tokens", s["target_tokens"], number)} tokens per shard: '
              f'<code>--target-task-bytes</code> '
              f'{num("shards.target_task_bytes", s["target_task_bytes"], human_bytes)} '
              f"times this job's tokens per input byte." if s["target_tokens"] else
              "One input file per task (no <code>--target-task-bytes</code>): the dotted line is the mean.")
    return (f'<section id="shards"><h2>Tokens per shard</h2><p class="note">{target}</p>{_figure(figs, "shard-tokens")}'
            f'{_table([*keys, "largest / mean"], [row], range(5))}</section>')


def _tasks(n: dict, figs: dict[str, Figure]) -> str:
    t = n["tasks"]
    rows = {r["task"]: (i, r) for i, r in enumerate(t["per_task"])}
    slow = []
    for task in t["slowest"]:
        i, r = rows[task]
        slow.append([esc(task), num(f"tasks.per_task.{i}.elapsed_s", r["elapsed_s"], duration),
                     num(f"tasks.per_task.{i}.tokens", r["tokens"]),
                     num(f"tasks.per_task.{i}.mtok_per_s", r["mtok_per_s"], number), esc(r["backend"])])
    stats = (f'Median {num("tasks.mtok_per_s.median", t["mtok_per_s"]["median"], number)} Mtok/s per task '
             f'(min {num("tasks.mtok_per_s.min", t["mtok_per_s"]["min"], number)}, max '
             f'{num("tasks.mtok_per_s.max", t["mtok_per_s"]["max"], number)}); '
             f'{num("tasks.mtok_per_task_s", t["mtok_per_task_s"], number)} Mtok per task-second overall; '
             f'{num("tasks.elapsed_s.sum", t["elapsed_s"]["sum"], duration)} of task time in all, longest '
             f'{num("tasks.elapsed_s.max", t["elapsed_s"]["max"], duration)}; '
             f'{num("tasks.retried", t["retried"])} task(s) needed more than one attempt.')
    return (f'<section id="tasks"><h2>Tasks</h2><p class="note">{stats}</p>{_figure(figs, "tasks")}'
            f'{_figure(figs, "timeline") if "timeline" in figs else ""}<h3>Slowest tasks</h3>'
            f'{_table(["task", "duration", "tokens", "Mtok/s", "backend"], slow, [1, 2, 3])}</section>')


def _backends(n: dict) -> str:
    rows = [[esc(b["name"]), esc(b["version"]), esc(b["requested"]), num(f"backends.{i}.tasks", b["tasks"]),
             f"<code>{esc(b['task_ranges'])}</code>", esc(b["fallback_reason"] or "")]
            for i, b in enumerate(n["backends"])]
    return (f'<section id="backends"><h2>Backend per task</h2><p class="note"><code>auto</code> uses the fast '
            f"backend only after it reproduced the reference ids; otherwise the reason it fell back is shown.</p>"
            f'{_table(["backend", "version", "requested", "tasks", "task ids", "why (fallback reason)"], rows, [3])}'
            f"</section>")


def _skipped(n: dict) -> str:
    s = n["skipped"]
    reasons = [[esc(k), num(f"skipped.by_reason.{k}", v)] for k, v in s["by_reason"].items()]
    examples = [[esc(e["reason"]), esc(e["task"]),
                 f'<code>{esc(e["file"])}:{esc(e["line"]) if e["line"] is not None else "@" + esc(e["byte"])}</code>']
                for e in s["examples"]]
    ex = (f'<h3>First examples</h3>{_table(["reason", "task", "file:line (or @byte offset)"], examples)}'
          if examples else "")
    return (f'<section id="skipped"><h2>Skipped documents: {num("skipped.total", s["total"])}</h2>'
            f'{_table(["reason", "documents"], reasons, [1])}{ex}</section>')


def _tokenizer(n: dict) -> str:
    t = n["tokenizer"]

    def special(kind: str) -> str:
        return "none" if t[f"{kind}_token"] is None else \
            f'<code>{esc(t[f"{kind}_token"])}</code> = {num(f"tokenizer.{kind}_id", t[f"{kind}_id"], str)}'

    rows = [["family", esc(t["family"])], ["model", esc(t["model"])], ["source", f'<code>{esc(t["source"])}</code>'],
            ["vocabulary", num("tokenizer.vocab_size", t["vocab_size"])], ["token dtype", esc(t["dtype"])],
            ["EOS", special("eos") + (" (appended to every document)" if t["add_eos"] else " (not added)")],
            ["BOS", special("bos") + (" (prepended to every document)" if t["add_bos"] else " (not added)")],
            ["PAD", special("pad")], ["pre-tokenizer", esc(t["pre_tokenizer"])], ["normalizer", esc(t["normalizer"])],
            ["decoder", esc(t["decoder"])], ["byte fallback", esc(t["byte_fallback"])],
            ["added tokens", num("tokenizer.added_tokens", t["added_tokens"])]]
    return f'<section id="tokenizer"><h2>Tokenizer</h2>{_table(["", ""], rows)}</section>'


def _samples(n: dict) -> str:
    parts = []
    for i, s in enumerate(n["samples"]):
        head = f"first {len(s['first_ids'])} ids" if s["tail"] is not None else "ids"
        parts.append(
            f'<h3>{esc(s["shard"])}, document {num(f"samples.{i}.document", s["document"])} '
            f'({num(f"samples.{i}.tokens", s["tokens"])} tokens)</h3>'
            f'<div class="ids">{head}: {esc(s["first_ids"])}</div><pre class="doc">{visible(s["head"])}</pre>'
            + (f'<div class="ids">… last {len(s["last_ids"])} ids: {esc(s["last_ids"])}</div>'
               f'<pre class="doc">{visible(s["tail"])}</pre>' if s["tail"] is not None else ""))
    body = "".join(parts) or '<p class="muted">(no finished shard yet)</p>'
    return (f'<section id="samples"><h2>Sample documents</h2><p class="note">Decoded with the frozen '
            f"<code>tokenizer.json</code> of this output, special tokens shown; the first and last tokens of "
            f"long documents.</p>{body}</section>")


def render_page(n: dict, figures: list[Figure], png_names: list[str]) -> str:
    figs = {f.name: f for f in figures}
    links = " · ".join(f'<a href="{esc(p)}">{esc(p)}</a>' for p in png_names)
    sections = [_header(n), _totals(n), _chat(n), _progress(n), _doc_lengths(n, figs), _shards(n, figs), _tasks(n, figs),
                _backends(n), _skipped(n), _tokenizer(n), _samples(n)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>shardprep report: {esc(n['output'])}</title><style>{_CSS}</style></head><body><main>"
            + "".join(sections) + f"<footer>Figures as PNG, beside this page: {links or 'none'}. "
            f"The same numbers as JSON: <code>shardprep report {esc(n['output'])} --json</code></footer>"
            "</main></body></html>\n")
