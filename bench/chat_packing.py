"""Issue 28 item 6: how full the loader's chat rows are (packing efficiency: real tokens over row tokens).

    python bench/chat_packing.py [--conversations 20000] [--seed 0]

Conversation lengths drawn from a lognormal (median 500 tokens, sigma 1; a realistic SFT mix of short
exchanges and a long tail), clipped to [50, 8000]; packed exactly as the loader packs them
(``shardprep.loader.binpack``: first-fit decreasing inside windows of ``pack_window`` conversations; a
conversation longer than ``seq_len`` truncated to a row of its own) for several ``seq_len`` and windows.
Reported per case: rows, efficiency (goal >= 97%), conversations truncated, and the packing time per 1,000
conversations (what a rank spends sizing an epoch).  Markdown to stdout and ``bench/results/chat_packing.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, markdown_table, write_report  # noqa: E402

from shardprep.loader.binpack import stats  # noqa: E402


def lengths(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(500), 1.0, n)), 50, 8000).astype(np.int64)


def case(all_lengths: np.ndarray, seq_len: int, window: int) -> list[object]:
    started = time.perf_counter()
    total = None
    for lo in range(0, len(all_lengths), window):
        part = stats(all_lengths[lo:lo + window], seq_len)
        total = part if total is None else total + part
    elapsed = time.perf_counter() - started
    assert total is not None
    eff = total.tokens / (total.rows * seq_len)
    return [seq_len, window, f"{total.rows:,}", f"{eff:.2%}", total.truncated,
            f"{1000 * elapsed / len(all_lengths) * 1000:.1f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "chat_packing.md")
    args = ap.parse_args()
    lens = lengths(args.conversations, args.seed)
    rows = [case(lens, s, w) for s in (2048, 4096, 8192) for w in (256, 1024, 4096)]
    m = machine_info()
    report = (f"## Chat packing efficiency (issue 28)\n\nMachine: {m['cpu_model']}, Python {m['python']}. "
              f"{args.conversations:,} conversations, lognormal lengths (median {int(np.median(lens))}, mean "
              f"{lens.mean():.0f}, max {lens.max()}), seed {args.seed}. Command: `python bench/chat_packing.py "
              f"{' '.join(sys.argv[1:])}`.\n\n"
              + markdown_table(["seq_len", "pack_window", "rows", "efficiency", "truncated", "ms per 1k conv."], rows))
    write_report(args.out, report, {"machine": m, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
