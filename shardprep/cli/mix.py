"""``shardprep mix``: what a mixture spec will do before a run starts: per source, the tokens it holds, its
share, the tokens the run takes from it and how many epochs that is, plus the first positions' schedule."""

from __future__ import annotations

import argparse
import sys

NAME = "mix"
HELP = "show what a loader mixture spec (JSON/YAML) reads: per source tokens, share, tokens taken, epochs"
DESCRIPTION = (
    "Reads each source's index.json (local, s3://, or any fsspec URL; credentials and endpoints from the "
    "environment, as for verify) and prints, per source: the tokens it holds, its share of the run's tokens, the "
    "tokens the run takes from it and the epochs over it that makes (a source smaller than its share repeats), "
    "and which source the first rows read. Sources that cannot mix are refused as the loader refuses them. "
    "See docs/loader.md, 'Mixtures'."
)
_SCALE = {"K": 10 ** 3, "M": 10 ** 6, "B": 10 ** 9, "G": 10 ** 9, "T": 10 ** 12}


def token_count(text: str) -> int:
    """``1000000``, ``1e9``, ``500M``, ``2B``, ``1.5T`` (decimal: tokens are counted, not bytes)."""
    raw = text.strip().replace("_", "").replace(",", "")
    scale = _SCALE.get(raw[-1:].upper(), 1)
    try:
        value = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token count (e.g. 1000000, 1e9, 500M, 2B, 1T)") from None
    from shardprep.loader.mixture import MAX_TOKENS  # (a run's positions are int64)

    if not 1 <= value <= MAX_TOKENS or value != int(value):    # (inf too: 1e400 used to end in a traceback)
        raise argparse.ArgumentTypeError(f"{text!r}: a token count is a whole number from 1 to {MAX_TOKENS:.3g}")
    return int(value)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC", help="mixture spec file (.json, .yaml, .yml; docs/loader.md)")
    p.add_argument("--tokens", type=token_count, default=None, metavar="N",
                   help="the run's token budget (total_tokens; e.g. 1e12, 500B); default: the spec's, else the "
                        "sources' tokens together")
    p.add_argument("--mode", choices=("pack", "pad", "doc"), default="pack", help="the loader's mode")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per row (pack, pad)")
    p.add_argument("--seed", type=int, default=0, help="the loader's seed (it breaks the schedule's ties)")
    p.add_argument("--rows", type=int, default=32, help="how many first positions of the schedule to show")
    p.add_argument("--allow-tokenizer-mismatch", action="store_true",
                   help="mix sources tokenized differently (you know their ids agree)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")


def lines(s: dict) -> list[str]:
    """The summary (``Mixture.summary``) for people."""
    from shardprep.report.fmt import compact, count, number

    unit = s["unit"][:-1]
    what = f"{s['mode']} {s['unit']} of {s['seq_len']} tokens" if s["mode"] == "pack" else f"{s['mode']} mode, {unit}s"
    basis = "total_tokens" if s["length_from"] == "total_tokens" else "the sources' tokens together"
    out = [f"mixture {s['spec']}: {len(s['sources'])} source(s), {what}, seed {s['seed']}",
           f"run: {count(s['units'])} {s['unit']} = {compact(s['tokens'])} tokens (length from {basis})",
           f"schedule: period {count(s['period'])} {s['unit']} (quotas {':'.join(map(str, s['quotas']))}); in any W "
           f"consecutive {s['unit']} each source is within {number(s['bounds']['window'])} {unit}(s) of W x its "
           f"{unit} share, every prefix within {number(s['bounds']['prefix'])}"]
    if s["mode"] != "pack":
        out.append("(pad/doc: documents are scheduled by weight / mean document length; token shares are expected)")
    head = ["source", "tokens", "weight", "share", "taken", "epochs", "dtype", "path"]
    body = [[r["name"], compact(r["tokens"]), number(r["weight"]), f"{r['share']:.4f}", compact(r["taken_tokens"]),
             f"{r['epochs']:.3g}", r["dtype"], r["path"]] for r in s["sources"]]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    out += ["", *("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]), ""]
    out.append(f"first {len(s['schedule'])} {s['unit']}: {' '.join(s['schedule'])}")
    return out


def run(args: argparse.Namespace) -> int:
    from shardprep.errors import ConfigError
    from shardprep.loader.chatrows import chat_rows
    from shardprep.loader.layout import ConversationPacking, Pack, layout_of
    from shardprep.loader.mixture import load_spec, mixture_spec, open_mixture

    if args.seq_len < 1 or args.rows < 0 or args.seed < 0:
        raise ConfigError(f"--seq-len={args.seq_len}, --rows={args.rows}, --seed={args.seed}: seq-len must be >= 1, "
                          f"rows and seed >= 0")
    spec = mixture_spec(load_spec(args.spec), total_tokens=args.tokens,
                        allow_tokenizer_mismatch=True if args.allow_tokenizer_mismatch else None)
    assert spec is not None
    layout = layout_of(args.mode, args.seq_len if args.mode != "doc" else None)
    mix = open_mixture(spec, layout=layout, seed=args.seed)
    if isinstance(layout, Pack):        # a chat source's rows are its packed conversations, as the loader counts
        for n, index in enumerate(mix.indexes):
            if index.record is not None and index.record.chat:
                mix.use_rows(n, chat_rows(index, layout.seq_len, ConversationPacking(), {}).rows)
    summary = mix.summary(args.rows)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print("\n".join(lines(summary)))
    return 0
