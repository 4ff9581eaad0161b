"""Tokenizer families (issue 14): per-core speed of every shared tokenizer with ``hf`` and, where it loads,
gigatoken, plus which backend ``--backend auto`` picks for it and why.

    python bench/tokenizer_families.py            # 8 MB English + 2 MB multilingual, best of 3 (~6 min)
    python bench/tokenizer_families.py --quick    # 1 MB + 1 MB, one round (~1 min)

Each measurement is a fresh single-threaded process (``bench/tokenize_children.py encode_threads``: the
task's own backend wrapper over the whole corpus in 1 MiB batches: no padding or truncation even where
the tokenizer.json asks for them, special strings as text), reported as tokens per CPU-second.
The gigatoken figure is "what it would be": where the ``auto`` check refuses gigatoken (its ids differ
from hf), tasks run at the hf speed, and the column says so.  Writes a markdown table (``--out``, default
bench/results/tokenizer_families.md) and the raw numbers as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # this checkout's shardprep, not an installed one
from common import (  # noqa: E402
    MB,
    REPO,
    SHARED,
    ensure_corpus,
    machine_info,
    markdown_table,
    python,
    read_texts,
    run_child,
    write_report,
)

CHILD = str(Path(__file__).resolve().parent / "tokenize_children.py")
ONE_CORE = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
FAMILIES = SHARED / "tokenizers"


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**ONE_CORE, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def measure(backend: str, corpus: Path, tokenizer: Path, repeat: int) -> dict:
    """Best (lowest CPU) of ``repeat`` runs of shardprep's own backend wrapper (what a task runs: no
    padding or truncation, specials as text), or the error when the backend cannot load the tokenizer."""
    best: dict | None = None
    args = json.dumps({"corpus": str(corpus), "tokenizer": str(tokenizer), "backend": backend})
    for _ in range(repeat):
        try:
            res = run_child([python(), CHILD, "encode_threads", args], env=_env()).result
        except RuntimeError as e:
            return {"error": str(e).strip().splitlines()[-1]}
        if best is None or res["cpu_s"] < best["cpu_s"]:
            best = res
    assert best is not None
    return {**best, "mtok_per_cpu_s": best["tokens"] / best["cpu_s"] / 1e6}


def auto_choice(tokenizer: Path, corpus: Path) -> dict:
    """What ``--backend auto`` picks for a task of this corpus (its check on the first 128 documents)."""
    from shardprep.tokenizer.backend import select_backend
    from shardprep.tokenizer.load import resolve_tokenizer

    resolved = resolve_tokenizer(str(tokenizer))
    backend, record = select_backend("auto", resolved.json, allow_special_tokens=False,
                                     sample_texts=read_texts(corpus)[:128])
    return {"picks": backend.name, "reason": record.get("fallback_reason"), "vocab": resolved.info.vocab_size,
            "eos": resolved.info.eos_token, "eos_source": resolved.choices["eos"].source}


def _cell(res: dict) -> str:
    return f"{res['mtok_per_cpu_s']:.2f}" if "mtok_per_cpu_s" in res else "cannot load"


def _why(choice: dict) -> str:
    """The check's verdict in a table cell: what gigatoken could not do, shortened."""
    if choice["picks"] != "hf":
        return "check passed"
    reason = (choice["reason"] or "").replace("gigatoken cannot load this tokenizer: ", "cannot load: ")
    reason = reason.split(" for: ")[0].split(": gigatoken supports")[0]
    return reason if len(reason) <= 80 else reason[:77] + "..."


def render(results: dict) -> str:
    header = ["tokenizer", "vocab", "auto picks", "why"]
    for corpus in results["corpora"]:
        header += [f"hf {corpus}", f"gigatoken {corpus}", "ratio"]
    rows = []
    for name, r in results["tokenizers"].items():
        choice = r["auto"][next(iter(results["corpora"]))]
        row: list[object] = [f"`{name}`", f"{choice['vocab']:,}", choice["picks"], _why(choice)]
        for corpus in results["corpora"]:
            hf, giga = r["hf"][corpus], r["gigatoken"][corpus]
            ratio = giga["mtok_per_cpu_s"] / hf["mtok_per_cpu_s"] if "mtok_per_cpu_s" in giga else None
            refused = r["auto"][corpus]["picks"] == "hf" and ratio is not None
            ratio_cell = "-" if ratio is None else f"{ratio:.1f}x"
            row += [_cell(hf), _cell(giga) + (" (refused)" if refused else ""), ratio_cell]
        rows.append(row)
    m = results["machine"]
    head = (f"Mtok/s per core (tokens per CPU-second, one thread, best of {results['repeat']}); "
            f"{m['cpus']} CPUs ({m['cpu_model']}), load {m['load_avg_at_start']} at start, "
            f"{results['load_avg_at_end']} at end; tokenizers {m['versions']['tokenizers']}, gigatoken "
            f"{m['versions']['gigatoken']}.  Command: `{results['command']}`.\n\n")
    return head + markdown_table(header, rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 MB corpora, one round")
    ap.add_argument("--workdir", default="/tmp/shardprep-bench", help="corpora (shared with bench/tokenize.py)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tokenizer_families.md"))
    ap.add_argument("--repeat", type=int, default=None, help="runs per measurement, best kept (default 3, quick 1)")
    args = ap.parse_args(argv)
    if not FAMILIES.is_dir():
        print(f"bench/tokenizer_families.py: needs the shared tokenizers in {FAMILIES}", file=sys.stderr)
        return 2
    repeat = args.repeat or (1 if args.quick else 3)
    sizes = {"english": 1 if args.quick else 8, "multilingual": 1 if args.quick else 2}
    work = Path(args.workdir)
    corpora = {name: ensure_corpus(work, name, mb * MB)[0] for name, mb in sizes.items()}
    command = "python bench/tokenizer_families.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict = {"machine": machine_info(), "repeat": repeat, "corpora": {k: str(v) for k, v in corpora.items()},
                     "command": command, "tokenizers": {}}
    for tok in sorted(FAMILIES.glob("*/tokenizer.json")):
        name = tok.parent.name
        print(f"[{name}]", file=sys.stderr, flush=True)
        results["tokenizers"][name] = {
            "auto": {c: auto_choice(tok, path) for c, path in corpora.items()},
            "hf": {c: measure("hf", path, tok, repeat) for c, path in corpora.items()},
            "gigatoken": {c: measure("gigatoken", path, tok, repeat) for c, path in corpora.items()},
        }
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_report(args.out, render(results), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
