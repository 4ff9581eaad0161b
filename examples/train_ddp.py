"""Train a tiny causal LM with DDP on shardprep shards; save and resume the loader position.

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --data /fsx/shards --seq-len 256
    torchrun ... --max-steps 20 --checkpoint ckpt.pt          # stop after 20 steps, save model + loader
    torchrun --nproc_per_node=3 ... --resume ckpt.pt           # continue (any world size) to the end

Runs on CPU with the gloo backend (``--backend nccl`` on GPUs).  The loader gives every rank the same
number of steps, so the all-reduce in ``backward()`` never waits for a rank that ran out of data.
``--data`` may also be a mixture spec (``mix.yaml``; examples/train_mix.py builds one in Python).
``--record DIR`` writes what every rank saw (unit/document ids, sources, a digest of each batch and row) as
JSON lines, which tests/test_loader_ddp.py and tests/test_loader_mix_ddp.py use to check coverage and resume.

    torchrun ... --skip-steps 120:180 --quarantine bad.txt    # leave out steps and documents (docs/loader.md)
    torchrun ... --max-steps 20 --checkpoint ckpt.pt --dcp ckpt-dcp   # also save the loader with DCP
    torchrun --nproc_per_node=3 ... --resume ckpt.pt --resume-dcp ckpt-dcp  # the loader from DCP instead

``--skip-steps A:B`` (global loader steps, counted from 0: the batch the log calls "step 1" is step 0) and
``--quarantine FILE`` (one document a line: ``source shard doc``, ``#`` comments) are passed to the loader,
whose state then records them: a resume needs neither again.

Rank 0 prints ``step S (epoch E): T tokens/s, loss L`` after step 1 and every ``--log-every`` steps
(examples/steplog.py).  The toy model's step cost grows with vocab x seq_len x batch (its output layer
computes a logit per vocabulary entry for every token): with a 50k-token vocabulary, ``--seq-len 512
--batch-size 8`` is 200M logits a step, tens of seconds on a CPU, while the loader alone gives hundreds of
batches a second.  Use small ``--seq-len`` / ``--batch-size`` on CPU.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from steplog import StepLog, add_log_every

from shardprep.errors import ShardprepError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader.quarantine import load_quarantine
from shardprep.loader.skips import Skips


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="finalized output directory, s3:// prefix, legacy tars, or a "
                   "mixture spec (.json/.yaml)")
    add_arguments(p)
    return p.parse_args()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The training options (examples/train_mix.py shares them)."""
    p.add_argument("--mode", default="pack", choices=["pack", "pad"], help="pack rows or padded documents")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per row")
    p.add_argument("--batch-size", type=int, default=4, help="rows per batch per rank")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--epochs", type=int, default=1, help="epochs to train (counting from 0)")
    p.add_argument("--seed", type=int, default=0, help="data order seed")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps and checkpoint")
    p.add_argument("--checkpoint", default=None, help="where to save model, optimizer and loader state")
    p.add_argument("--resume", default=None, help="checkpoint to resume from")
    p.add_argument("--record", default=None, help="directory for per-rank JSON-lines records of every batch")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend")
    p.add_argument("--total-tokens", type=float, default=None, help="the run's token budget (mixtures, or one "
                   "dataset read to a budget)")
    p.add_argument("--skip-steps", action="append", default=[], metavar="A:B",
                   help="leave out global loader steps A..B (inclusive, from 0); repeatable")
    p.add_argument("--quarantine", default=None, metavar="FILE",
                   help="a quarantine file (YAML or JSON: steps, documents, shards, input ranges; docs/loader.md)")
    p.add_argument("--dcp", default=None, metavar="DIR", help="also save the loader with torch.distributed.checkpoint")
    p.add_argument("--resume-dcp", default=None, metavar="DIR", help="with --resume: the loader from this DCP checkpoint")
    add_log_every(p)


class TinyLM(torch.nn.Module):
    """Embedding -> one MLP -> vocabulary logits: enough to produce real gradients to all-reduce.

    The head dominates the cost: ``dim x vocab`` multiply-adds per token, so a step grows with
    vocab x seq_len x batch (see the module docstring).
    """

    def __init__(self, vocab: int, dim: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU())
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.mlp(self.embed(input_ids)))
        # Hugging Face convention: labels are aligned with input_ids, the model shifts them
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)


def batch_record(batch: dict, epoch: int, step: int, rank: int) -> dict:
    ids = batch["input_ids"].contiguous()
    rec = {"epoch": epoch, "step": step, "rank": rank, "units": batch["unit_ids"].tolist(),
           "digest": hashlib.sha256(ids.numpy().tobytes()).hexdigest(),
           "rows": [hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16] for row in ids]}
    if batch["doc_ids"].dim() == 1:          # pad mode: one document per row
        rec["docs"] = batch["doc_ids"].tolist()
    rec["doc_ids"] = sorted(set(batch["doc_ids"].flatten().tolist()))      # every document the batch holds
    if "source_ids" in batch:                # a mixture: the source of every row
        rec["sources"] = batch["source_ids"].tolist()
    return rec


def main() -> None:
    args = parse_args()
    run(args, args.data)


def run(args: argparse.Namespace, data) -> None:
    """Open the data (a refusal is one line and its exit code, before any collective), train, shut down."""
    try:
        ds = ShardDataset(data, mode=args.mode, seq_len=args.seq_len, seed=args.seed, return_doc_info=True,
                          total_tokens=None if args.total_tokens is None else int(args.total_tokens))
    except ShardprepError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    if ds.mixture is not None and os.environ.get("RANK", "0") == "0":
        for r in ds.mixture.table():
            print(f"source {r['name']}: share {r['share']:.3f}, {r['taken_tokens']:,} of the run's tokens, "
                  f"{r['epochs']:.2f} epochs of its {r['tokens']:,}", flush=True)
    dist.init_process_group(args.backend)
    train(args, ds)
    shutdown()


