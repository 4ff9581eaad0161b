"""Loader throughput: tokens/s delivered to the training loop, shardprep vs a naive WebDataset pipeline.

Both read the same documents: shardprep's shards (pack mode, uint16 ids through the sidecar chunk table)
and hand-written WebDataset tars of ``<key>.token_ids.json`` samples read the way many training scripts
do (``wds.WebDataset(urls).decode()`` -> a tensor per document -> a padding collator that pads to the
longest row and masks the pad id in the labels).  The number reported is *real* (non-padding) tokens
per second reaching the loop body, in-process and with 2 DataLoader workers; every measurement runs in a
fresh child process.  shardprep reading the same JSON tars (its legacy mode) is shown as well.

    python bench/loader.py --quick     # ~24 MB of text, one epoch each (about a minute)
    python bench/loader.py             # ~96 MB of text, 3 epochs each, best of 3

Data is built once under bench/out/loader/ (gitignored) and reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2, MB, REPO, child_peak_rss, ensure_corpus, machine_info, markdown_table, run_child  # noqa: E402

WORKDIR = REPO / "bench" / "out" / "loader"
LEGACY_TARS = 8


# -- data -------------------------------------------------------------------------------------------------
def build_data(text_mb: int) -> tuple[Path, Path, dict]:
    """Tokenized shards and the same documents as token_ids.json tars (both cached in WORKDIR)."""
    from shardprep.api import tokenize_directory
    from shardprep.demo_data import build_sample_tokenizer

    corpus, meta = ensure_corpus(WORKDIR, "english", text_mb * MB)
    tokenizer = GPT2 if GPT2.is_file() else build_sample_tokenizer(WORKDIR / "sample-tokenizer.json")
    shards = WORKDIR / f"shards-{text_mb}mb"
    if not (shards / "index.json").is_file():
        started = time.perf_counter()
        tokenize_directory(corpus, shards, tokenizer, workers=2, overwrite=True, target_task_bytes=8 * MB)
        print(f"tokenized {corpus.name} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    legacy = WORKDIR / f"legacy-{text_mb}mb"
    if not (legacy / "done").is_file():
        write_legacy(shards, legacy)
    index = json.loads((shards / "index.json").read_text())
    return shards, legacy, {**meta, "tokens": index["totals"]["tokens"], "shards": index["totals"]["shards"],
                            "tokenizer": str(tokenizer)}


def write_legacy(shards: Path, legacy: Path) -> None:
    """Every document as ``<key>.token_ids.json`` in LEGACY_TARS tars, written with webdataset's TarWriter."""
    import webdataset as wds

    from shardprep.loader import ShardDataset

    legacy.mkdir(parents=True, exist_ok=True)
    docs = ShardDataset(shards, mode="doc", shuffle=False, rank=0, world_size=1)
    per_tar = -(-docs.total_docs // LEGACY_TARS)
    writer = None
    for i, doc in enumerate(docs):
        if i % per_tar == 0:
            if writer is not None:
                writer.close()
            writer = wds.TarWriter(str(legacy / f"legacy-{i // per_tar:03d}.tar"))
        writer.write({"__key__": f"doc{i:09d}", "token_ids.json": doc["input_ids"].tolist()})
    writer.close()
    (legacy / "done").write_text("ok")


# -- measured pipelines (run in a child process) ----------------------------------------------------------
def pad_collate(pad_id: int):
    """The hand-written collator: pad to the longest row, labels = ids with the pad id masked."""
    import torch

    def collate(docs):
        ids = torch.nn.utils.rnn.pad_sequence(docs, batch_first=True, padding_value=pad_id)
        labels = ids.clone()
        labels[labels == pad_id] = -100
        return {"input_ids": ids, "attention_mask": (ids != pad_id).long(), "labels": labels,
                "real": sum(len(d) for d in docs)}

    return collate


def naive_loader(legacy: Path, seq_len: int, batch: int, workers: int, pad_id: int):
    import torch
    import webdataset as wds

    urls = sorted(str(p) for p in legacy.glob("*.tar"))
    ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode().to_tuple("token_ids.json")
          .map(lambda s: torch.tensor(s[0][:seq_len], dtype=torch.long)))
    return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=pad_collate(pad_id))


