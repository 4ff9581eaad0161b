"""Issue 12 acceptance: 3,000 small jsonl files of Korean text (~45 KB each) through the live dev cluster
with default options, timed from `submit` to a verified index, and checked token-exact.

    bash slurm/dev-cluster.sh up
    python3 bench/small_files.py [--files 3000] [--file-bytes 45000] [--baseline-files 300] > report.md

1. Generates the corpus (deterministic; synthetic Korean reviews, UTF-8 jsonl with an id and a rating).
2. `shardprep submit --executor slurm --input DIR --output OUT --tokenizer gpt2 --cpus-per-task 1`
   (nothing else), waits for the array and the finalize job in `squeue`, then `shardprep verify OUT`.
   The wall clock covers all of it.
3. Token-exact: every document read back from the shards equals `tokenizers`' own encoding of the same
   text (json.loads of each line, `encode_special_tokens`, EOS appended), in plan order.
4. With --baseline-files N: the same submit with `--one-file-per-task` on the first N files (the shape
   before issue 12), for tasks per minute of the old default.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import GPT2, machine_info  # noqa: E402

SYLLABLES = [chr(c) for c in range(0xAC00, 0xD7A4, 7)]
PHRASES = ["배송이 빠르고", "품질이 좋아요", "가격 대비 만족합니다", "다시 구매할게요", "포장이 꼼꼼해요",
           "생각보다 작아요", "색상이 사진과 달라요", "추천합니다", "별로예요", "사이즈가 잘 맞아요"]


def _review(rng: random.Random) -> str:
    words = [rng.choice(PHRASES) if rng.random() < 0.3 else
             "".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(rng.randint(15, 120))]
    text = " ".join(words)
    return text + rng.choice([".", "!", " ㅎㅎ", " 👍", "..."]) + (f" {rng.randint(1, 99)}개 샀어요" if rng.random() < .2 else "")


def make_corpus(root: Path, files: int, file_bytes: int) -> int:
    """``files`` jsonl files of about ``file_bytes`` each; returns the total bytes."""
    root.mkdir(parents=True, exist_ok=True)
    total = 0
    for k in range(files):
        rng = random.Random(k)
        lines, size, n = [], 0, 0
        while size < file_bytes:
            line = json.dumps({"id": f"{k}-{n}", "rating": rng.randint(1, 5), "text": _review(rng)},
                              ensure_ascii=False) + "\n"
            lines.append(line)
            size += len(line.encode())
            n += 1
        data = "".join(lines).encode()
        (root / f"reviews-{k:05d}.jsonl").write_bytes(data)
        total += len(data)
    return total


def _shardprep(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardprep", *map(str, args)], capture_output=True, text=True,
                          check=True)


def _wait(job_ids: list[str], timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i"], capture_output=True,
                             text=True).stdout
        if not out.strip():
            return
        time.sleep(0.2)
    raise SystemExit(f"jobs {job_ids} still queued after {timeout} s")


def run_job(corpus: Path, out: Path, *extra: str) -> dict:
    """Submit, wait, verify; the wall clock of all three and what the plan chose."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = _shardprep("submit", "--executor", "slurm", "--input", corpus, "--output", out, "--tokenizer", GPT2,
                      "--cpus-per-task", "1", *extra)
    t_submit = time.perf_counter() - t0
    ids = next(line.split(":", 1)[1] for line in proc.stdout.splitlines() if line.startswith("submitted job(s):"))
    _wait([i.strip() for i in ids.split(",")])
    t_done = time.perf_counter() - t0
    if not (out / "index.json").exists():
        raise SystemExit(f"no index.json in {out}; see {out}/logs")
    _shardprep("verify", out)
    wall = time.perf_counter() - t0
    index = json.loads((out / "index.json").read_text())
    shard_bytes = [s["bytes"] for s in index["shards"]]
    sizing = next((ln for ln in proc.stdout.splitlines() if ln.startswith("sizing:")), "")
    return {"wall_s": wall, "submit_s": t_submit, "done_s": t_done, "verify_s": wall - t_done,
            "tasks": len(index["shards"]), "tokens": index["totals"]["tokens"], "sizing": sizing,
            "min_shard_bytes": min(shard_bytes), "max_shard_bytes": max(shard_bytes)}


