"""Train with a *stock* webdataset pipeline over shardprep shards (the recipe of docs/loader.md, "webdataset").

    torchrun --standalone --nproc_per_node=2 examples/train_wds.py --data /fsx/shards --seq-len 256 --num-workers 2

webdataset splits the shard list by node (``split_by_node``), then by DataLoader worker
(``split_by_worker``); ``shardprep.wds`` only decodes and packs.  Whole shards per rank means ranks can
get different numbers of batches, and a DDP rank that stops early leaves the others waiting in the
gradient all-reduce.  So every step first asks all ranks whether they still have a batch (one small
all-reduce); the epoch ends for all when one runs out, and the batches the others still hold are read
but not trained on ("unused").  examples/train_ddp.py with ``ShardDataset`` needs none of this.

``--record DIR`` writes what every worker decoded and what every rank's batches held, as JSON lines
(tests/test_wds_ddp.py checks that every document is read exactly once per epoch).

Rank 0 prints ``step S (epoch E): T tokens/s, loss L`` after step 1 and every ``--log-every`` steps
(examples/steplog.py); the toy model's step cost grows with vocab x seq_len x batch (examples/train_ddp.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import webdataset as wds
from steplog import StepLog, add_log_every

import shardprep.wds as spw
from shardprep.loader.index import load_index


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="finalized shardprep output directory")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per row")
    p.add_argument("--batch-size", type=int, default=4, help="rows per batch per rank")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank (at most its shards)")
    p.add_argument("--epochs", type=int, default=1, help="epochs to train")
    p.add_argument("--shardshuffle", type=int, default=0, help="webdataset shard shuffle buffer (0: off)")
    p.add_argument("--record", default=None, help="directory for JSON-lines records of what was read")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend")
    add_log_every(p)
    return p.parse_args()


class RecordSamples:
    """Pipeline stage: pass samples through, noting each one in this worker's own file."""

    def __init__(self, directory: str | None):
        self.directory, self.epoch = directory, 0

    def __call__(self, samples):
        info = torch.utils.data.get_worker_info()
        name = f"decoded-rank{os.environ.get('RANK', '0')}-worker{info.id if info else 0}.jsonl"
        with open(Path(self.directory) / name, "a") as f:
            for s in samples:
                f.write(json.dumps({"epoch": self.epoch, "key": s["__key__"], "doc_start": s["doc_start"],
                                    "docs": len(s["doclens"]), "tokens": int(s["tokens"].size)}) + "\n")
                yield s


def batch_record(batch: dict, epoch: int, rank: int, trained: bool) -> dict:
    docs, counts = torch.unique(batch["doc_ids"], return_counts=True)
    return {"epoch": epoch, "rank": rank, "trained": trained, "tokens": batch["input_ids"].numel(),
            "docs": dict(zip(map(str, docs.tolist()), counts.tolist()))}


def main() -> None:
    args = parse_args()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    recorder = RecordSamples(args.record)
    stages = [spw.decode(args.data), spw.pack(args.seq_len, batch_size=args.batch_size, doc_info=True)]
    if args.record:
        Path(args.record).mkdir(parents=True, exist_ok=True)
        stages.insert(1, recorder)
    dataset = wds.WebDataset(spw.shard_urls(args.data), nodesplitter=wds.split_by_node,
                             workersplitter=wds.split_by_worker, shardshuffle=args.shardshuffle or False)
    loader = wds.WebLoader(dataset.compose(*stages), batch_size=None, num_workers=args.num_workers)
    tokenizer = load_index(args.data).tokenizer
    vocab = tokenizer.vocab_size if tokenizer is not None else 65536
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Embedding(vocab, 32),
                                                                          torch.nn.Linear(32, vocab)))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    records = open(Path(args.record) / f"batches-rank{rank}.jsonl", "a") if args.record else None
    summary = {"rank": rank, "steps": {}, "unused": {}}
    log, step = StepLog(args.log_every, rank=rank, world=world), 0
    for epoch in range(args.epochs):
        recorder.epoch = epoch                     # workers start afresh each epoch and copy it
        batches = iter(loader)
        steps = unused = 0
        while True:
            batch = next(batches, None)
            more = torch.tensor([0 if batch is None else 1])
            dist.all_reduce(more, op=dist.ReduceOp.MIN)    # does every rank still have a batch?
            if not more.item():
                rest = ([batch] if batch is not None else []) + list(batches)   # read, not trained on
                unused = len(rest)
                for b in rest:
                    if records:
                        records.write(json.dumps(batch_record(b, epoch, rank, trained=False)) + "\n")
                break
            logits = model(batch["input_ids"])
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), batch["labels"][:, 1:].reshape(-1))
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            steps += 1
            step += 1
            log.step(step, epoch, batch["input_ids"].numel(), loss)
            if records:
                records.write(json.dumps(batch_record(batch, epoch, rank, trained=True)) + "\n")
        summary["steps"][epoch], summary["unused"][epoch] = steps, unused
    if records:
        records.close()
    gathered = [None] * world
    dist.all_gather_object(gathered, summary)
    if rank == 0:
        print(json.dumps({"world": world, "ranks": gathered}), flush=True)
    del model, optim, loader
    gc.collect()                                   # see examples/train_ddp.py: shutdown()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
