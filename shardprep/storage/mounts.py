"""The mount table: which file system a path is on.

Apart from Lustre's detection (``storage.lustre``), whose other half is ``statfs``, readers ask it whether
reads of an input wait on a network file system (``inputs.blocks.reads_wait``): a module of its own so a
task does not import ``ctypes`` and ``subprocess`` with the striping code to answer that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MountEntry:
    device: str
    mountpoint: str
    fstype: str
    options: str


def _unescape_mount_field(field: str) -> str:
    """/proc/mounts escapes space, tab, newline and backslash as ``\\ooo`` octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[MountEntry]:
    """Parse /proc/self/mounts (or /etc/mtab) text; malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        device, mountpoint, fstype, options = (_unescape_mount_field(f) for f in fields[:4])
        entries.append(MountEntry(device, mountpoint, fstype, options))
    return entries


def mount_for(path: str, mounts: list[MountEntry]) -> MountEntry | None:
    """The entry whose mount point is the longest prefix of the absolute ``path`` (the last one wins
    among equal mount points, as the kernel stacks later mounts on top)."""
    best: MountEntry | None = None
    for m in mounts:
        mp = m.mountpoint.rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/") or mp == "/":
            if best is None or len(mp) >= len(best.mountpoint.rstrip("/") or "/"):
                best = m
    return best


def read_mount_table(path: str = "/proc/self/mounts") -> list[MountEntry]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return parse_mounts(f.read())
    except OSError:
        return []
