"""What the transfer commands ``stage`` and ``upload`` share: their options (filters, concurrency, part
size, the S3 connection) and their output (one place, same words)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from shardprep.cli._s3 import add_s3_arguments, client_options_from_args
from shardprep.cli.args import add_field, size_arg, size_text
from shardprep.staging.summary import TransferSummary
from shardprep.units import decimal_bytes


def add_transfer_arguments(p: argparse.ArgumentParser, owner: type, *, what: str, part_help: str) -> None:
    """Filters, concurrency, part size, dry run, output mode, progress and the S3 connection options.

    ``owner`` is ``StageOptions`` or ``UploadOptions`` (their defaults differ); ``what`` names the things
    filtered ("keys (below the prefix)" or "files (relative paths)").
    """
    add_field(p, "--include", owner=owner, action="append", default=[], metavar="GLOB",
              help=f"only {what} matching this glob; repeatable; * also matches /")
    add_field(p, "--exclude", owner=owner, action="append", default=[], metavar="GLOB",
              help=f"skip {what} matching this glob; repeatable; applied after --include")
    add_field(p, "--concurrency", owner=owner, type=int, help="objects and parts transferred at once")
    add_field(p, "--part-size", owner=owner, name="multipart_chunksize", type=size_arg, shown=size_text,
              help=part_help)
    p.add_argument("--dry-run", action="store_true", help="list what would be transferred and the total bytes; "
                                                          "transfer nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    add_field(p, "--progress", owner=owner, action=argparse.BooleanOptionalAction,
              help="byte progress bar on stderr; unset means only when stderr is a terminal")
    add_s3_arguments(p)


def transfer_options_from_args(owner: type, args: argparse.Namespace, **extra: Any) -> Any:
    """``StageOptions``/``UploadOptions`` from the transfer options; ``extra`` sets the command's own fields.

    One part size serves as both the multipart threshold and the part size, and the connection pool is
    sized for ``concurrency`` object workers plus as many part requests.
    """
    client = client_options_from_args(args, max_pool_connections=max(10, 2 * args.concurrency + 4))
    return owner(source=args.source, dest=args.dest, include=tuple(args.include), exclude=tuple(args.exclude),
                 concurrency=args.concurrency, multipart_threshold=args.part_size,
                 multipart_chunksize=args.part_size, progress=args.progress, client=client, **extra)


def finish(summary: TransferSummary, *, as_json: bool) -> int:
    """Summary on stdout, failed keys on stderr, then TransferError (exit 7) if anything failed."""
    print(orjson.dumps(summary.as_dict()).decode() if as_json else summary.line())
    sys.stdout.flush()
    summary.print_failures()
    summary.raise_if_failed()
    return 0


def print_dry_run(moves: list[tuple[int, str, str]], *, verb: str, noun: str, skipped: int, skipped_as: str,
                  as_json: bool, deletes: list[str] | None = None) -> int:
    """List (size, from, to) per planned transfer and the total, and the objects it would delete (``upload
    --replace``, in order); nothing is transferred."""
    total = sum(size for size, _, _ in moves)
    if as_json:
        print(orjson.dumps({"transfers": [{"size": s, "from": a, "to": b} for s, a, b in moves],
                            "bytes": total, "skipped": skipped,
                            **({"deletes": deletes} if deletes else {})}).decode())
        return 0
    for size, src, dst in moves:
        print(f"{size:>14}  {src}  ->  {dst}")
    for url in deletes or []:
        print(f"{'delete':>14}  {url}")
    print(f"would {verb} {len(moves)} {noun}, {decimal_bytes(total)} ({total} bytes); {skipped} {skipped_as}"
          + (f"; delete {len(deletes)} object(s) of the replaced dataset" if deletes else ""))
    return 0
