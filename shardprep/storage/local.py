"""The local store: a path on this machine's file systems (a local disk, Lustre, NFS ...)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from shardprep.storage.atomic import sha256_file
from shardprep.storage.store import exact


def existing_ancestor(path: str | os.PathLike) -> Path:
    """``path`` or its nearest existing parent (what statfs, Lustre detection and permission probes can
    look at before a directory is created)."""
    probe = Path(os.path.abspath(path))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


class LocalSource:
    """A local or Lustre file read with ``os.pread`` (thread-safe, no seek state)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDONLY)

    def read(self, offset: int, size: int) -> bytes:
        return exact(os.pread(self._fd, size, offset), self.path, offset, size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # best effort; readers usually close explicitly
        try:
            self.close()
        except Exception:
            pass


class LocalStore:
    """Paths: ``pread`` for ranges, one ``scandir`` for sizes."""

    def open(self, location: str) -> LocalSource:
        return LocalSource(location)

    def read_bytes(self, location: str) -> bytes:
        return Path(location).read_bytes()

    def sizes(self, root: str) -> Mapping[str, int]:
        with os.scandir(root) as it:
            return {e.name: e.stat().st_size for e in it if e.is_file()}

    def sha256(self, location: str, *, block: int = 8 << 20) -> str:
        return sha256_file(Path(location), block=block)
