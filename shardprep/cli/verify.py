"""``shardprep verify``: re-hash and re-parse every shard; non-zero exit naming each bad shard."""

from __future__ import annotations

import argparse
import sys

from shardprep.cli._s3 import add_s3_arguments, storage_from_args
from shardprep.cli.args import count_arg
from shardprep.errors import EXIT_INCOMPLETE
from shardprep.job.verify import verify
from shardprep.storage.locations import is_url

NAME = "verify"
HELP = "re-hash and re-parse every shard against index.json; exit 5 naming each bad shard"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="finalized output directory (holding index.json), or its URL "
                   "(s3://, gs://, az://, https://, hf://...): the same checks either way")
    p.add_argument("--workers", type=count_arg(1), default=4, help="shards checked in parallel")
    add_s3_arguments(p)


def run(args: argparse.Namespace) -> int:
    bad = verify(args.output, workers=args.workers, storage=storage_from_args(args))
    for check in bad:
        print(f"BAD {check.name}: {'; '.join(check.problems)}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} bad shard(s) in {args.output} (hint: {repair_hint(args.output)})", file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"{args.output}: all shards verified")
    return 0


def repair_hint(output: str) -> str:
    """The next step after bad shards: ``repair`` rebuilds them from the frozen plan, in the local output
    directory (a copy at a URL is repaired where it was made, then uploaded again)."""
    if is_url(output):
        return ("run shardprep repair DIR in the output directory this copy was uploaded from, then upload it "
                "again")
    return f"shardprep repair {output} rebuilds them from the frozen plan, byte-identical to index.json"
