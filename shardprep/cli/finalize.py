"""``shardprep finalize``: check every sidecar and write index.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.job.finalize import finalize

NAME = "finalize"
HELP = "check that every task is complete and write OUTPUT/index.json (copies no data)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="output directory holding job.json and the shards")


def run(args: argparse.Namespace) -> int:
    t = finalize(Path(args.output)).totals
    print(f"index.json written: {t.shards} shard(s), {t.documents:,} documents, {t.tokens:,} tokens, "
          f"{t.bytes:,} bytes")
    return 0
