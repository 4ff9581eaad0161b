"""What a transfer did (files, bytes, MB/s, skipped, failed) and the byte progress bar.

Shared by ``stage`` and ``upload`` so both report the same way: one summary line on stdout (or JSON),
failed keys on stderr, and a non-zero exit (:class:`TransferError`, exit code 7) whenever anything failed,
after everything that could land has landed.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from shardprep.errors import TransferError
from shardprep.units import decimal_bytes


@dataclass
class TransferSummary:
    """Counters updated from worker threads through :meth:`add_done` / :meth:`add_failed`."""

    action: str                       # "staged" or "uploaded"
    skipped_as: str = "already identical"
    planned_files: int = 0
    planned_bytes: int = 0
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    failed: dict[str, str] = field(default_factory=dict)   # key -> reason
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_done(self, nbytes: int) -> None:
        with self._lock:
            self.files += 1
            self.bytes += nbytes

    def add_skipped(self, nbytes: int) -> None:
        with self._lock:
            self.skipped += 1
            self.skipped_bytes += nbytes

    def add_failed(self, key: str, reason: str) -> None:
        with self._lock:
            self.failed[key] = reason

    def finish(self) -> "TransferSummary":
        self.seconds = time.monotonic() - self.started
        return self

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "files": self.files, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "mb_per_s": round(self.mb_per_s, 1),
                "skipped": self.skipped, "skipped_bytes": self.skipped_bytes,
                "failed": len(self.failed), "failed_keys": sorted(self.failed)}

    def line(self) -> str:
        return (f"{self.action} {self.files} files, {decimal_bytes(self.bytes)} in {self.seconds:.1f} s "
                f"({self.mb_per_s:.1f} MB/s); skipped {self.skipped} {self.skipped_as} "
                f"({decimal_bytes(self.skipped_bytes)}); failed {len(self.failed)}")

    def print_failures(self, stream: Any = None) -> None:
        stream = stream or sys.stderr
        for key, reason in sorted(self.failed.items()):
            print(f"failed: {key}: {reason}", file=stream)

    def raise_if_failed(self) -> None:
        """TransferError (exit 7) naming the failed keys, the first few in the message itself."""
        if not self.failed:
            return
        keys = sorted(self.failed)
        shown = ", ".join(repr(k) for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        raise TransferError(f"{len(keys)} of {self.planned_files} objects failed: {shown}",
                            hint="the rest landed; re-run the same command to retry only what is missing")


def progress_bar(total: int, *, desc: str, enabled: bool | None) -> Any:
    """A tqdm byte bar on stderr; ``enabled=None`` shows it only when stderr is a terminal."""
    from tqdm import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                disable=not enabled, dynamic_ncols=True, leave=False)
