"""Options and output shared by the transfer commands ``stage`` and ``upload`` (one place, same words)."""

from __future__ import annotations

import argparse
import sys

import orjson

from shardprep.cli._options import size_arg
from shardprep.storage.s3 import add_client_arguments
from shardprep.staging.summary import TransferSummary, human_bytes


def add_transfer_arguments(p: argparse.ArgumentParser, *, what: str, concurrency: int, part_help: str) -> None:
    """Filters, concurrency, part size, dry run, output mode, progress and the S3 connection options.

    ``what`` names the things filtered ("keys (below the prefix)" or "files (relative paths)").
    """
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help=f"only {what} matching this glob; repeatable; * also matches /")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help=f"skip {what} matching this glob; repeatable; applied after --include")
    p.add_argument("--concurrency", type=int, default=concurrency, help="objects and parts transferred at once")
    p.add_argument("--part-size", type=size_arg, default="16M", help=part_help)
    p.add_argument("--dry-run", action="store_true", help="list what would be transferred and the total bytes; "
                                                          "transfer nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="byte progress bar on stderr; unset means only when stderr is a terminal")
    add_client_arguments(p)


def finish(summary: TransferSummary, *, as_json: bool) -> int:
    """Summary on stdout, failed keys on stderr, then TransferError (exit 7) if anything failed."""
    print(orjson.dumps(summary.as_dict()).decode() if as_json else summary.line())
    sys.stdout.flush()
    summary.print_failures()
    summary.raise_if_failed()
    return 0


def print_dry_run(moves: list[tuple[int, str, str]], *, verb: str, noun: str, skipped: int, skipped_as: str,
                  as_json: bool) -> int:
    """List (size, from, to) per planned transfer and the total; nothing is transferred."""
    total = sum(size for size, _, _ in moves)
    if as_json:
        print(orjson.dumps({"transfers": [{"size": s, "from": a, "to": b} for s, a, b in moves],
                            "bytes": total, "skipped": skipped}).decode())
        return 0
    for size, src, dst in moves:
        print(f"{size:>14}  {src}  ->  {dst}")
    print(f"would {verb} {len(moves)} {noun}, {human_bytes(total)} ({total} bytes); {skipped} {skipped_as}")
    return 0
