"""Issue 20's benchmark: shardprep end to end against the raw encoder, on the same documents, side by side.

    python bench/encoder_ratio.py [--work DIR] [--task-mb 256] [--file-mb 48] [--cores 1,2]
                                  [--threads 1,2] [--baseline REV] [--job-gb 0] [--quick]

One run on the machine it runs on, every process pinned with ``taskset``:

- one task of ``--task-mb`` on one core, e2e (process start to exit of ``shardprep run-task``) against the
  raw encoder (the gigatoken backend's ``encode_batch`` on the same documents, loaded and warmed up
  beforehand), for txt, jsonl, jsonl.zst and parquet; peak RSS beside it, and ``--baseline`` (a git
  revision, e.g. the previous main) run on the same task for time and memory;
- N single-core tasks on N cores against N raw encoder processes, for each N of ``--cores``;
- one task given T CPUs (``--threads T``, pinned to T cores) against the same task on one;
- ``--backend hf`` against ``tokenizers``' raw ``encode_batch_fast`` (batches of 256 documents) per core;
- start-up: from process start to the task's first encode (its log line), on a one-line input;
- with ``--job-gb``: a whole job with default options (``submit --executor local``) on that many GB.

Ratios are computed within one run only (these machines are noisy); the markdown goes to stdout and
``bench/results/encoder_ratio.md`` (raw numbers beside it as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2, REPO, extract_base, line_corpus, machine_info, markdown_table, write_report  # noqa: E402

FORMATS = ("txt", "jsonl", "jsonl.zst", "parquet")


# -- the corpus -----------------------------------------------------------------------------------------
def make_inputs(work: Path, mb: int, name: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """``name``.txt of ``mb`` MB (one ~280-byte document per line) and the same documents as the other
    formats (jsonl ``{"text": ...}``, zstd jsonl, parquet with 64k-row groups), written by a child process:
    this driver must stay small, since Linux starts a child's ``ru_maxrss`` from its parent's size."""
    out = {fmt: work / f"{name}.{fmt}" for fmt in ("txt", *formats)}
    if not all(p.is_file() for p in out.values()):
        subprocess.run([sys.executable, __file__, "--child", "inputs", str(work), str(mb), name, ",".join(formats)],
                       check=True, env=_env(REPO))
    return out


def write_inputs(work: Path, mb: int, name: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """(in a child) What :func:`make_inputs` describes."""
    import orjson

    txt = work / f"{name}.txt"
    if not txt.is_file():
        line_corpus(txt, mb << 20, seed=zlib.crc32(name.encode()) % 1000)
    out = {"txt": txt}
    docs = None
    for fmt in formats:
        path = work / f"{name}.{fmt}"
        out[fmt] = path
        if fmt == "txt" or path.is_file():
            continue
        docs = docs or txt.read_text(encoding="utf-8").split("\n")[:-1]
        if fmt == "jsonl":
            path.write_bytes(b"".join(orjson.dumps({"text": d}) + b"\n" for d in docs))
        elif fmt == "jsonl.zst":
            import zstandard

            jsonl = work / f"{name}.jsonl"
            if not jsonl.is_file():
                jsonl.write_bytes(b"".join(orjson.dumps({"text": d}) + b"\n" for d in docs))
            path.write_bytes(zstandard.ZstdCompressor(level=3).compress(jsonl.read_bytes()))
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": docs}), path, row_group_size=1 << 16)
    return out


def make_files(work: Path, mb: int, count: int, formats: tuple[str, ...] = ()) -> list[Path]:
    """``count`` txt files of ``mb`` MB (``file00-48mb.txt`` ...), written by one child per CPU at a time:
    10 GB one after another took minutes of a lent machine's time."""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"file{k:02d}-{mb}mb" for k in range(count)]
    with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        return [out["txt"] for out in pool.map(lambda n: make_inputs(work, mb, n, formats), names)]


