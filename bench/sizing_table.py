"""The table of docs/slurm.md, 'Task sizing': what the default rule makes of typical shapes of data.

Runs the real rule (``job.sizing.auto_sizing``) and the real cutter (``job.cutting.iter_balanced``) on
synthetic input lists; only the text split points are computed arithmetically (cut at the offset asked)
instead of read from files that would need hundreds of GB.  Shard sizes assume the sampled ratio given per row
(shard bytes per input byte: ~0.45 for English jsonl with GPT-2's uint16 ids, ~0.9 with a 128k uint32
vocabulary, ~1.8 for Korean with GPT-2).

    python3 bench/sizing_table.py            # prints the Markdown table
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardprep.inputs.discover import InputFile  # noqa: E402
from shardprep.job import cutting  # noqa: E402
from shardprep.job.options import TokenizeOptions  # noqa: E402
from shardprep.job.sizing import auto_sizing, balanced_tasks  # noqa: E402
from shardprep.units import human_bytes  # noqa: E402

GB = 1 << 30


def _at_offset(inp: object, offset: int, paragraph: bool) -> int:
    return offset


def _files(spec: list[tuple[int, int, str | None]]) -> list[InputFile]:
    out, k = [], 0
    for count, size, compression in spec:
        for _ in range(count):
            suffix = ".jsonl" + (f".{compression}" if compression else "")
            out.append(InputFile(f"/data/f{k:06d}{suffix}", size, 0, "jsonl", compression))
            k += 1
    return out


SHAPES: list[tuple[str, list[tuple[int, int, str | None]], float | None]] = [
    ("3,000 x 45 KB jsonl (Korean, GPT-2)", [(3000, 45_000, None)], 1.8),
    ("3,000 x 4.5 KB jsonl (Korean, GPT-2)", [(3000, 4_500, None)], 1.8),
    ("64 x 2 GiB jsonl (English, GPT-2)", [(64, 2 * GB, None)], 0.45),
    ("208 x 48 MiB txt (English, GPT-2; issue 20's 10 GB)", [(208, 48 << 20, None)], 0.5),
    ("1 x 200 GiB jsonl (English, 128k vocab)", [(1, 200 * GB, None)], 0.9),
    ("mix: 10,000 x 20 KB + 40 x 3 GiB + 5 x 8 GiB .gz", [(10_000, 20_000, None), (40, 3 * GB, None),
                                                           (5, 8 * GB, "gz")], 0.45),
    ("200 x 1 GiB .jsonl.gz only (ratio not sampled)", [(200, GB, "gz")], None),
]
SLOTS = (2, 16, 64, 1024)


def rows() -> list[str]:
    cutting.aligned_boundary = _at_offset    # type: ignore[assignment]  # arithmetic cuts (module docstring)
    lines = ["| data | task slots | target per task | tasks (waves) | smallest / largest task | smallest shard (est.) |",
             "|---|---|---|---|---|---|"]
    for name, spec, ratio in SHAPES:
        inputs = _files(spec)
        for slots in SLOTS:
            sizing = auto_sizing(inputs, slots, "example", ratio)
            n = balanced_tasks(sizing, sum(i.size for i in inputs))
            assert n is not None
            tasks = list(cutting.iter_balanced(inputs, n, TokenizeOptions()))
            sizes = [sum((inputs[w.input].size if w.end is None else w.end) - w.start for w in t) for t in tasks]
            shard = f"{human_bytes(min(sizes) * ratio)}" if ratio else f">= {human_bytes(min(sizes) * 0.25)}"
            assert sizing.target_task_bytes is not None
            waves = f" ({len(tasks) / slots:.2g})" if len(tasks) >= slots else ""
            lines.append(f"| {name} | {slots} | {human_bytes(sizing.target_task_bytes)} | {len(tasks):,}{waves} | "
                         f"{human_bytes(min(sizes))} / {human_bytes(max(sizes))} | {shard} |")
    return lines


if __name__ == "__main__":
    print("\n".join(rows()))
