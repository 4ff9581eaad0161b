"""Issue 16: a task's cost must not grow with the job.  Plans of 1 to 1,000,000 small input files.

Measured, each in its own child process (wall clock and the child's peak RSS from ``wait4``):

1. ``shardprep plan`` over N small files (45 bytes each, 1,000 per directory): wall, RSS, and the size
   of the job-wide files (job.json + plan/) against the size of the input paths list.
2. ``shardprep run-task`` of one task in jobs of N inputs (the fixed cost: 45 bytes to tokenize), as a
   ratio against the 1-input job.  Rounds go over the sizes in turn so machine load hits all alike;
   the median of the rounds is reported.
3. ``shardprep status`` and ``finalize`` on N sidecars, and ``ShardDataset`` construction + first batch
   on the N-shard index.  The shards, sidecars and task logs are synthesized through the real writers
   (``ShardWriter``, ``job.task.build_sidecar``, ``write_json_atomic``, ``job.task._task_log``) with fsync
   disabled in the synthesizing process only (setup speed; nothing measured runs without fsync).
   ``status`` reads every task log (its progress and ETA, ``job.progress``).

Usage: python bench/plan_scale.py [--sizes 1,10000,100000,1000000] [--sidecars 10000,100000]
       [--work /tmp/shardprep-plan-scale] [--rounds 5] [--keep] [--json PATH] [--quick] > report.md
Needs ~5 GB of disk for 1M inputs (45-byte files take a 4 KiB block each); deleted at the end unless --keep.
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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2, machine_info, markdown_table  # noqa: E402

PER_DIR = 1000
_KEYS = ("wall_s", "cpu_s", "rss_mb")
DOC = b"A small test document, forty-five bytes long\n"   # 45 bytes, one document


@dataclass
class Sample:
    wall_s: float
    cpu_s: float        # user + system: what the child really spent, whatever the machine's load
    rss_mb: float


def measure(cmd: list[str], *, ok: tuple[int, ...] = (0,)) -> Sample:
    """Run ``cmd`` (a child process); wall time, CPU time and its own peak RSS."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}:\n{err[-2000:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def shardprep(*args: object) -> list[str]:
    return [sys.executable, "-m", "shardprep", *map(str, args)]


