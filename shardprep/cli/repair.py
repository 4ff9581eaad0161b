"""``shardprep repair OUTPUT [--shard N]``: rebuild the shards ``verify`` finds bad, byte-identical, from the plan."""

from __future__ import annotations

import argparse

from shardprep.cli.args import count_arg
from shardprep.job.repair import repair

NAME = "repair"
HELP = "rebuild shards that verify finds bad, byte-identical to index.json, from the frozen plan"
DESCRIPTION = """\
Check the shards of a finalized OUTPUT as `verify` does and rebuild each bad one (corrupt, truncated,
missing, or with a bad sidecar) by re-running its task from the frozen plan.  A rebuilt shard replaces the
bad one only when its sha256 is the one index.json records; index.json is not changed, so the loader
sees the same dataset in the same order.  Only an index.json whose entries are broken (one removed,
repeated or renamed; totals or tokenizer not the plan's) is rewritten, as finalize writes it from the plan
and the checked sidecars.  OUTPUT is the local output directory where the job ran, never a URL.

Exit codes: 0 repaired, or nothing to repair; 2 bad option (--shard not in index.json, OUTPUT a URL); 3 an
input changed since planning (the task refuses it), or job.json edited; 4 another shardprep run holds
OUTPUT; 5 no job.json or index.json, an index.json of another plan or one that cannot be rebuilt (tasks not
done), or a rebuilt shard's sha256 differs from index.json (nothing replaced); 6 the frozen tokenizer is
missing or changed.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="finalized output directory (holding index.json), where the job "
                   "ran; not a URL")
    p.add_argument("--shard", type=count_arg(0), default=None, metavar="N",
                   help="only shard N (shard-0000N.tar); default: every shard that does not verify")


def run(args: argparse.Namespace) -> int:
    repaired = repair(args.output, shard=args.shard)        # a URL is refused there, before any Path()
    for r in repaired:
        also = " and its sidecar" if r.sidecar_replaced else ""
        print(f"repaired {r.shard}{also} ({'; '.join(r.problems)}): {r.result}")
    if not repaired:
        what = f"shard {args.shard}" if args.shard is not None else "every shard"
        print(f"{args.output}: nothing to repair ({what} verified)")
    return 0