def token_exact(out: Path) -> int:
    """Documents compared; raises on the first difference."""
    from tokenizers import Tokenizer

    from shardprep.job.plan_files import TaskTable
    from shardprep.job.state import load_job
    from shardprep.shard.index import read_index
    from shardprep.shard.reader import iter_shard_documents
    from shardprep.shard.sidecar import Sidecar

    tok = Tokenizer.from_file(str(GPT2))
    tok.encode_special_tokens = True
    eos = tok.token_to_id("<|endoftext|>")
    texts: list[str] = []
    with TaskTable(out, load_job(out)) as table:
        for task in table:
            for item in task.items:
                data = Path(item.input.path).read_bytes()
                data = data[item.work.start:item.work.end]
                texts += [json.loads(line)["text"] for line in data.splitlines() if line.strip()]
    got = iter(d.tolist() for e in read_index(out).shards
               for d in iter_shard_documents(out / e.name, Sidecar.parse((out / e.sidecar).read_bytes(), e.sidecar)))
    n = 0
    for k in range(0, len(texts), 4096):
        for text, enc in zip(texts[k:k + 4096], tok.encode_batch(texts[k:k + 4096], add_special_tokens=False)):
            if next(got) != enc.ids + [eos]:
                raise SystemExit(f"document {n} differs: {text[:80]!r}")
            n += 1
    if next(got, None) is not None:
        raise SystemExit("the shards hold more documents than the inputs")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--file-bytes", type=int, default=45_000)
    ap.add_argument("--baseline-files", type=int, default=0, help="also run --one-file-per-task on N files")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardprep-small-files"))
    args = ap.parse_args()
    corpus = args.work / "corpus"
    shutil.rmtree(args.work, ignore_errors=True)
    total = make_corpus(corpus, args.files, args.file_bytes)
    r = run_job(corpus, args.work / "out")
    docs = token_exact(args.work / "out")
    print("## Small files through the live dev cluster (issue 12)\n")
    m = machine_info()
    print(f"Machine: {m['usable_cpus']} CPUs ({m['cpu_model']}), load at start {m['load_avg_at_start']}, "
          f"tokenizers {m['versions']['tokenizers']}, gigatoken {m['versions']['gigatoken']}.")
    print(f"\n{args.files:,} jsonl files of ~{args.file_bytes:,} bytes of Korean reviews ({total / 1e6:.1f} MB), "
          f"`shardprep submit --executor slurm --input DIR --output OUT --tokenizer gpt2 --cpus-per-task 1`:\n")
    print(f"- {r['sizing']}")
    print(f"- submit (plan + sbatch) {r['submit_s']:.1f} s; array + finalize done at {r['done_s']:.1f} s; "
          f"verify {r['verify_s']:.1f} s; **total {r['wall_s']:.1f} s** for {r['tasks']} task(s), "
          f"{r['tokens']:,} tokens")
    print(f"- shards {r['min_shard_bytes'] / 2**20:.1f} to {r['max_shard_bytes'] / 2**20:.1f} MiB")
    print(f"- token-exact: {docs:,} documents equal `tokenizers`' own encoding, in plan order")
    if args.baseline_files:
        base_dir = args.work / "base-corpus"
        base_dir.mkdir()
        for p in sorted(corpus.iterdir())[:args.baseline_files]:
            (base_dir / p.name).symlink_to(p)
        b = run_job(base_dir, args.work / "base-out", "--one-file-per-task")
        rate = b["tasks"] / b["done_s"] * 60
        print(f"- before (one file per task), {args.baseline_files} of the files: {b['tasks']} tasks, "
              f"{b['done_s']:.1f} s to done ({rate:.0f} tasks/min): all {args.files:,} files would take "
              f"~{args.files / rate:.0f} min; the default is {args.files / rate * 60 / r['wall_s']:.0f}x faster")


if __name__ == "__main__":
    main()