# -- inputs -------------------------------------------------------------------------------------------
def make_inputs(root: Path, n: int) -> Path:
    """``root/inputs/dNNNN/fNNNNNNN.txt``, 45 bytes each, created once (a marker says how many exist)."""
    inputs = root / "inputs"
    marker = root / "inputs.count"
    if marker.exists() and int(marker.read_text().split()[0]) >= n and marker.read_text().split()[1:] == [DOC.hex()]:
        return inputs
    started = time.perf_counter()
    for i in range(n):
        if i % PER_DIR == 0:
            (inputs / f"d{i // PER_DIR:04d}").mkdir(parents=True, exist_ok=True)
        with open(inputs / f"d{i // PER_DIR:04d}" / f"f{i:07d}.txt", "wb") as f:
            f.write(DOC)
    os.sync()        # what the machine still has to write back must not slow the measurements down
    marker.write_text(f"{n} {DOC.hex()}")
    print(f"created {n:,} input files in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return inputs


def input_specs(inputs: Path, n: int, total: int) -> list[str]:
    """``--input`` values naming exactly the first ``n`` files (n = 1 or a multiple of PER_DIR)."""
    if n == 1:
        return [str(inputs / "d0000" / "f0000000.txt")]
    if n == total:
        return [str(inputs)]
    return [str(inputs / f"d{d:04d}") for d in range(n // PER_DIR)]


def paths_list_bytes(inputs: Path, n: int) -> int:
    """Size of the newline-separated absolute paths of the first n inputs (what an @list file holds)."""
    root = os.path.abspath(inputs)
    return sum(len(f"{root}/d{i // PER_DIR:04d}/f{i:07d}.txt") + 1 for i in range(n))


def job_files_bytes(out: Path) -> int:
    files = [out / "job.json", *(p for p in (out / "plan").rglob("*") if p.is_file())]
    return sum(p.stat().st_size for p in files)


def plan_cmd(out: Path, specs: list[str], tokenizer: Path) -> list[str]:
    args: list[str] = []
    for s in specs:
        args += ["-i", s]
    # one task per file: the run-task measurement is a task's cost in a job of N tasks
    return shardprep("plan", *args, "-o", out, "-t", tokenizer, "--one-file-per-task")


# -- measurements -------------------------------------------------------------------------------------
def bench_plan(work: Path, inputs: Path, sizes: list[int], total: int, tokenizer: Path) -> list[dict]:
    rows = []
    for n in sizes:
        out = work / f"out-{n}"
        shutil.rmtree(out, ignore_errors=True)
        s = measure(plan_cmd(out, input_specs(inputs, n, total), tokenizer))
        paths = paths_list_bytes(inputs, n)
        files = job_files_bytes(out)
        rows.append({"inputs": n, "wall_s": s.wall_s, "cpu_s": s.cpu_s, "rss_mb": s.rss_mb, "job_files_bytes": files,
                     "paths_bytes": paths, "ratio": files / paths})
        print(f"plan {n:,}: {s.wall_s:.1f}s {s.rss_mb:.0f} MB, job files {files / paths:.2f}x paths", file=sys.stderr)
    return rows


def bench_run_task(work: Path, sizes: list[int], rounds: int) -> list[dict]:
    """Round-robin over the sizes; each round runs one task of every job, then removes its shard and
    sidecar so the next round does the same work again (a finished task would only be skipped)."""
    samples: dict[int, list[Sample]] = {n: [] for n in sizes}
    for r in range(rounds):
        for n in sizes:
            out, task = work / f"out-{n}", (r * 7919) % n          # spread over the job
            samples[n].append(measure(shardprep("run-task", out, "--task-id", task, "--threads", 1)))
            for done in (out / f"shard-{task:05d}.tar", out / f"shard-{task:05d}.json"):
                done.unlink()
    med = {n: {k: statistics.median(getattr(s, k) for s in samples[n]) for k in _KEYS}
           for n in sizes}
    base = med[sizes[0]]
    rows = []
    for n in sizes:
        m = med[n]
        rows.append({"inputs": n, **m, **{k.split("_")[0] + "_ratio": m[k] / base[k] for k in m},
                     "walls": [round(s.wall_s, 3) for s in samples[n]]})
        print(f"run-task in {n:,}: {m['wall_s']:.3f}s ({m['wall_s'] / base['wall_s']:.3f}x), cpu {m['cpu_s']:.3f}s "
              f"({m['cpu_s'] / base['cpu_s']:.3f}x), {m['rss_mb']:.0f} MB ({m['rss_mb'] / base['rss_mb']:.3f}x)",
              file=sys.stderr)
    return rows


_SYNTH = r"""
import logging, os, sys
from pathlib import Path
import numpy as np
os.fsync = lambda fd: None           # setup only: the measured commands run with fsync
from shardprep.inputs.readers import SkipLog
from shardprep.job.plan_files import TaskTable
from shardprep.job.state import load_job
from shardprep.job.task import TaskCost, _task_log, build_sidecar
from shardprep.shard.format import shard_name, sidecar_name
from shardprep.shard.provenance import BackendRecord
from shardprep.shard.writer import ShardWriter
from shardprep.storage.atomic import write_json_atomic
out = Path(sys.argv[1])
job = load_job(out)
lengths = np.array([5, 7, 3])
log = logging.getLogger("shardprep.job.task")
with TaskTable(out, job) as table:
    for task in table:
        t = task.index
        with _task_log(out, t):      # the task's real log file, with a run's first and last lines
            log.info("task %d: %s", t, ", ".join(i.describe() for i in task.items))
            w = ShardWriter(out / shard_name(t), task=t, layout=job.options.layout, dtype=job.tokenizer.dtype,
                            chunk_tokens=job.options.chunk_tokens)
            w.add(np.arange(1, 16, dtype=np.uint32) + t % 1000, lengths)
            result = w.close()
            sidecar = build_sidecar(job, t, result, SkipLog(), BackendRecord("synthetic"), task.items,
                                    TaskCost(0.001, 1))
            write_json_atomic(out / sidecar_name(t), sidecar.to_dict())
            log.info("task %d done: %d documents, %d tokens, %d bytes, %d skipped, %.1fs", t, result.documents,
                     result.tokens, result.bytes, 0, 0.001)
"""

_LOADER = r"""
import sys, time
import orjson
from shardprep.loader import ShardDataset, make_dataloader
t0 = time.perf_counter()
ds = ShardDataset(sys.argv[1], mode="pack", seq_len=8, seed=0)
loader = make_dataloader(ds, batch_size=4, num_workers=0)
t1 = time.perf_counter()
batch = next(iter(loader))
t2 = time.perf_counter()
print(orjson.dumps({"construct_s": t1 - t0, "first_batch_s": t2 - t1, "shards": len(ds.index.shards)}).decode())
"""


def bench_sidecars(work: Path, inputs: Path, sizes: list[int], total: int, tokenizer: Path) -> list[dict]:
    rows = []
    for n in sizes:
        out = work / f"status-{n}"
        shutil.rmtree(out, ignore_errors=True)
        measure(plan_cmd(out, input_specs(inputs, n, total), tokenizer))
        started = time.perf_counter()
        measure([sys.executable, "-c", _SYNTH, str(out)])
        os.sync()    # as if every task had fsynced its own files (the synthesizer skipped that)
        print(f"synthesized {n:,} shards + sidecars + logs in {time.perf_counter() - started:.0f}s", file=sys.stderr)
        status = measure(shardprep("status", out))
        fin = measure(shardprep("finalize", out))
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _LOADER, str(out)], capture_output=True, text=True, check=True)
        loader = json.loads(proc.stdout.strip().splitlines()[-1])
        loader["process_s"] = time.perf_counter() - started
        # one more task of a job whose other tasks all finished, paired with a task of the 1-input job
        pairs = [(_rerun(out, t), _rerun(work / "out-1", 0)) for t in (n - 1, n // 2, n // 3, n // 5, 7, 5, 3)]
        late, base = [p[0] for p in pairs], [p[1] for p in pairs]
        rows.append({"sidecars": n, "status_s": status.wall_s, "status_cpu_s": status.cpu_s,
                     "status_rss_mb": status.rss_mb, "finalize_s": fin.wall_s, "finalize_cpu_s": fin.cpu_s,
                     "finalize_rss_mb": fin.rss_mb, **{f"loader_{k}": v for k, v in loader.items()},
                     **{f"late_task_{k}": statistics.median(getattr(x, k) for x in late) for k in _KEYS},
                     **{f"late_base_{k}": statistics.median(getattr(x, k) for x in base) for k in _KEYS}})
        print(f"{n:,} sidecars: status {status.wall_s:.1f}s, finalize {fin.wall_s:.1f}s, loader {loader}, "
              f"late task {rows[-1]['late_task_wall_s']:.2f}s", file=sys.stderr)
    return rows


def _rerun(out: Path, task: int) -> Sample:
    """Run ``task`` (again: its shard, sidecar and log are removed first, so it runs as a first attempt; with
    its log left, it would look for an earlier attempt's temporary files: a glob of the output directory)."""
    for done in (out / f"shard-{task:05d}.tar", out / f"shard-{task:05d}.json", out / "logs" / f"task-{task:05d}.log"):
        done.unlink(missing_ok=True)
    return measure(shardprep("run-task", out, "--task-id", task, "--threads", 1))


# -- report -------------------------------------------------------------------------------------------
def report(plan_rows: list[dict], task_rows: list[dict], side_rows: list[dict], machine: dict) -> str:
    parts = [f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), Python {machine['python']}, "
             f"load average at start {machine['load_avg_at_start']}.", ""]
    parts += ["### `run-task` fixed cost (one 45-byte input; median of rounds; ratio to the 1-input job)", "",
              markdown_table(["inputs in the job", "wall s", "wall ratio", "CPU s", "CPU ratio", "peak RSS MB",
                              "RSS ratio"],
                             [[f"{r['inputs']:,}", r["wall_s"], f"{r['wall_ratio']:.3f}", r["cpu_s"],
                               f"{r['cpu_ratio']:.3f}", r["rss_mb"], f"{r['rss_ratio']:.3f}"] for r in task_rows]), ""]
    parts += ["### `plan`", "",
              markdown_table(["inputs", "wall s", "CPU s", "peak RSS MB", "job.json + plan/ bytes", "paths list bytes",
                              "ratio"],
                             [[f"{r['inputs']:,}", r["wall_s"], r["cpu_s"], r["rss_mb"], f"{r['job_files_bytes']:,}",
                               f"{r['paths_bytes']:,}", f"{r['ratio']:.2f}"] for r in plan_rows]), ""]

    def late(r: dict) -> str:
        return ", ".join(f"{r[f'late_task_{k}'] / r[f'late_base_{k}']:.3f}" for k in _KEYS)

    parts += ["### `status`, `finalize`, loader on N shards; one more task in that finished job (ratio to the"
              " 1-input job, runs paired)", "",
              markdown_table(["sidecars", "status s (CPU)", "status RSS MB", "finalize s (CPU)", "finalize RSS MB",
                              "ShardDataset + first batch s", "one more run-task there: wall, CPU, RSS ratio"],
                             [[f"{r['sidecars']:,}", f"{r['status_s']:.2f} ({r['status_cpu_s']:.2f})",
                               r["status_rss_mb"], f"{r['finalize_s']:.2f} ({r['finalize_cpu_s']:.2f})",
                               r["finalize_rss_mb"], r["loader_construct_s"] + r["loader_first_batch_s"], late(r)]
                              for r in side_rows])]
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10000,100000,1000000")
    ap.add_argument("--sidecars", default="10000,100000")
    ap.add_argument("--work", default="/tmp/shardprep-plan-scale")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs and outputs")
    ap.add_argument("--json", default=None, help="also write the raw numbers here")
    ap.add_argument("--quick", action="store_true", help="sizes up to 100,000 inputs and 10,000 sidecars")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.sidecars = "1,10000,100000", "10000"
    sizes = [int(x) for x in args.sizes.split(",")]
    side_sizes = [int(x) for x in args.sidecars.split(",") if x]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = GPT2 if GPT2.is_file() else work / "demo-tokenizer.json"
    if not GPT2.is_file():
        from shardprep.demo_data import build_sample_tokenizer

        build_sample_tokenizer(tokenizer)
    machine = machine_info()
    total = max(sizes + side_sizes)
    inputs = make_inputs(work, total)
    try:
        plan_rows = bench_plan(work, inputs, sizes, total, tokenizer)
        task_rows = bench_run_task(work, sizes, args.rounds)
        side_rows = bench_sidecars(work, inputs, side_sizes, total, tokenizer)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "plan": plan_rows, "run_task": task_rows,
                                               "sidecars": side_rows, "tokenizer": str(tokenizer)}, indent=2))
    print(report(plan_rows, task_rows, side_rows, machine))


if __name__ == "__main__":
    main()
