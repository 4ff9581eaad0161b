"""Fine-tune a tiny causal LM with DDP on chat shards (`shardprep submit --chat`): the loss uses the labels.

    shardprep submit --chat -i sft.jsonl -o /fsx/sft -t /models/qwen3/          # conversations -> chat shards
    torchrun --standalone --nproc_per_node=2 examples/train_sft.py --data /fsx/sft --seq-len 1024
    torchrun ... --max-steps 20 --checkpoint ckpt.pt        # stop, save model + loader; --resume on any world size

Over chat shards the loader packs whole conversations into rows of ``--seq-len`` (a conversation longer than
a row is truncated, or dropped with ``--overflow drop``: counted either way) and gives ``labels`` that are
-100 wherever the mask stored at tokenization says "not trained" (system, user and tool text, role
headers), on each conversation's first token (no conversation is predicted from the one before it in a row)
and on padding; ``position_ids`` restart at every conversation.  The same shards serve any ``--seq-len``.

Rank 0 prints ``step S (epoch E): T tokens/s, loss L`` every ``--log-every`` steps, then the share of
tokens that carried a label and the packing's efficiency.  Runs on CPU with gloo (``--backend nccl`` on GPUs:
one GPU per process).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from steplog import StepLog, add_log_every
from train_ddp import finish, save, setup, shutdown

from shardprep.errors import ShardprepError
from shardprep.loader import ShardDataset


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a finalized chat output (shardprep submit --chat), its URL, or a "
                   "mixture spec (.json/.yaml) of chat and pretraining outputs (with --total-tokens)")
    p.add_argument("--total-tokens", type=float, default=None, help="a mixture's token budget")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per packed row")
    p.add_argument("--batch-size", type=int, default=4, help="rows per batch per rank")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="data order seed")
    p.add_argument("--overflow", choices=["truncate", "drop"], default="truncate",
                   help="a conversation longer than --seq-len: cut to the row, or left out")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps and checkpoint")
    p.add_argument("--checkpoint", default=None, help="where to save model, optimizer and loader state")
    p.add_argument("--resume", default=None, help="checkpoint to resume from (any world size)")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend (nccl on GPUs)")
    p.add_argument("--record", default=None, help="directory for per-rank JSON lines: the conversations (global "
                   "document ids) of every row of every batch, and its labelled tokens (the tests use them)")
    add_log_every(p)
    return p.parse_args()


def open_data(args: argparse.Namespace) -> ShardDataset:
    """The chat dataset; a refusal (not chat data, a bad option) is one line and its exit code."""
    try:
        ds = ShardDataset(args.data, mode="pack", seq_len=args.seq_len, seed=args.seed, return_position_ids=True,
                          return_doc_info=args.record is not None, overflow=args.overflow,
                          total_tokens=None if args.total_tokens is None else int(args.total_tokens))
    except ShardprepError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    return ds


def main() -> None:
    args = parse_args()
    ds = open_data(args)
    dist.init_process_group(args.backend)
    train(args, ds)
    shutdown()


def train(args: argparse.Namespace, ds: ShardDataset) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    loader, model, optim, device, start_epoch, step = setup(args, ds)
    log = StepLog(args.log_every, rank=rank, world=world)
    record = open_record(args.record, rank)
    labelled = tokens = 0
    steps: dict[int, int] = {}
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        steps[epoch] = 0
        for batch in loader:
            labels = batch["labels"].to(device, non_blocking=True)
            loss = model(batch["input_ids"].to(device, non_blocking=True), labels)
            optim.zero_grad(set_to_none=True)
            loss.backward()                  # all-reduce: the loader gives every rank the same number of steps
            optim.step()
            step += 1
            steps[epoch] += 1
            labelled += int((labels != -100).sum())
            tokens += labels.numel()
            log.step(step, epoch, batch["input_ids"].numel(), loss)
            if record is not None:
                record.write(json.dumps(row_record(batch, epoch, step)) + "\n")
            if args.max_steps is not None and step >= args.max_steps:
                save(args.checkpoint, model, optim, loader, step, rank)
                report(rank, step, labelled, tokens, ds, device)
                return finish(record, rank, world, steps, loader, args, stopped=True)
    if args.checkpoint:
        save(args.checkpoint, model, optim, loader, step, rank)
    report(rank, step, labelled, tokens, ds, device)
    finish(record, rank, world, steps, loader, args, stopped=False)


def open_record(directory: str | None, rank: int):
    if directory is None:
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    return open(Path(directory) / f"rank{rank}.jsonl", "a")


def row_record(batch: dict, epoch: int, step: int) -> dict:
    """The conversations of each row (global document ids, padding's -1 left out) and its labelled tokens."""
    docs = [sorted({int(d) for d in row.tolist() if d >= 0}) for row in batch["doc_ids"]]
    rec = {"epoch": epoch, "step": step, "units": batch["unit_ids"].tolist(), "docs": docs,
           "labelled": [int((row != -100).sum()) for row in batch["labels"]]}
    if "source_ids" in batch:                # a mixture (--data mix.yaml): the source of every row
        rec["sources"] = batch["source_ids"].tolist()
    return rec


def report(rank: int, step: int, labelled: int, tokens: int, ds: ShardDataset, device: torch.device) -> None:
    counts = torch.tensor([labelled, tokens], dtype=torch.int64, device=device)     # nccl reduces GPU tensors
    dist.all_reduce(counts)              # every rank took the same number of steps: this cannot hang
    if rank == 0:
        share = int(counts[0]) / max(1, int(counts[1]))
        print(f"done after {step} steps: {int(counts[0]):,} of {int(counts[1]):,} row tokens carried a label "
              f"({share:.1%}); packing: {ds.packing_stats()}", flush=True)


if __name__ == "__main__":
    main()
