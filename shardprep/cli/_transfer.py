"""Output shared by the transfer commands ``stage`` and ``upload`` (one place, same words); their options
are in ``shardprep.cli.args``."""

from __future__ import annotations

import sys

import orjson

from shardprep.staging.summary import TransferSummary, human_bytes


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
    print(f"would {verb} {len(moves)} {noun}, {human_bytes(total)} ({total} bytes); {skipped} {skipped_as}"
          + (f"; delete {len(deletes)} object(s) of the replaced dataset" if deletes else ""))
    return 0
