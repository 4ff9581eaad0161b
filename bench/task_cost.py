"""Issue 12, "Per-task fixed cost": the CPU an array task spends before and around its tokenizing.

Measured side by side in one run, for a "before" checkout (``--base``, default the merge base with main,
extracted with ``git archive``) and this checkout ("after"), each on a job it planned itself:

1. ``python -m shardprep run-task OUT --task-id 0`` (the real CLI, as a Slurm array task runs it), one
   child per run, measured from ``getrusage(RUSAGE_CHILDREN)`` deltas: CPU (user + system) and wall; shard and sidecar removed after
   each run so the next one redoes the work.  Rounds alternate before/after and the task sizes, so load
   changes hit all alike; medians of ``--rounds``.
2. The pieces (bench/task_cost_pieces.py: the task's own steps in its order, CPU of each), medians, plus
   ``python -c pass`` (the interpreter) and ``shardprep plan`` (paid once per job; "after" runs the
   hard cases there).

Task sizes: ~1 MB of JSONL English text (the issue's target case) and 45 KB (its small-file case), from
../shared/corpus via bench/common.py, tokenized with ../shared/tokenizers/gpt2 and ``--backend auto``.

Every child runs with bytecode caches in ``WORK/pycache`` (``PYTHONPYCACHEPREFIX``; an installed package
has its .pyc files, and ``PYTHONDONTWRITEBYTECODE`` would make every task compile ~40 modules), after one
warm-up run per checkout.  Each child's working directory is its checkout (``python -m`` puts the
working directory first on ``sys.path``).

Usage: python bench/task_cost.py [--rounds 9] [--base REV] [--work /tmp/shardprep-task-cost]
       [--json PATH] [--no-bytecode] > report.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2, REPO, english_corpus, extract_base, machine_info, markdown_table  # noqa: E402

SIZES = {"1 MB": 1 << 20, "45 KB": 45 * 1024}
PIECES = Path(__file__).resolve().parent / "task_cost_pieces.py"


BYTECODE = True     # --no-bytecode: every child compiles shardprep's modules from source


def child_env(checkout: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if not BYTECODE:
        return {**env, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    return {**env, "PYTHONPATH": str(checkout), "PYTHONPYCACHEPREFIX": str(work / "pycache")}


def run_child(cmd: list[str], checkout: Path, work: Path) -> tuple[float, float, str]:
    """(CPU s, wall s, stdout) of one child; CPU from the RUSAGE_CHILDREN delta around it (this process
    runs one child at a time, so the delta is that child's)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, cwd=checkout, env=child_env(checkout, work), check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout.decode()


def corpus(work: Path, size: int) -> Path:
    path = work / f"english-{size}.jsonl"
    if not path.is_file():
        english_corpus(path, size)
    return path


def shardprep(*args: object) -> list[str]:
    return [sys.executable, "-m", "shardprep", *map(str, args)]


def plan(checkout: Path, work: Path, inp: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cpu, _, _ = run_child(shardprep("plan", "-i", inp, "-o", out, "-t", GPT2), checkout, work)
    return cpu


def run_task(checkout: Path, work: Path, out: Path) -> tuple[float, float]:
    cpu, wall, _ = run_child(shardprep("run-task", out, "--task-id", 0), checkout, work)
    for name in ("shard-00000.tar", "shard-00000.json"):
        (out / name).unlink()
    return cpu, wall


def median_pieces(samples: list[dict]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def bench(work: Path, rounds: int, base: str) -> dict:
    before, commit = extract_base(base, work)
    checkouts = {"before": before, "after": REPO}
    jobs = {(v, s): work / f"out-{v}-{s.replace(' ', '')}" for v in checkouts for s in SIZES}
    plan_cpu: dict[tuple[str, str], list[float]] = {k: [] for k in jobs}
    for (v, s), out in jobs.items():
        plan_cpu[(v, s)].append(plan(checkouts[v], work, corpus(work, SIZES[s]), out))
        run_task(checkouts[v], work, out)                    # warm-up: bytecode caches, page cache
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {k: [] for k in jobs}
    pieces: dict[tuple[str, str], list[dict]] = {k: [] for k in jobs}
    interp: list[float] = []
    for r in range(rounds):
        order = list(jobs) if r % 2 == 0 else list(reversed(jobs))
        for key in order:
            runs[key].append(run_task(checkouts[key[0]], work, jobs[key]))
            _, _, out = run_child([sys.executable, str(PIECES), str(jobs[key])], checkouts[key[0]], work)
            pieces[key].append(json.loads(out.strip().splitlines()[-1]))
        interp.append(run_child([sys.executable, "-c", "pass"], REPO, work)[0])
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    for key in jobs:      # plan once more per round-trip (paid once per job; after runs the hard cases)
        plan_cpu[key].append(plan(checkouts[key[0]], work, corpus(work, SIZES[key[1]]), jobs[key]))
    return {
        "machine": machine_info(), "base": commit, "rounds": rounds, "bytecode": BYTECODE,
        "interpreter_cpu_s": statistics.median(interp),
        "cases": [{"version": v, "size": s,
                   "cpu_s": statistics.median(c for c, _ in runs[(v, s)]),
                   "wall_s": statistics.median(w for _, w in runs[(v, s)]),
                   "cpu_runs": [round(c, 3) for c, _ in runs[(v, s)]],
                   "plan_cpu_s": statistics.median(plan_cpu[(v, s)]),
                   "pieces": median_pieces(pieces[(v, s)])} for v, s in jobs],
    }


def report(res: dict) -> str:
    cases = {(c["version"], c["size"]): c for c in res["cases"]}
    caches = "with bytecode caches" if res["bytecode"] else "without bytecode caches (--no-bytecode)"
    lines = [f"# Per-task fixed cost (issue 12)\n\nbefore = {res['base'][:12]}, after = this checkout; "
             f"medians of {res['rounds']} rounds, {caches}; load average at start "
             f"{res['machine']['load_avg_at_start']}\n"]
    rows = []
    for s in SIZES:
        b, a = cases[("before", s)], cases[("after", s)]
        rows.append([s, b["cpu_s"], a["cpu_s"], f"{a['cpu_s'] / b['cpu_s']:.2f}x", b["wall_s"], a["wall_s"],
                     b["plan_cpu_s"], a["plan_cpu_s"]])
    lines.append(markdown_table(["task input", "CPU s before", "CPU s after", "after/before", "wall s before",
                                 "wall s after", "plan CPU s before", "plan CPU s after"], rows))
    for s in SIZES:
        b, a = cases[("before", s)]["pieces"], cases[("after", s)]["pieces"]
        prow = [["interpreter (`python -c pass`)", res["interpreter_cpu_s"], res["interpreter_cpu_s"]]]
        prow += [[k, b[k], a[k]] for k in b]
        prow.append(["sum of the pieces", sum(r[1] for r in prow), sum(r[2] for r in prow)])
        prow.append(["whole `run-task` (above)", cases[("before", s)]["cpu_s"], cases[("after", s)]["cpu_s"]])
        lines.append(f"\n## Pieces, {s} task (CPU s, medians)\n")
        lines.append(markdown_table(["piece", "before", "after"], [[k, round(x, 3), round(y, 3)] for k, x, y in prow]))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--base", default=None, help="the 'before' revision (default: merge base of HEAD and main)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardprep-task-cost"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-bytecode", action="store_true",
                    help="no bytecode caches (PYTHONDONTWRITEBYTECODE=1): a checkout run without .pyc files")
    args = ap.parse_args()
    global BYTECODE
    BYTECODE = not args.no_bytecode
    base = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True,
                                       text=True, check=True).stdout.strip()
    args.work.mkdir(parents=True, exist_ok=True)
    res = bench(args.work, args.rounds, base)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(report(res))


if __name__ == "__main__":
    main()
