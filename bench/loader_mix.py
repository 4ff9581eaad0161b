"""A 3-source mixture against the single-source loader: tokens/s, CPU per token and peak RSS, side by side.

Three outputs tokenized from generated English text of very different sizes (``web`` 40 MB of text,
``code`` 12 MB, ``tiny`` 0.4 MB: about 100x smaller than ``web``), mixed 0.6 / 0.3 / 0.1.  Every run reads
E times ``web``'s tokens, pack mode, ``seq_len=2048``, batch 8, the same workers:

* ``single``: ``web`` alone, E epochs (E passes);
* ``mixture``: the mixture with ``total_tokens`` = ``web``'s tokens, E epochs: pass for pass the same work
  as ``single`` (the comparison the target is stated on);
* ``mixture, one pass``: ``total_tokens`` = E x ``web``'s tokens, one pass (how a mixture run is usually
  set up: fewer worker start-ups and pass boundaries).

``tiny`` repeats about 15 times per ``web``'s worth of tokens, ``code`` about 4 times.  Each measurement is
``bench/loader.py``'s own child in a fresh process (the mixture passed as its spec file); the cases are run
in rotating order, round after round, so machine load hits all alike; reported: medians, the median of the
ratios to ``single`` in the same round (whole run, and after each pass's first batch, which leaves out
worker start-up), CPU per token (loop and workers), and peak RSS (the process or its largest worker).

    python bench/loader_mix.py --quick      # E = 1, 2 rounds, workers 0 and 2
    python bench/loader_mix.py              # E = 3, 4 rounds

Data is built once under bench/out/loader-mix/ (gitignored) and reused.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2, MB, REPO, english_corpus, machine_info, markdown_table, write_report  # noqa: E402
from loader import measure  # noqa: E402

WORKDIR = REPO / "bench" / "out" / "loader-mix"
SOURCES = {"web": (40 * MB, 0.6), "code": (12 * MB, 0.3), "tiny": (MB * 2 // 5, 0.1)}
CASES = ("single", "mixture", "mixture, one pass")


def build_sources() -> tuple[dict[str, Path], dict]:
    """The three outputs (cached), and their tokens."""
    from shardprep.api import tokenize_directory
    from shardprep.demo_data import build_sample_tokenizer

    tokenizer = GPT2 if GPT2.is_file() else build_sample_tokenizer(WORKDIR / "sample-tokenizer.json")
    outputs, tokens = {}, {}
    for seed, (name, (size, _)) in enumerate(SOURCES.items(), start=1):
        text = WORKDIR / f"{name}.jsonl"
        if not text.is_file():
            WORKDIR.mkdir(parents=True, exist_ok=True)
            english_corpus(text, size, seed=seed)
        out = WORKDIR / f"shards-{name}"
        if not (out / "index.json").is_file():
            started = time.perf_counter()
            tokenize_directory(text, out, tokenizer, workers=2, overwrite=True, target_task_bytes=8 * MB)
            print(f"tokenized {name} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        outputs[name] = out
        tokens[name] = json.loads((out / "index.json").read_text())["totals"]["tokens"]
    return outputs, {"tokens": tokens, "tokenizer": str(tokenizer)}


def spec_file(outputs: dict[str, Path], total_tokens: int) -> Path:
    spec = WORKDIR / f"mix-{total_tokens}.json"
    spec.write_text(json.dumps({"sources": [{"name": n, "path": str(outputs[n]), "weight": w}
                                            for n, (_, w) in SOURCES.items()], "total_tokens": total_tokens}))
    return spec


def rounds(args: argparse.Namespace, outputs: dict[str, Path], web_tokens: int, workers: int) -> dict:
    """``args.rounds`` rounds of the three cases, in rotating order."""
    one_pass = copy.copy(args)
    one_pass.epochs = 1
    cases = {"single": (outputs["web"], args), "mixture": (spec_file(outputs, web_tokens), args),
             "mixture, one pass": (spec_file(outputs, args.epochs * web_tokens), one_pass)}
    runs: dict[str, list[dict]] = {c: [] for c in CASES}
    for i in range(args.rounds):
        for label in CASES[i % 3:] + CASES[:i % 3]:
            data, how = cases[label]
            r = measure("shardprep", data, workers, how, pad_id=0)
            runs[label].append(r)
            print(f"{label}, {workers} workers: {rate(r) / 1e6:.1f} Mtok/s, {r['peak_rss_bytes'] / MB:.0f} MiB",
                  file=sys.stderr)
    return runs


def rate(r: dict) -> float:
    return r["real_tokens"] / r["seconds"]


def steady(r: dict) -> float:
    return r["real_tokens"] / max(1e-9, r["seconds"] - r["startup_s"])


def cpu(r: dict) -> float:
    return 1000 * r["cpu_s"] / (r["real_tokens"] / 1e6)


def summarize(runs: dict[str, list[dict]]) -> dict:
    base = runs["single"]
    out = {}
    for label, rs in runs.items():
        out[label] = {"mtok_s": statistics.median(rate(r) for r in rs) / 1e6,
                      "ratio": statistics.median(rate(r) / rate(b) for r, b in zip(rs, base)),
                      "ratio_range": [min(rate(r) / rate(b) for r, b in zip(rs, base)),
                                      max(rate(r) / rate(b) for r, b in zip(rs, base))],
                      "steady_ratio": statistics.median(steady(r) / steady(b) for r, b in zip(rs, base)),
                      "cpu_ms_per_mtok": statistics.median(cpu(r) for r in rs),
                      "cpu_ratio": statistics.median(cpu(r) / cpu(b) for r, b in zip(rs, base)),
                      "peak_rss_mib": max(r["peak_rss_bytes"] for r in rs) / MB,
                      "tokens": rs[0]["real_tokens"]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="E = 1, 2 rounds")
    p.add_argument("--epochs", type=int, default=None, help="E: web's tokens read per run (default 3, quick 1)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the three cases (default 4, quick 2)")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader worker counts")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per row")
    p.add_argument("--batch-size", type=int, default=8, help="rows per batch")
    p.add_argument("--shuffle-block", type=int, default=None, help="rows per shuffle block, for both loaders "
                   "(default: the loader's, about 8M tokens, which is most of a source this small)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "loader_mix.md"), help="report path")
    args = p.parse_args()
    args.epochs = args.epochs or (1 if args.quick else 3)
    args.rounds = args.rounds or (2 if args.quick else 4)
    args.repeat = 1
    outputs, meta = build_sources()
    results = {w: summarize(rounds(args, outputs, meta["tokens"]["web"], w)) for w in args.workers}
    rows = [[label, w, r["mtok_s"], f"{r['ratio']:.2f}x", f"{r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}",
             f"{r['steady_ratio']:.2f}x", r["cpu_ms_per_mtok"], f"{r['cpu_ratio']:.2f}x", r["peak_rss_mib"]]
            for w, by_case in results.items() for label, r in by_case.items()]
    report = (f"# Loader: 3-source mixture vs single source\n\nSources (tokens): {meta['tokens']}, weights "
              f"{[w for _, w in SOURCES.values()]}; every run reads {args.epochs} x web's tokens; pack "
              f"seq_len={args.seq_len}, batch={args.batch_size}, shuffle_block={args.shuffle_block or 'default'}, "
              f"{args.rounds} rounds.\n\n"
              + markdown_table(["case", "workers", "Mtok/s", "vs single (median)", "range", "after 1st batch",
                                "CPU ms/Mtok", "CPU vs single", "peak RSS MiB"], rows)
              + f"\n\nmachine: {json.dumps(machine_info())}\n")
    write_report(args.out, report, {"meta": meta, "args": {"epochs": args.epochs, "rounds": args.rounds,
                                                          "shuffle_block": args.shuffle_block},
                                    "results": {str(w): r for w, r in results.items()}})


if __name__ == "__main__":
    main()
