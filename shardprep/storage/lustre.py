"""Lustre detection and directory striping (``lfs setstripe`` before the first file is written).

A directory's default layout only applies to files created after it is set, so the output directory gets
its layout while it is still new and empty, and the layout actually in force is read back with
``lfs getstripe -d`` and recorded in ``job.json``.  Detection uses the file system's statfs magic number
(``0x0BD00BD0``), falling back to the mount table; path names (``/fsx``, ``/lustre``) prove nothing.

The default layout for shards (0.1 to a few GB each) is progressive: the first 128 MiB on one OST (small
sidecars and small shards cost one object), up to 4 GiB over 4 OSTs, the rest over 8, all with 1 MiB
stripes.  Staged inputs get a single stripe: many input files are read by many tasks at once, so spreading
*files* over OSTs already balances the load, and one stripe per file keeps per-file overhead lowest.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from shardprep.errors import ConfigError, EnvironmentProblem
from shardprep.storage.local import existing_ancestor
from shardprep.storage.lock import is_unused_dir
from shardprep.storage.mounts import MountEntry, mount_for, read_mount_table

log = logging.getLogger(__name__)

LUSTRE_SUPER_MAGIC = 0x0BD00BD0
LFS_TIMEOUT_S = 120

# --------------------------------------------------------------------------------------------- detection


def is_lustre(magic: int | None, mount: MountEntry | None) -> bool:
    """The decision, from evidence gathered elsewhere: the statfs magic when known, else the mount entry."""
    if magic is not None:
        return magic == LUSTRE_SUPER_MAGIC
    return mount is not None and mount.fstype == "lustre"


class _StatFs(ctypes.Structure):
    # Linux struct statfs on 64-bit: f_type is the first field (__fsword_t = long); the rest is padding
    # large enough for every architecture's layout.
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 256)]


def statfs_magic(path: Path) -> int | None:
    """The file system magic number of ``path`` via libc ``statfs``; None if it cannot be called."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        buf = _StatFs()
        if libc.statfs(os.fsencode(str(path)), ctypes.byref(buf)) != 0:
            log.debug("statfs(%s) failed: %s", path, os.strerror(ctypes.get_errno()))
            return None
        return buf.f_type & 0xFFFFFFFF
    except (OSError, AttributeError) as e:
        log.debug("statfs unavailable: %s", e)
        return None


def detect_lustre(path: Path) -> bool:
    """Is ``path`` (or its nearest existing ancestor) on Lustre?"""
    probe = existing_ancestor(path)
    magic = statfs_magic(probe)
    mount = None if magic is not None else mount_for(os.path.realpath(probe), read_mount_table())
    return is_lustre(magic, mount)


# ------------------------------------------------------------------------------------------------ layout

_SIZE_RE = re.compile(r"^(\d+)([kKmMgGtT]?)$")
_END_RE = re.compile(r"^(-1|eof|EOF|\d+[kKmMgGtT]?)$")
# Options `lfs setstripe` accepts that only shape the layout (no -d / --delete, no file creation flags).
_RAW_OPTIONS = {"-E", "--component-end", "-c", "--stripe-count", "-S", "--stripe-size", "-i",
                "--stripe-index", "-o", "--ost", "-p", "--pool", "-L", "--layout", "-z", "--extension-size"}


def _check_size(value: str, option: str) -> str:
    m = _SIZE_RE.match(value)
    if not m:
        raise ConfigError(f"{option} {value!r}: expected a size like 1M, 4M or 65536")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    if (int(m.group(1)) * mult) % (64 << 10):
        raise ConfigError(f"{option} {value!r}: Lustre stripe sizes must be a multiple of 64K")
    return value


def _check_count(value: int, option: str) -> int:
    if value < -1:
        raise ConfigError(f"{option} {value}: use a positive count, 0 for the file system default or -1 for all OSTs")
    return value


