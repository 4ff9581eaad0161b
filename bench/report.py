"""How long ``shardprep report`` takes on a 10,000-shard job (issue 15: under 10 s).

The job (see ``build_job``) has real job.json, shards, sidecars, task logs and index.json; ~15,000
chunks in all, so the document-length histogram samples.  It is built once under ``bench/out/report-N``
and reused.  Then each of ``report --json`` and ``report --html`` runs as its own CLI process (start-up,
matplotlib import and all) ``--repeat`` times; the median goes into bench/results/report.md.

    python bench/report.py [--shards 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, markdown_table, run_child  # noqa: E402

from shardprep.job.schema import Job  # noqa: E402
from shardprep.shard.provenance import BackendRecord  # noqa: E402


def _write_task(out: Path, job: Job, task: int, rng: np.random.Generator) -> None:
    """One task's shard through the real ShardWriter, its sidecar (the task's fields) and its log."""
    from shardprep.inputs.readers import SkipLog
    from shardprep.job.task import TaskCost, build_sidecar
    from shardprep.shard.format import shard_name, sidecar_name
    from shardprep.shard.writer import ShardWriter
    from shardprep.storage.atomic import write_json_atomic

    lengths = np.clip(rng.lognormal(5.5, 1.0, size=int(rng.integers(20, 60))), 2, 20_000).astype(np.int64)
    flat = rng.integers(2, job.tokenizer.vocab_size, size=int(lengths.sum()), dtype=np.uint32)
    elapsed = float(rng.uniform(20, 40))
    with ShardWriter(out / shard_name(task), task=task, layout="pack", dtype=job.tokenizer.dtype,
                     chunk_tokens=job.options.chunk_tokens) as writer:
        writer.add(flat, lengths)
        r = writer.close()
    skips = SkipLog()
    for _ in range(int(rng.integers(0, 3))):
        skips.skip("empty", "raw.txt", None)
    backend = BackendRecord("gigatoken", "0.10.0", "auto")
    sidecar = build_sidecar(job, task, r, skips, backend, (), TaskCost(elapsed, 1))
    write_json_atomic(out / sidecar_name(task), sidecar.to_dict())
    start = 1_800_000_000 + task // 64 * 40 + rng.uniform(0, 5)
    stamp = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t % 1 * 1000):03d}"
             for t in (start, start + elapsed)]
    (out / "logs" / f"task-{task:05d}.log").write_text(
        f"{stamp[0]} INFO shardprep.job.task: task {task}: input[0:1]\n"
        f"{stamp[1]} INFO shardprep.job.task: task {task} done: {r.documents} documents\n")


def build_job(work: Path, shards: int) -> Path:
    """A finalized job of ``shards`` shards, planned for real (one input split by --target-task-bytes),
    its shards written by the real ShardWriter with synthetic ids (tokenizing 10,000 tasks for real takes
    ~25 min here, mostly per-task start-up), then finalized for real.  Reused when already there."""
    out = work / "shards"
    if (out / "index.json").exists():
        return out
    from shardprep.api import plan_job
    from shardprep.demo_data import build_sample_tokenizer
    from shardprep.job.finalize import finalize
    from shardprep.job.options import PlanOptions, TokenizeOptions

    work.mkdir(parents=True, exist_ok=True)
    raw = work / "raw.txt"
    raw.write_text("".join(f"document {i} of the synthetic job\n" for i in range(shards * 40)))
    tok = build_sample_tokenizer(work / "tokenizer.json")
    started = time.perf_counter()
    _, job = plan_job([raw], out, tok, TokenizeOptions(chunk_tokens=2048),
                      PlanOptions(target_task_bytes=raw.stat().st_size // shards + 1))
    (out / "logs").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for task in range(job.n_tasks):
        _write_task(out, job, task, rng)
    finalize(out)
    print(f"built {job.n_tasks} shards in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return out


def time_report(out: Path, args: list[str], repeat: int) -> list[float]:
    walls = []
    for _ in range(repeat):
        cmd = [sys.executable, "-c", "import sys,json,resource;from shardprep.cli.main import main;"
               "import contextlib,io\nwith contextlib.redirect_stdout(io.StringIO()): rc=main(sys.argv[1:])\n"
               "print(json.dumps({'rc': rc, 'peak_rss_bytes': resource.getrusage(resource.RUSAGE_SELF)"
               ".ru_maxrss*1024}))", "report", str(out), *args]
        res = run_child(cmd, env={"PYTHONPATH": str(REPO)})
        assert res.result["rc"] == 0, res.result
        walls.append(res.wall_s)
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    a = ap.parse_args()
    out = build_job(a.workdir / f"report-{a.shards}", a.shards)
    html = a.workdir / f"report-{a.shards}" / "page" / "report.html"
    rows = []
    for label, extra in (("--json", ["--json"]), ("--html (figures, PNGs, page)", ["--html", str(html)])):
        walls = time_report(out, extra, a.repeat)
        rows.append([label, a.shards, round(statistics.median(walls), 2), round(min(walls), 2), round(max(walls), 2)])
    m = machine_info()
    print(f"machine: {m['usable_cpus']} CPUs ({m['cpu_model']}), load at start {m['load_avg_at_start']}; "
          f"repetitions: {a.repeat} (median); page size {html.stat().st_size / 1e6:.2f} MB\n")
    print(markdown_table(["command", "shards", "median s", "min s", "max s"], rows))


if __name__ == "__main__":
    main()