def shutdown() -> None:
    """Tear the process group down only after everything that used it is gone.

    DDP's reducer and gloo's worker threads hold tensors; if any of them is still alive when the
    interpreter finalizes, a gloo thread that drops the last reference tries to take the GIL, is
    killed by the finalizing interpreter, and the rank aborts ("terminate called without an active
    exception") after a successful run.  ``train`` has returned, so its model, optimizer and batches
    are unreferenced; collect them while Python is fully alive, wait for every rank, then destroy.
    """
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def train(args: argparse.Namespace, ds: ShardDataset) -> None:
    """Train for the requested epochs (or steps), checkpoint, and report step counts to rank 0."""
    rank, world = dist.get_rank(), dist.get_world_size()
    loader, model, optim, device, start_epoch, step = setup(args, ds)

    record = None
    if args.record:
        Path(args.record).mkdir(parents=True, exist_ok=True)
        record = open(Path(args.record) / f"rank{rank}.jsonl", "a")
    steps_per_epoch = {}
    log = StepLog(args.log_every, rank=rank, world=world)
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)                          # keeps a resumed position within this epoch
        steps_here = 0
        for batch in loader:
            loss = model(batch["input_ids"].to(device, non_blocking=True),
                         batch["labels"].to(device, non_blocking=True))
            optim.zero_grad(set_to_none=True)
            loss.backward()                              # all-reduce: every rank must get here equally often
            optim.step()
            step += 1
            steps_here += 1
            log.step(step, epoch, batch["input_ids"].numel(), loss)
            if record is not None:
                record.write(json.dumps(batch_record(batch, epoch, step, rank)) + "\n")
            if args.max_steps is not None and step >= args.max_steps:
                save(args.checkpoint, model, optim, loader, step, rank, getattr(args, "dcp", None))
                finish(record, rank, world, steps_per_epoch | {epoch: steps_here}, loader, args, stopped=True)
                return
        steps_per_epoch[epoch] = steps_here
    if args.checkpoint:
        save(args.checkpoint, model, optim, loader, step, rank, getattr(args, "dcp", None))
    finish(record, rank, world, steps_per_epoch, loader, args, stopped=False)


def setup(args: argparse.Namespace, ds: ShardDataset):
    """The device (one GPU per process with nccl), the rank's loader, the DDP model and its optimizer, and
    where training starts: ``--resume`` restores all three (the loader's state may come from another world
    size).  Returns ``(loader, model, optim, device, start_epoch, step)``; examples/train_sft.py shares it."""
    torch.manual_seed(1234)
    device = torch.device("cpu")
    if args.backend == "nccl":                           # one GPU per process
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    loader = make_dataloader(ds, batch_size=args.batch_size, num_workers=args.num_workers,
                             pin_memory=device.type == "cuda", skip=skips(args, ds))
    vocab = ds.vocab_size or 65536
    model = torch.nn.parallel.DistributedDataParallel(TinyLM(vocab).to(device),
                                                      device_ids=[device.index] if device.type == "cuda" else None)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start_epoch, step = 0, 0
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu", weights_only=False)
        model.module.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        if getattr(args, "resume_dcp", None):
            import torch.distributed.checkpoint as dcp

            dcp.load({"loader": loader}, checkpoint_id=args.resume_dcp)     # saved by any number of ranks
        else:
            loader.load_state_dict(ckpt["loader"])      # may come from another world size
        start_epoch, step = loader.state_dict()["epoch"], ckpt["step"]
    return loader, model, optim, device, start_epoch, step


def skips(args: argparse.Namespace, ds: ShardDataset) -> Skips | None:
    """``--skip-steps`` and ``--quarantine`` as the loader's ``Skips`` (None: nothing to leave out)."""
    steps = []
    for text in getattr(args, "skip_steps", None) or []:
        a, _, b = text.partition(":")
        steps.append((int(a), int(b or a)))
    if getattr(args, "quarantine", None):
        found = load_quarantine(args.quarantine).resolve(ds.reading)
        return Skips(steps=tuple(steps) + found.steps, documents=found.documents)
    return Skips(steps=tuple(steps)) if steps else None


def save(path: str | None, model, optim, loader, step: int, rank: int, dcp_dir: str | None = None) -> None:
    if dcp_dir:                                          # every rank takes part; the state is written once
        import torch.distributed.checkpoint as dcp

        dcp.save({"loader": loader}, checkpoint_id=dcp_dir)
    state = loader.state_dict()                          # identical on every rank: save once
    if path and rank == 0:
        tmp = f"{path}.tmp"
        torch.save({"model": model.module.state_dict(), "optim": optim.state_dict(), "loader": state,
                    "step": step}, tmp)
        os.replace(tmp, path)
    dist.barrier()


def finish(record, rank: int, world: int, steps: dict, loader, args, *, stopped: bool) -> None:
    """Gather every rank's step counts on rank 0 (a real collective: it hangs if a rank is missing)."""
    if record is not None:
        record.close()
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "steps": steps, "dropped": loader.dropped})
    if rank == 0:
        print(json.dumps({"world": world, "stopped": stopped, "ranks": gathered}), flush=True)
        if args.record:
            summary = Path(args.record) / f"summary-{world}-{'stop' if stopped else 'end'}.json"
            summary.write_text(json.dumps({"world": world, "ranks": gathered}))


if __name__ == "__main__":
    main()
