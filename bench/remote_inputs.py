"""Issue 22, "Tokenize straight from object storage": one task reading its input from a local S3 server (moto)
against the same task reading the same file from local disk, measured side by side in one run; and the
whole job (plan, tokenize) straight from S3 against `stage` to local disk first, then the same job.

What is measured (``python -m shardprep run-task OUT --task-id 0`` as a Slurm array task runs it, one child
per run, rounds alternating local and remote so load changes hit both alike):

- end-to-end tokens/s of the task (tokens / wall time of the whole process: start-up, reading, the check
  against hf, writing), and its ratio remote/local per round (the target: >= 0.8, the median of rounds);
- the task's peak RSS (its sidecar's ``stats.peak_rss_bytes``; with ``--threads 2`` the task's own and its
  encode workers', added up as the sidecar records them) and its remote requests, retries and bytes
  (``stats.remote``); the shards of both runs must be byte-identical;
- the S3 server's CPU time during each remote run (moto is one Python process on the same cores);
- stage-then-tokenize: `shardprep stage` of the prefix to local disk, then plan + the task, against plan +
  the task straight from S3 (the time a user saves by not staging).

Corpus: unique English documents (bench/common.py, from ../shared/corpus), ``--mb`` MB of jsonl written as
files of ``--object-mb`` MB (the shape of a sharded dataset, e.g. `export-hf`'s part files), all in one task
(``--target-task-bytes`` above the total), tokenized with ../shared/tokenizers/gpt2 and ``--backend auto``.
The task runs with ``--threads 1`` (one core; moto has the other), and with ``--threads 2`` unless ``--quick``.

Why objects of 16 MB and not one large one: moto serves a ranged GET by reading the whole object (its CPU
per GET grows with the object's size: ~10 ms for 16 MiB, ~86 ms for 128 MiB on this machine, whatever the
range), which real S3 does not.  The one-object case is measured too (unless ``--quick``), and its moto
CPU per request is reported beside it.

Usage: python bench/remote_inputs.py [--mb 128] [--rounds 3] [--quick] [--work /tmp/shardprep-remote-bench]
       [--out bench/results/remote_inputs.md]
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
from common import GPT2, REPO, english_corpus, machine_info, markdown_table, write_report  # noqa: E402
from stage import ENV, free_port, process_cpu_s, start_server  # noqa: E402

from shardprep.storage.atomic import sha256_file  # noqa: E402

BUCKET = "remote-bench"


def env() -> dict[str, str]:
    return {**os.environ, **ENV, "PYTHONPATH": str(REPO)}


def shardprep(*args: object) -> list[str]:
    return [sys.executable, "-m", "shardprep", *map(str, args)]


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=REPO)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def split_corpus(corpus: Path, directory: Path, object_bytes: int) -> None:
    """``corpus`` cut at line ends into files of about ``object_bytes``."""
    directory.mkdir(parents=True, exist_ok=True)
    part: list[bytes] = []
    size = k = 0
    with open(corpus, "rb") as f:
        for line in f:
            part.append(line)
            size += len(line)
            if size >= object_bytes:
                (directory / f"part-{k:03d}.jsonl").write_bytes(b"".join(part))
                part, size, k = [], 0, k + 1
    if part:
        (directory / f"part-{k:03d}.jsonl").write_bytes(b"".join(part))


def upload(endpoint: str, files: list[Path], prefix: str) -> str:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])
    if not any(b["Name"] == BUCKET for b in client.list_buckets()["Buckets"]):
        client.create_bucket(Bucket=BUCKET)
    for f in files:
        client.upload_file(str(f), BUCKET, f"{prefix}/{f.name}")
    return f"s3://{BUCKET}/{prefix}/"


def plan(inputs: str, out: Path, endpoint: str, total: int) -> float:
    """One task for everything under ``inputs`` (packed: the target is above the total)."""
    return timed(shardprep("plan", "--input", inputs, "--output", out, "--tokenizer", GPT2, "--target-task-bytes",
                           total + (1 << 20), "--endpoint-url", endpoint, "--overwrite"))


def run_task(out: Path, threads: int, server_pid: int) -> dict:
    """One run of task 0 from scratch: wall, tokens/s, peak RSS, remote counts, the server's CPU."""
    for stale in out.glob("shard-*"):
        stale.unlink()
    cpu_before = process_cpu_s(server_pid)
    wall = timed(shardprep("run-task", out, "--task-id", 0, "--threads", threads))
    sidecar = json.loads((out / "shard-00000.json").read_text())
    return {"wall_s": wall, "tokens": sidecar["tokens"], "tokens_per_s": sidecar["tokens"] / wall,
            "peak_rss_bytes": sidecar["stats"]["peak_rss_bytes"], "remote": sidecar["stats"].get("remote"),
            "server_cpu_s": process_cpu_s(server_pid) - cpu_before}


def compare(outs: dict[str, Path], threads: int, rounds: int, server_pid: int, layout: str) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in outs}
    for _ in range(rounds):
        for name, out in outs.items():
            runs[name].append(run_task(out, threads, server_pid))
    # hashed, not read whole: a child's peak RSS starts at this process's (Linux carries ru_maxrss over exec)
    shards = {name: sha256_file(out / "shard-00000.tar") for name, out in outs.items()}
    ratios = [r["tokens_per_s"] / lo["tokens_per_s"] for r, lo in zip(runs["s3"], runs["local"])]
    return {"layout": layout, "threads": threads, "runs": runs, "ratios": ratios,
            "median_ratio": statistics.median(ratios), "identical_shards": len(set(shards.values())) == 1}


