"""Byte counts for people: binary units where shardprep sizes things (plan, status, report, doctor), decimal
units in the transfer summaries of ``stage``/``upload``, beside their MB/s."""

from __future__ import annotations

_BINARY = (1024, ("B", "KiB", "MiB", "GiB", "TiB"))
_DECIMAL = (1000, ("B", "KB", "MB", "GB", "TB"))


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as df -h, Slurm and ``--target-task-bytes`` use)."""
    return _scaled(n, *_BINARY)


def decimal_bytes(n: float) -> str:
    """1500 -> '1.5 KB' (SI units: what a transfer's MB/s is counted in, so size and rate read alike)."""
    return _scaled(n, *_DECIMAL)


def _scaled(n: float, base: int, units: tuple[str, ...]) -> str:
    for unit in units[:-1]:
        if abs(n) < base:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= base
    return f"{n:,.1f} {units[-1]}"
