"""``shardprep report SPEC.json``: a loader mixture's page, the table ``shardprep mix`` prints, as HTML.

The numbers are ``loader.mixture.Mixture.summary`` for the loader's defaults (pack rows of 2048 tokens,
seed 0; ``shardprep mix`` takes other settings); every number is tied to its ``--json`` path as on the
output report page.
"""

from __future__ import annotations

from pathlib import Path

from shardprep.report.fmt import count, number
from shardprep.report.html import _CSS, _table, esc, num

SEQ_LEN = 2048


def mixture_numbers(spec: str | Path) -> dict:
    """The mixture's summary (sources read from their index.json files)."""
    from shardprep.loader.layout import Pack
    from shardprep.loader.mixture import load_spec, open_mixture

    return open_mixture(load_spec(str(spec)), layout=Pack(SEQ_LEN), seed=0).summary()


def render_mixture_page(s: dict) -> str:
    rows = [[esc(r["name"]), num(f"sources.{i}.tokens", r["tokens"]), num(f"sources.{i}.weight", r["weight"], number),
             num(f"sources.{i}.share", r["share"], lambda v: f"{v:.4f}"),
             num(f"sources.{i}.taken_tokens", r["taken_tokens"]), num(f"sources.{i}.epochs", r["epochs"], number),
             esc(r["dtype"]), f'<span class="path">{esc(r["path"])}</span>'] for i, r in enumerate(s["sources"])]
    table = _table(["source", "tokens", "weight", "share", "tokens taken", "epochs", "dtype", "path"], rows,
                   right=(1, 2, 3, 4, 5))
    basis = "its total_tokens" if s["length_from"] == "total_tokens" else "the sources' tokens together"
    body = (f"<header><h1>shardprep mixture</h1><div class=\"path\">{esc(s['spec'])}</div>"
            f"<div class=\"muted\">pack rows of {num('seq_len', s['seq_len'])} tokens, seed {num('seed', s['seed'])}"
            f"</div></header><section><h2>Sources</h2><p class=\"note\">A run of {num('units', s['units'])} rows = "
            f"{num('tokens', s['tokens'])} tokens (length from {esc(basis)}). A source whose share is more than its "
            f"size repeats (epochs &gt; 1); a larger one is read without repetition within its epoch.</p>{table}"
            f"</section><section><h2>Schedule</h2><p class=\"note\">Period {num('period', s['period'])} rows "
            f"(quotas {esc(':'.join(map(str, s['quotas'])))}). In any W consecutive rows each source is within "
            f"{num('bounds.window', s['bounds']['window'], number)} rows of W x its share; after any number of "
            f"rows within {num('bounds.prefix', s['bounds']['prefix'], number)}.</p>"
            f"<p class=\"ids\">first {count(len(s['schedule']))} rows: {esc(' '.join(s['schedule']))}</p></section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>shardprep mixture: {esc(s['spec'])}</title><style>{_CSS}</style></head><body><main>{body}"
            f"<footer>The same numbers as JSON: <code>shardprep report {esc(s['spec'])} --json</code>; other "
            f"settings: <code>shardprep mix {esc(s['spec'])} --seq-len N --tokens N</code></footer>"
            "</main></body></html>\n")