@dataclass(frozen=True)
class StripeLayout:
    """Arguments for ``lfs setstripe`` (without the path), validated at construction."""

    args: tuple[str, ...]
    label: str = field(default="", compare=False)   # how it was specified; not part of equality

    @classmethod
    def progressive(cls, components: tuple[tuple[str, int, str], ...]) -> "StripeLayout":
        """Components of (end, stripe count, stripe size); the last end is ``-1`` (end of file)."""
        args: list[str] = []
        for end, count, size in components:
            if not _END_RE.match(end):
                raise ConfigError(f"component end {end!r}: expected a size like 128M or -1 for end of file")
            args += ["-E", end, "-c", str(_check_count(count, "stripe count")), "-S", _check_size(size, "stripe size")]
        return cls(tuple(args), "progressive")

    @classmethod
    def plain(cls, count: int | None = None, size: str | None = None) -> "StripeLayout":
        args: list[str] = []
        if count is not None:
            args += ["-c", str(_check_count(count, "--stripe-count"))]
        if size is not None:
            args += ["-S", _check_size(size, "--stripe-size")]
        if not args:
            raise ConfigError("a plain stripe layout needs --stripe-count and/or --stripe-size")
        return cls(tuple(args), "plain")

    @classmethod
    def from_raw(cls, text: str) -> "StripeLayout":
        """A raw option string as a user would type after ``lfs setstripe`` (no path)."""
        try:
            tokens = tuple(shlex.split(text))
        except ValueError as e:
            raise ConfigError(f"--stripe-layout {text!r}: {e}") from e
        if not tokens:
            raise ConfigError("--stripe-layout is empty")
        expect_value = False
        for tok in tokens:
            if expect_value:
                expect_value = False
                continue
            name = tok.split("=", 1)[0]
            if name not in _RAW_OPTIONS:
                raise ConfigError(f"--stripe-layout {text!r}: {tok!r} is not a layout option "
                                  f"(allowed: {' '.join(sorted(_RAW_OPTIONS))})")
            expect_value = "=" not in tok
        if expect_value:
            raise ConfigError(f"--stripe-layout {text!r}: {tokens[-1]!r} needs a value")
        return cls(tokens, "raw")

    def command(self, path: Path) -> list[str]:
        return ["lfs", "setstripe", *self.args, str(path)]


DEFAULT_SHARD_LAYOUT = StripeLayout.progressive((("128M", 1, "1M"), ("4G", 4, "1M"), ("-1", 8, "1M")))
STAGED_INPUT_LAYOUT = StripeLayout.plain(count=1, size="1M")


# ------------------------------------------------------------------------------------------------ apply

_said_not_lustre = False


def _run_lfs(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LFS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentProblem(f"`{shlex.join(cmd)}` could not run: {e}") from e
    if proc.returncode != 0:
        stderr = proc.stderr.strip() or "(no output)"
        raise EnvironmentProblem(f"`{shlex.join(cmd)}` failed with exit code {proc.returncode}: {stderr}")
    return proc.stdout.strip()


def _make_dir(path: Path) -> None:
    from shardprep.storage.lock import make_dir

    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a directory")
    make_dir(path, what="directory")


def apply_layout(path: Path, layout: StripeLayout, *, lustre: bool) -> dict:
    """Create ``path`` if needed and, on Lustre and while it is empty, set and read back its layout."""
    global _said_not_lustre
    path = Path(path)
    existed = path.exists()
    _make_dir(path)
    if not lustre:
        if not _said_not_lustre:
            log.info("%s is not on Lustre; striping is skipped", path)
            _said_not_lustre = True
        return {"filesystem": "other", "applied": None, "command": None}
    lfs = shutil.which("lfs")
    if lfs is None:
        log.warning("%s is on Lustre but `lfs` is not on PATH; files get the inherited layout", path)
        return {"filesystem": "lustre", "applied": None, "command": None, "note": "lfs not found"}
    if existed and not is_unused_dir(path):
        log.info("%s already has files; keeping its layout (striping applies to new empty directories)", path)
        return {"filesystem": "lustre", "applied": read_layout(path), "command": None,
                "note": "existing non-empty directory: layout left unchanged"}
    cmd = layout.command(path)
    _run_lfs(cmd)
    applied = read_layout(path)
    log.info("striped %s: %s", path, " ".join(layout.args))
    return {"filesystem": "lustre", "applied": applied, "command": cmd}


def read_layout(path: Path) -> str:
    """The default layout in force on directory ``path`` (``lfs getstripe -d``); EnvironmentProblem on failure."""
    return _run_lfs(["lfs", "getstripe", "-d", str(path)])


def prepare_output_dir(path: Path, layout: StripeLayout | None, *,
                       detect: Callable[[Path], bool] | None = None) -> dict | None:
    """Make sure ``path`` exists and carries ``layout`` when it is a new directory on Lustre.

    Returns what to record in ``job.json`` under ``lustre``: ``{"filesystem": "lustre"|"other",
    "applied": <lfs getstripe -d output or None>, "command": <the setstripe argv or None>}`` (plus a
    ``note`` when nothing was changed), or None when striping was switched off (``--no-stripe``).
    Raises :class:`EnvironmentProblem` naming the command and its stderr when ``lfs`` fails.
    ``detect`` replaces :func:`detect_lustre` (tests; statfs cannot be faked).
    """
    path = Path(path)
    if layout is None:
        _make_dir(path)
        return None
    return apply_layout(path, layout, lustre=(detect or detect_lustre)(path))