# -- children ---------------------------------------------------------------------------------------------
def raw_child(kind: str, txt: str, limit_mb: int) -> None:
    """(in a child) The raw encoder on ``txt``'s documents, from memory; prints JSON."""
    texts = Path(txt).read_text(encoding="utf-8").split("\n")[:-1]
    if limit_mb:
        budget, n = limit_mb << 20, 0
        while n < len(texts) and budget > 0:
            budget -= len(texts[n]) + 1
            n += 1
        texts = texts[:n]
    tok_json = GPT2.read_text()
    if kind == "hf":
        import tokenizers

        tok = tokenizers.Tokenizer.from_str(tok_json)
        tok.no_truncation()
        tok.no_padding()

        def encode(batch: list[str]) -> int:
            return sum(len(e.ids) for e in tok.encode_batch_fast(batch, add_special_tokens=False))
        step = 256
    else:
        from shardprep.tokenizer.backend import BACKENDS

        backend = BACKENDS["gigatoken"](tok_json, False)

        def encode(batch: list[str]) -> int:
            return int(backend.encode_batch(batch)[0].size)
        step = 16384
    encode(texts[:step])                                   # warm up: loaded, first call made
    started = time.perf_counter()
    tokens = sum(encode(texts[i:i + step]) for i in range(0, len(texts), step))
    elapsed = time.perf_counter() - started
    print(json.dumps({"tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}))


def _pinned(cores: str, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *cmd] if shutil.which("taskset") else cmd


def _env(checkout: Path) -> dict[str, str]:
    """The environment of a child running ``checkout``'s shardprep.  Children also run with ``cwd`` set to
    the checkout: ``python -m`` puts the working directory first on ``sys.path``, ahead of PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "RAYON_NUM_THREADS": "1"}


def run_raw(kind: str, txt: Path, cores: list[int], limit_mb: int = 0) -> dict:
    """The raw encoder in one process per core of ``cores``, at once; tokens/s summed."""
    cmd = [sys.executable, __file__, "--child", kind, str(txt), str(limit_mb)]
    procs = [subprocess.Popen(_pinned(str(c), cmd), stdout=subprocess.PIPE, env=_env(REPO)) for c in cores]
    results = [json.loads(p.communicate()[0].decode().splitlines()[-1]) for p in procs]
    return {"tokens": sum(r["tokens"] for r in results), "tokens_per_s": sum(r["tokens_per_s"] for r in results)}


def plan(checkout: Path, inputs: list[Path], out: Path, *extra: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "shardprep", "plan", "-o", str(out), "-t", str(GPT2), "--one-file-per-task",
           *extra]
    for i in inputs:
        cmd += ["-i", str(i)]
    subprocess.run(cmd, env=_env(checkout), cwd=checkout, check=True, capture_output=True)


def run_tasks(checkout: Path, out: Path, task_cores: list[str], threads: int = 1) -> dict:
    """Task k of the plan in ``out`` pinned to ``task_cores[k]``, all at once: wall from start to the last
    exit, CPU time (user + system, the tasks and their workers) and the largest peak RSS from the kernel's
    accounting of each process (``wait4``: the same for every checkout, whatever its sidecar reports)."""
    import tempfile

    procs = []
    started = time.perf_counter()
    for k, cores in enumerate(task_cores):
        cmd = [sys.executable, "-m", "shardprep", "run-task", str(out), "--task-id", str(k), "--threads", str(threads)]
        err = tempfile.TemporaryFile()
        procs.append((subprocess.Popen(_pinned(cores, cmd), env=_env(checkout), cwd=checkout, stderr=err), err))
    cpu, rss = 0.0, 0
    for p, err in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        rss = max(rss, usage.ru_maxrss << 10)
        if p.returncode:
            err.seek(0)
            raise RuntimeError(f"run-task failed: {err.read().decode()[-2000:]}")
    wall = time.perf_counter() - started
    sides = [json.loads((out / f"shard-{k:05d}.json").read_text()) for k in range(len(task_cores))]
    tokens = sum(s["tokens"] for s in sides)
    return {"wall_s": wall, "cpu_s": cpu, "tokens": tokens, "tokens_per_s": tokens / wall,
            "tokens_per_cpu_s": tokens / cpu, "peak_rss_mb": rss / 2**20,
            "backend": sides[0]["backend"]["name"], "sha256": [s["sha256"] for s in sides]}


def startup(checkout: Path, work: Path) -> float:
    """Seconds from spawning ``run-task`` to its first encode, on a one-line input (the task log's line
    announcing the backend is written just before it encodes)."""
    tiny = work / "tiny.txt"
    tiny.write_text("one short document\n")
    out = work / "out-startup"
    plan(checkout, [tiny], out)
    spawned = time.time()
    run_tasks(checkout, out, ["0"])
    log = (out / "logs" / "task-00000.log").read_text().splitlines()
    line = next(ln for ln in log if "backend" in ln)
    stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
    return stamp - spawned


# -- the measurements ---------------------------------------------------------------------------------------
def _best(runs: list[dict], raws: list[float]) -> dict:
    """The best round of ``runs`` (least CPU time) with the median of the per-round ratios to ``raws`` (the
    raw encoder's tokens/s measured in the same rounds): what a core spends, robust to one noisy round."""
    import statistics

    best = min(runs, key=lambda r: r["cpu_s"])
    ratios = [r["tokens_per_cpu_s"] / raw for r, raw in zip(runs, raws)]
    return {**best, "wall_s": min(r["wall_s"] for r in runs), "raw_tokens_per_s": max(raws),
            "ratio": statistics.median(ratios), "ratios": [round(x, 3) for x in ratios]}


def single_core(work: Path, task_mb: int, base: Path | None, formats: tuple[str, ...], rounds: int) -> list[dict]:
    """Each format's task on one core, this checkout and the baseline interleaved, ``rounds`` times; the
    raw encoder measured again in every round."""
    files = make_inputs(work, task_mb, f"task-{task_mb}mb", formats)
    codes = [("shardprep", REPO)] + ([("baseline", base)] if base else [])
    runs: dict[tuple[str, str], list[dict]] = {(f, c): [] for f in formats for c, _ in codes}
    raws: list[float] = []
    for r in range(rounds):
        raws.append(run_raw("gigatoken", files["txt"], [0])["tokens_per_s"])
        for fmt in formats:
            for label, checkout in codes if r % 2 == 0 else reversed(codes):
                out = work / f"out-{label}-{fmt.replace('.', '-')}"
                plan(checkout, [files[fmt]], out)
                got = run_tasks(checkout, out, ["0"])
                runs[(fmt, label)].append(got)
                print(f"  round {r + 1}: 1 core {fmt:9s} {label:9s} {got['tokens_per_cpu_s'] / 1e6:6.1f} Mtok/cpu-s "
                      f"= {got['tokens_per_cpu_s'] / raws[-1]:.2f}x raw, {got['peak_rss_mb']:.0f} MiB", file=sys.stderr)
    return [{"format": f, "code": c, **_best(got, raws)} for (f, c), got in runs.items()]


def many_cores(work: Path, file_mb: int, counts: list[int], rounds: int) -> list[dict]:
    """N tasks on N cores against N raw encoder processes (wall clock: both fill the same cores)."""
    files = make_files(work, file_mb, max(counts))
    rows = []
    for n in counts:
        best: dict | None = None
        for _ in range(rounds):
            raw = run_raw("gigatoken", files[0], list(range(n)))
            out = work / f"out-cores-{n}"
            plan(REPO, files[:n], out)
            got = run_tasks(REPO, out, [str(c) for c in range(n)])
            ratio = got["tokens_per_s"] / raw["tokens_per_s"]
            if best is None or ratio > best["ratio"]:
                best = {"cores": n, **got, "raw_tokens_per_s": raw["tokens_per_s"], "ratio": ratio}
        assert best is not None
        rows.append(best)
        print(f"  {n} tasks on {n} cores: {best['ratio']:.2f}x {n} raw encoders", file=sys.stderr)
    return rows


def threads(work: Path, task_mb: int, counts: list[int], rounds: int) -> list[dict]:
    """One task given T CPUs against the same task on one: every T in every round, one after another; the
    speedup is the median of the rounds' ratios of wall times (each round's T = 1 against its own T), the
    row shows the best round."""
    import statistics

    txt = make_inputs(work, task_mb, f"task-{task_mb}mb", ())["txt"]
    runs: dict[int, list[dict]] = {t: [] for t in counts}
    for _ in range(rounds):
        for t in counts:
            out = work / f"out-threads-{t}"
            plan(REPO, [txt], out)
            runs[t].append(run_tasks(REPO, out, [f"0-{t - 1}" if t > 1 else "0"], threads=t))
    one = runs[counts[0]]
    rows = []
    for t, got in runs.items():
        speedups = [a["wall_s"] / b["wall_s"] for a, b in zip(one, got)]
        rows.append({"threads": t, **min(got, key=lambda r: r["wall_s"]), "speedup": statistics.median(speedups),
                     "speedups": [round(x, 2) for x in speedups],
                     "same_shard": all(r["sha256"] == one[0]["sha256"] for r in got)})
    for r in rows:
        print(f"  one task, {r['threads']} thread(s): {r['speedup']:.2f}x one thread ({r['speedups']})", file=sys.stderr)
    return rows


def hf_backend(work: Path, mb: int, rounds: int) -> dict:
    """``--backend hf`` on one core against raw ``encode_batch_fast`` on the same core, ``rounds`` times
    (the raw encoder measured again in every round; the median of the rounds' ratios)."""
    txt = make_inputs(work, mb, f"hf-{mb}mb", ("txt",))["txt"]
    out = work / "out-hf"
    raws, runs = [], []
    for r in range(rounds):
        raws.append(run_raw("hf", txt, [0])["tokens_per_s"])
        plan(REPO, [txt], out, "--backend", "hf")          # afresh: a finished task is not run again
        runs.append(run_tasks(REPO, out, ["0"]))
        print(f"  round {r + 1}: --backend hf {runs[-1]['tokens_per_cpu_s'] / raws[-1]:.2f}x raw", file=sys.stderr)
    return _best(runs, raws)


def whole_job(work: Path, gb: float, file_mb: int) -> dict:
    n = max(1, round(gb * 1024 / file_mb))
    files = make_files(work, file_mb, n, ("txt",))
    out = work / "out-job"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "shardprep", "submit", "--executor", "local", "-o", str(out), "-t", str(GPT2),
           "--no-progress"] + [a for f in files for a in ("-i", str(f))]
    started = time.perf_counter()
    subprocess.run(cmd, env=_env(REPO), check=True, capture_output=True)
    wall = time.perf_counter() - started
    index = json.loads((out / "index.json").read_text())
    raw = run_raw("gigatoken", files[0], [0])
    encoder_alone = index["totals"]["tokens"] / (raw["tokens_per_s"] * (os.cpu_count() or 1))
    return {"gb": gb, "files": n, "wall_s": wall, "tasks": len(index["shards"]), "tokens": index["totals"]["tokens"],
            "encoder_alone_s": encoder_alone}


# -- report ------------------------------------------------------------------------------------------------
PARTS = ("startup", "single", "cores", "threads", "hf")


def report(res: dict) -> str:
    """The markdown report of whichever parts ran (``--only``)."""
    m = res["machine"]
    parts = [f"## shardprep vs the raw encoder (issue 20)\n\nMachine: {m['cpu_model']}, {m['usable_cpus']} usable "
             f"CPU(s), Python {m['python']}, gigatoken {m['versions']['gigatoken']}, tokenizers "
             f"{m['versions']['tokenizers']}; load average at start {m['load_avg_at_start']}. Command: "
             f"`python bench/encoder_ratio.py {res['argv']}`.\n"]
    if res.get("single_core"):
        rows = [[r["format"], r["code"], f"{r['tokens']:,}", r["wall_s"], r["cpu_s"], r["tokens_per_cpu_s"] / 1e6,
                 r["raw_tokens_per_s"] / 1e6, r["ratio"], ", ".join(f"{x:.2f}" for x in r["ratios"]), r["peak_rss_mb"]]
                for r in res["single_core"]]
        parts.append(f"One task of {res['task_mb']} MB on one core (e2e: `run-task` from process start to exit; "
                     f"{res.get('rounds', 1)} rounds interleaved, best CPU time, the ratio is the median of the "
                     "rounds' ratios of tokens per CPU second to the raw encoder's tokens/s in the same round; peak "
                     "RSS from the kernel's accounting of the task process):\n\n"
                     + markdown_table(["input", "code", "tokens", "wall s", "CPU s", "Mtok/CPU-s", "raw Mtok/s",
                                       "ratio", "rounds", "peak RSS MiB"], rows))
    if res.get("many_cores"):
        rows = [[r["cores"], r["wall_s"], r["tokens_per_s"] / 1e6, r["raw_tokens_per_s"] / 1e6, r["ratio"]]
                for r in res["many_cores"]]
        parts.append(f"N single-core tasks of {res['file_mb']} MB on N cores, against N raw encoder processes:\n\n"
                     + markdown_table(["N", "wall s", "Mtok/s", "raw Mtok/s", "ratio"], rows))
    if res.get("threads"):
        rows = [[r["threads"], r["wall_s"], r["tokens_per_s"] / 1e6, r["speedup"], ", ".join(map(str, r["speedups"])),
                 r["peak_rss_mb"], r["same_shard"]] for r in res["threads"]]
        parts.append(f"One task of {res['task_mb']} MB given T CPUs (`--threads T`, pinned to T cores; best round, "
                     "the speedup is the median of the rounds' ratios to T = 1 in the same round):\n\n"
                     + markdown_table(["T", "wall s", "Mtok/s", "speedup", "rounds", "peak RSS MiB (task)",
                                       "same shard"], rows))
    if res.get("hf"):
        h = res["hf"]
        parts.append(f"`--backend hf`, one core, {res['hf_mb']} MB: {h['tokens_per_cpu_s'] / 1e6:.3f} Mtok per CPU "
                     f"second e2e against {h['raw_tokens_per_s'] / 1e6:.3f} raw `encode_batch_fast` (256 documents "
                     f"per call): **{h['ratio']:.2f}x** (median of the rounds {h['ratios']}).")
    if "startup_s" in res:
        parts.append(f"Start-up (process start to the first encode, one-line input): **{res['startup_s']:.3f} s**.")
    if res.get("job"):
        j = res["job"]
        parts.append(f"Whole job, default options, local executor: {j['gb']} GB in {j['files']} files -> {j['tasks']} "
                     f"tasks, {j['tokens']:,} tokens in **{j['wall_s']:.1f} s** (the encoder alone on every core: "
                     f"{j['encoder_alone_s']:.1f} s).")
    return "\n\n".join(parts) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "inputs":
            write_inputs(Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5], tuple(f for f in sys.argv[6].split(",") if f))
        else:
            raw_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ncpu = len(os.sched_getaffinity(0))
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardprep-encoder-ratio"))
    ap.add_argument("--task-mb", type=int, default=256)
    ap.add_argument("--file-mb", type=int, default=48)
    ap.add_argument("--hf-mb", type=int, default=32, help="the hf task (~13 s a round here: its fixed ~0.3 s is 3%%)")
    ap.add_argument("--cores", default=",".join(str(n) for n in sorted({1, 2, 4, 8, 16, ncpu}) if n <= ncpu))
    ap.add_argument("--threads", default=",".join(str(n) for n in sorted({1, 2, 4, 8, ncpu}) if n <= min(ncpu, 8)))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--baseline", default=None, help="a git revision run on the same single-core tasks")
    ap.add_argument("--job-gb", type=float, default=0.0, help="also run a whole default job of this many GB")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every measurement (interleaved)")
    ap.add_argument("--only", default=",".join(PARTS), help=f"the parts to run, of {','.join(PARTS)}")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run of the script)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "encoder_ratio.md")
    args = ap.parse_args()
    if args.quick:
        args.task_mb, args.file_mb, args.hf_mb, args.rounds = 16, 8, 1, 1
    args.work.mkdir(parents=True, exist_ok=True)
    base = extract_base(args.baseline, args.work)[0] if args.baseline else None
    res: dict = {"machine": machine_info(), "argv": " ".join(sys.argv[1:]), "task_mb": args.task_mb,
                 "file_mb": args.file_mb, "hf_mb": args.hf_mb}
    only = set(args.only.split(","))
    res["rounds"] = args.rounds
    if "startup" in only:
        res["startup_s"] = min(startup(REPO, args.work) for _ in range(3))
    if "single" in only:
        res["single_core"] = single_core(args.work, args.task_mb, base, tuple(args.formats.split(",")), args.rounds)
    if "cores" in only:
        res["many_cores"] = many_cores(args.work, args.file_mb, [int(n) for n in args.cores.split(",")], args.rounds)
    if "threads" in only:
        res["threads"] = threads(args.work, args.task_mb, [int(n) for n in args.threads.split(",")], args.rounds)
    if "hf" in only:
        res["hf"] = hf_backend(args.work, args.hf_mb, args.rounds)
    if args.job_gb:
        res["job"] = whole_job(args.work, args.job_gb, args.file_mb)
    write_report(args.out, report(res), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
