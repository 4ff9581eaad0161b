"""Train on a mixture of shardprep outputs with exact token proportions (docs/loader.md, "Mixtures").

    torchrun --standalone --nproc_per_node=3 examples/train_mix.py \\
        --source s3://bucket/web:0.6 --source /fsx/code:0.3 --source /fsx/math:0.1 \\
        --total-tokens 2e9 --seq-len 2048 --num-workers 4
    torchrun ... examples/train_mix.py --spec mix.yaml          # the same mixture from a spec file
    torchrun ... --max-steps 200 --checkpoint ckpt.pt             # stop, save model + loader position
    torchrun --nproc_per_node=2 ... --resume ckpt.pt              # continue on any world size

The sources are handed to the loader as Python ``(path, weight)`` pairs: ``ShardDataset(sources, ...,
total_tokens=...)``.  Every source keeps its own seeded order; which source each row comes from is fixed by
the schedule, so the proportions hold in every window of rows, also after a resume on another number of
ranks or workers.  The training loop is examples/train_ddp.py's (run from this directory, it imports it).
Rank 0 prints each source's share, the tokens the run takes from it and the epochs that makes (``shardprep
mix SPEC`` prints the same before a run), then ``step S (epoch E): T tokens/s, loss L`` every ``--log-every``
steps; the toy model's step cost grows with vocab x seq_len x batch (examples/train_ddp.py), so keep
``--seq-len`` and ``--batch-size`` small on CPU.
"""

from __future__ import annotations

import argparse

from train_ddp import add_arguments, run


def source(text: str) -> tuple[str, float]:
    """``PATH:WEIGHT`` (the last colon separates them, so ``s3://bucket/web:0.6`` works)."""
    path, sep, weight = text.rpartition(":")
    try:
        if not sep or not path:
            raise ValueError
        return path, float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PATH:WEIGHT, e.g. /fsx/code:0.3") from None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--source", type=source, action="append", help="PATH:WEIGHT, once per source")
    what.add_argument("--spec", help="a mixture spec file (.json, .yaml) instead of --source")
    add_arguments(p)
    args = p.parse_args()
    data = args.spec or args.source
    run(args, data)


if __name__ == "__main__":
    main()
