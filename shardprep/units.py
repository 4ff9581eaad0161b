"""Byte counts for people, in one format everywhere shardprep prints them (plan, status, report, doctor)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as df -h, Slurm and ``--target-task-bytes`` use)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PiB"  # unreachable; keeps type checkers happy