def child(args: argparse.Namespace) -> None:
    from shardprep.loader import ShardDataset, make_dataloader

    if args.child == "naive":
        loader = naive_loader(Path(args.data), args.seq_len, args.batch_size, args.workers, pad_id=args.pad_id)
    else:
        ds = ShardDataset(args.data, mode="pack", seq_len=args.seq_len, seed=1, rank=0, world_size=1,
                          shuffle_block=args.shuffle_block)
        loader = make_dataloader(ds, batch_size=args.batch_size, num_workers=args.workers)
    real = elements = batches = 0
    startup = 0.0           # per epoch: time until its first batch (worker start, first reads)
    first = None
    cpu_before = cpu_seconds()
    started = time.perf_counter()
    for epoch in range(args.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        epoch_start = time.perf_counter()
        for i, b in enumerate(loader):
            if i == 0:
                startup += time.perf_counter() - epoch_start
                first = first if first is not None else time.perf_counter() - started
            elements += b["input_ids"].numel()
            real += b["real"] if "real" in b else b["input_ids"].numel()
            batches += 1
    seconds = time.perf_counter() - started
    del loader              # joins any remaining workers, so their CPU time is counted
    print(json.dumps({"real_tokens": real, "elements": elements, "batches": batches, "seconds": seconds,
                      "cpu_s": cpu_seconds() - cpu_before, "startup_s": startup, "first_batch_s": first,
                      "peak_rss_bytes": child_peak_rss()}))


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (DataLoader workers are joined every epoch)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


# -- driver -----------------------------------------------------------------------------------------------
def measure(kind: str, data: Path, workers: int, args: argparse.Namespace, pad_id: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--data", str(data), "--workers", str(workers),
           "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
           *(["--shuffle-block", str(args.shuffle_block)] if getattr(args, "shuffle_block", None) else []),
           "--pad-id", str(pad_id)]
    runs = [run_child(cmd).result for _ in range(args.repeat)]
    return max(runs, key=lambda r: r["real_tokens"] / r["seconds"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small data, one epoch, one repetition")
    p.add_argument("--text-mb", type=int, default=None, help="MB of generated English text (default 96, quick 24)")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per row")
    p.add_argument("--batch-size", type=int, default=8, help="rows per batch")
    p.add_argument("--epochs", type=int, default=None, help="epochs per measurement (default 3, quick 1)")
    p.add_argument("--repeat", type=int, default=None, help="repetitions, best kept (default 3, quick 1)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pad-id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--shuffle-block", type=int, default=None, help=argparse.SUPPRESS)   # bench/loader_mix.py
    args = p.parse_args()
    if args.child:
        return child(args)
    text_mb = args.text_mb or (24 if args.quick else 96)
    args.epochs = args.epochs or (1 if args.quick else 3)
    args.repeat = args.repeat or (1 if args.quick else 3)
    shards, legacy, meta = build_data(text_mb)
    index = json.loads((shards / "index.json").read_text())
    pad_id = index["tokenizer"]["pad_id"] if index["tokenizer"]["pad_id"] is not None else index["tokenizer"]["eos_id"]
    cases = [("shardprep pack", "shardprep", shards), ("naive WebDataset (JSON + pad collator)", "naive", legacy),
             ("shardprep pack over the JSON tars (legacy)", "shardprep", legacy)]
    results = {}
    for label, kind, data in cases:
        for workers in ((0, 2) if "legacy" not in label else (0,)):
            results[(label, workers)] = measure(kind, data, workers, args, pad_id)
            r = results[(label, workers)]
            print(f"{label}, {workers} workers: {r['real_tokens'] / r['seconds'] / 1e6:.1f} Mtok/s", file=sys.stderr)
    rows = []
    for (label, workers), r in results.items():
        rate = r["real_tokens"] / r["seconds"]
        naive = results[("naive WebDataset (JSON + pad collator)", workers)]
        in_process = results[(label, 0)]
        steady = r["real_tokens"] / max(1e-9, r["seconds"] - r["startup_s"])
        rows.append([label, workers, rate / 1e6, steady / 1e6, 1000 * r["cpu_s"] / (r["real_tokens"] / 1e6),
                     100 * (1 - r["real_tokens"] / r["elements"]),
                     f"{rate / (naive['real_tokens'] / naive['seconds']):.1f}x",
                     f"{rate / (in_process['real_tokens'] / in_process['seconds']):.2f}x", r["first_batch_s"],
                     r["peak_rss_bytes"] / MB])
    print(f"\nLoader throughput, pack seq_len={args.seq_len} batch={args.batch_size}, {meta['tokens']:,} tokens "
          f"({meta['documents']:,} documents, {meta['shards']} shards), {args.epochs} epoch(s), best of {args.repeat}\n")
    print(markdown_table(["pipeline", "workers", "real Mtok/s", "after 1st batch", "CPU ms/Mtok", "padding %",
                          "vs naive", "vs in-process", "first batch s", "peak RSS MiB"], rows))
    print("\nreal Mtok/s: non-padding tokens per second over the whole run; 'after 1st batch' leaves out each "
          "epoch's start-up (worker start, first reads), which a long epoch amortizes; CPU ms/Mtok: CPU time of "
          "the loop and its workers per million real tokens (what the loader costs, whatever the machine's load).")
    print(f"\nmachine: {json.dumps(machine_info())}")


if __name__ == "__main__":
    main()
