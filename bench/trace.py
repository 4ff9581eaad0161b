"""``shardprep trace --step 1000000`` of a 3-source mixture over 100,000 shards in all, against the 1 s target.

The data is synthetic but read by the real code path: each source is one real shard (``ShardWriter``, random
ids, documents of 50 to 2,000 tokens) and its sidecar, and an index.json listing N entries
``shard-NNNNN.tar``/``.json``, each a symbolic link to that shard and sidecar (the loader checks names,
sizes and totals; it reads only the sidecars and document lengths of the shards a batch touches).  Sources
of 50,000, 30,000 and 20,000 shards, weights 0.5 / 0.3 / 0.2, pack mode, seq_len 2048, 8 ranks x batch 4:
step 10**6 reads 32 M rows, several epochs of the smaller sources.

Measured in this process, each repeated (median of ``--repeat``): the index load (three index.json files
and their directory listings: ``Reading``), the answer on an open reading (``answer``: timeline, batches,
documents, sidecars), and ``shardprep trace SPEC --step 1000000 --world-size 8
--batch-size 4 --seq-len 2048 --json`` end to end through ``cli.main`` (every rank, output written to a
buffer), and its ``--rank 0`` variant.

    python bench/trace.py                 # builds bench/out/trace/ once (about 200,000 links), then times
    python bench/trace.py --shards 3000   # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCES = (("web", 0.5, 0.5), ("code", 0.3, 0.3), ("math", 0.2, 0.2))    # name, weight, share of the shards
TARGET_S = 1.0


def write_source(root: Path, name: str, shards: int, seed: int) -> Path:
    """One source: a real shard and sidecar, and ``shards`` index entries linking to them."""
    from shardprep.shard.format import ORIGINS_FORMAT_VERSION, shard_name
    from shardprep.shard.index import Index, IndexShard, IndexTokenizer, IndexTotals
    from shardprep.shard.origins import DocOrigins, encode_origins
    from shardprep.shard.sidecar import Sidecar, SidecarInput
    from shardprep.shard.writer import ShardWriter
    from shardprep.storage.atomic import write_json_atomic

    out = root / name
    if (out / "index.json").exists() and len(json.loads((out / "index.json").read_bytes())["shards"]) == shards:
        return out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 2000, 200)
    writer = ShardWriter(out / "real.tar", task=0, layout="pack", dtype="uint16", chunk_tokens=1 << 16)
    writer.add(rng.integers(1, 50_000, int(lengths.sum())).astype(np.uint16), lengths)
    result = writer.close()
    docs = len(lengths)           # format 3: every document's origin, as a real task writes it (one input)
    origins = encode_origins(DocOrigins.of(np.zeros(docs), np.cumsum(lengths * 4) - lengths * 4, np.arange(1, docs + 1)))
    side = Sidecar.holding(result, format_version=ORIGINS_FORMAT_VERSION, created_by="bench", task=0,
                           shard="real.tar", plan_fingerprint=f"bench-{name}", tokenizer_fingerprint="tok",
                           layout="pack", dtype="uint16", chunks=result.chunks,
                           inputs=(SidecarInput(f"/data/{name}/part-0.jsonl", 0, None, "byte", 1, input=0),),
                           origins_record=origins)
    write_json_atomic(out / "real.json", side.to_dict())
    entries = []
    for i in range(shards):
        for suffix in (".tar", ".json"):
            link = out / shard_name(i).replace(".tar", suffix)
            if not link.is_symlink():
                os.symlink(f"real{suffix}", link)
        entries.append(IndexShard.holding(side, name=shard_name(i), sidecar=shard_name(i).replace(".tar", ".json")))
    tok = IndexTokenizer("bench", 50_257, "uint16", 0, None, None, "<eos>", None, None, True, False)
    n = shards
    index = Index(format_version=ORIGINS_FORMAT_VERSION, created_by="bench", plan_fingerprint=f"bench-{name}", tokenizer_fingerprint="tok",
                  tokenizer=tok, layout="pack", dtype="uint16", shards=tuple(entries),
                  totals=IndexTotals(n, n * side.samples, n * side.documents, n * side.tokens, n * side.bytes, {}))
    write_json_atomic(out / "index.json", index.to_dict())
    return out


def build(root: Path, shards: int) -> Path:
    spec = {"sources": []}
    for seed, (name, weight, share) in enumerate(SOURCES):
        path = write_source(root, name, int(shards * share), seed)
        spec["sources"].append({"name": name, "path": str(path), "weight": weight})
    (root / "mix.json").write_text(json.dumps(spec))
    return root / "mix.json"


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def trace_cli(argv: list[str]) -> str:
    from shardprep.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    assert code == 0, code
    return buf.getvalue()


def answer(reading, step: int) -> int:
    """What trace adds to the index load: the run's timeline, every rank's batch at ``step``, each row's
    documents and their sidecars (caches emptied first, as in a fresh process)."""
    from shardprep.loader.docorigin import Provenance
    from shardprep.loader.skips import RunSkips
    from shardprep.loader.trace import RunOptions, TraceRun

    reading.tables = [{} for _ in reading.sources]
    run = RunSkips(reading, reading.num_units, False)
    run.note(0, 0, ((0, reading.num_units),), 8, 4)
    traced, prov = TraceRun(reading, RunOptions(world=8, batch=4), run), Provenance(reading)
    return sum(len([prov.describe(s) for row in traced.batch(step, r)[2] for s in row]) for r in range(8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=100_000)
    ap.add_argument("--step", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "trace"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    spec = build(Path(args.out), args.shards)
    built = time.perf_counter() - t0

    from shardprep.loader.trace import RunOptions, open_reading

    common = [str(spec), "--step", str(args.step), "--world-size", "8", "--batch-size", "4", "--seq-len", "2048",
              "--json"]
    index_s, reading = timed(lambda: open_reading(str(spec), RunOptions(seq_len=2048)), args.repeat)
    answer_s, _ = timed(lambda: answer(reading, args.step), args.repeat)
    all_s, out = timed(lambda: trace_cli(["trace", *common]), args.repeat)
    rank_s, _ = timed(lambda: trace_cli(["trace", *common, "--rank", "0"]), args.repeat)
    got = json.loads(out)
    rows = sum(len(r["rows"]) for r in got["ranks"])
    epochs = sorted({r["epoch"] for r in got["ranks"]})
    result = {"shards": sum(len(i.shards) for i in reading.sources), "units_per_epoch": reading.num_units,
              "step": args.step, "epoch": epochs, "rows_traced": rows, "build_s": round(built, 1),
              "index_load_s": round(index_s, 3), "answer_s": round(answer_s, 3), "trace_all_ranks_s": round(all_s, 3),
              "trace_rank0_s": round(rank_s, 3), "target_s": TARGET_S, "ratio_all_ranks": round(all_s / TARGET_S, 3),
              "ratio_rank0": round(rank_s / TARGET_S, 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
