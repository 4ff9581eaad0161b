"""``shardprep stage`` with its integrity work switched off: what our transfer code costs on its own.

Run by bench/stage.py beside the real command, so the cost of verification (the MD5 of every byte, the
fsync before each rename, the write-out started per range) is measured side by side instead of guessed,
and tools that do none of it (s5cmd, the CRT client) are compared with the same amount of work too.
Never use this to stage data: nothing it writes is checked or durable.

    python bench/stage_lean.py SOURCE DEST [shardprep stage options...]
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _NoHash:
    """Stands in for ``hashlib.md5``: takes the bytes, computes nothing."""

    def __init__(self, *_args, **_kwargs) -> None:
        pass

    def update(self, _data) -> None:
        pass

    def digest(self) -> bytes:
        return bytes(16)

    def hexdigest(self) -> str:
        return "0" * 32


def switch_off_integrity() -> None:
    """No MD5, no verification, no fsync, no early write-out; listing, planning, GETs, temp + rename stay."""
    from shardprep.staging import integrity, ranged, stage

    hashlib.md5 = _NoHash                                            # streamed part / whole-object MD5s
    os.fsync = lambda _fd: None                                      # per file, directories, journal
    ranged.start_writeback = lambda *_a: None                        # sync_file_range per range
    stage.verify_download = lambda *_a, **_k: integrity.Verified("none", "")


def main() -> int:
    switch_off_integrity()
    from shardprep.cli.main import main as cli_main

    return cli_main(["stage", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main())