def stage_then_tokenize(prefix: str, endpoint: str, work: Path, server_pid: int, total: int) -> dict:
    staged, out = work / "staged", work / "staged-out"
    shutil.rmtree(staged, ignore_errors=True)
    stage_s = timed(shardprep("stage", prefix, staged, "--endpoint-url", endpoint, "--no-progress"))
    plan_s = plan(str(staged), out, endpoint, total)
    task = run_task(out, 1, server_pid)
    return {"stage_s": stage_s, "plan_s": plan_s, "task_s": task["wall_s"],
            "total_s": stage_s + plan_s + task["wall_s"]}


def report(results: dict) -> str:
    m = results["machine"]
    lines = ["# Tokenizing straight from S3 (issue 22)\n",
             f"Corpus: {results['corpus']['file_bytes'] / (1 << 20):.0f} MiB of English jsonl "
             f"({results['corpus']['documents']:,} documents), GPT-2, `--backend auto`, all of it in one task; "
             f"moto on 127.0.0.1.  Machine: {m['cpus']} CPUs ({m['cpu_model']}), load average at start "
             f"{m['load_avg_at_start']}.\n"]
    for case in results["cases"]:
        rows = []
        for name in ("local", "s3"):
            for k, r in enumerate(case["runs"][name]):
                remote = r["remote"] or {}
                rows.append([name, k + 1, r["wall_s"], r["tokens_per_s"] / 1e6, r["peak_rss_bytes"] / (1 << 20),
                             remote.get("requests", "-"), remote.get("retries", "-"),
                             r["server_cpu_s"] if name == "s3" else "-"])
        lines.append(f"## {case['layout']}, one task, `--threads {case['threads']}`\n")
        lines.append(markdown_table(["input", "round", "wall s", "e2e Mtok/s", "peak RSS MiB", "requests",
                                     "retries", "moto CPU s"], rows))
        lines.append(f"\nremote/local e2e tokens/s per round: {', '.join(f'{x:.2f}' for x in case['ratios'])}; "
                     f"median **{case['median_ratio']:.2f}x** (target >= 0.8); shards byte-identical: "
                     f"{case['identical_shards']}\n")
    s, d = results["stage_then_tokenize"], results["direct"]
    lines.append("## The whole job: stage then tokenize, or straight from S3 (`--threads 1`)\n")
    lines.append(markdown_table(["path", "stage s", "plan s", "task s", "total s"], [
        ["stage to local disk, then plan + task", s["stage_s"], s["plan_s"], s["task_s"], s["total_s"]],
        ["plan + task straight from S3", "-", d["plan_s"], d["task_s"], d["total_s"]]]))
    lines.append(f"\nTime saved by not staging: {s['total_s'] - d['total_s']:.1f} s "
                 f"({(s['total_s'] - d['total_s']) / s['total_s']:.0%}), and no staged copy on disk "
                 f"({results['corpus']['file_bytes'] / (1 << 20):.0f} MiB).\n")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=128, help="corpus size in MB (default 128)")
    ap.add_argument("--object-mb", type=int, default=16, help="size of each object in MB (default 16)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="32 MB, 2 rounds, --threads 1 only")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardprep-remote-bench"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "remote_inputs.md"))
    args = ap.parse_args()
    if args.quick:
        args.mb, args.rounds = 32, 2
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / f"english-{args.mb}mb.jsonl"
    info = english_corpus(corpus, args.mb << 20) if not corpus.exists() else {
        "file_bytes": corpus.stat().st_size, "documents": sum(1 for _ in open(corpus, "rb")), "text_bytes": None}
    parts = args.work / f"parts-{args.mb}mb-{args.object_mb}"
    if not parts.exists():
        split_corpus(corpus, parts, args.object_mb << 20)
    total = corpus.stat().st_size
    port = free_port()
    server = start_server([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        layouts = [(f"{len(list(parts.iterdir()))} objects of ~{args.object_mb} MiB", parts,
                    sorted(parts.iterdir()), "parts")]
        if not args.quick:
            layouts.append(("one object", corpus, [corpus], "whole"))
        cases, direct = [], None
        for layout, local, files, prefix in layouts:
            url = upload(endpoint, files, prefix)
            outs = {"local": args.work / f"local-{prefix}", "s3": args.work / f"s3-{prefix}"}
            plan(str(local), outs["local"], endpoint, total)
            plan_s = plan(url if prefix == "parts" else url + corpus.name, outs["s3"], endpoint, total)
            for threads in ((1,) if args.quick or prefix == "whole" else (1, 2)):
                cases.append(compare(outs, threads, args.rounds, server.pid, layout))
            if direct is None:
                task_s = statistics.median(r["wall_s"] for r in cases[0]["runs"]["s3"])
                direct = {"plan_s": plan_s, "task_s": task_s, "total_s": plan_s + task_s, "prefix": url}
        results = {"machine": machine_info(), "corpus": info, "cases": cases, "direct": direct,
                   "stage_then_tokenize": stage_then_tokenize(direct["prefix"], endpoint, args.work, server.pid,
                                                              total)}
    finally:
        server.terminate()
        server.wait(timeout=30)
    write_report(args.out, report(results), results)


if __name__ == "__main__":
    main()
