"""Atomic file writing: temporary name beside the target, fsync, rename, fsync the directory.

:class:`AtomicFile` (and :func:`atomic_writer`, the same as a context manager) is how shards, sidecars,
job.json, tokenizer.json, index.json, jobs.json, reports, exported files and stage's journal are written,
so "nothing half-written under a final name" is one piece of code.  Two writers keep their own steps on
purpose: ``stage`` verifies a download between its fsync and its rename (``staging/stage.py``), and the
plan directory is built under a temporary name and renamed whole (``job/plan.py``).  The temporary name is
created new, never through a link planted there (``storage/nofollow.py``); the final rename replaces a
link at the target name rather than writing through it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
from pathlib import Path
from typing import IO, Any, Iterator

import orjson

from shardprep.storage.nofollow import fresh_file_fd


def temp_name_for(target: Path) -> Path:
    """A hidden temporary name in the target's directory, unique per host and process.

    Same directory so the final ``rename`` is atomic (same file system, same Lustre layout); hidden so
    globs such as ``shard-*.tar`` never pick it up.
    """
    host = socket.gethostname().split(".")[0]
    return target.with_name(f".{target.name}.{host}.{os.getpid()}.tmp")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX needs the directory fsynced; Lustre and local disks both honour it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2     # <linux/fs.h>: start write-out of dirty pages in the range, do not wait
_sync_file_range: Any = None


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing ``length`` bytes at ``offset`` of ``fd`` to storage now, without waiting (best effort).

    Why: a file written over seconds and fsynced at the end otherwise waits for all its dirty pages at
    once (~0.4 s per 384 MiB on these disks); started range by range while the rest still downloads, the
    final fsync finds little left.  Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; elsewhere a no-op.
    Durability still comes from the fsync: this only moves the waiting earlier.
    """
    global _sync_file_range
    if _sync_file_range is None:
        _sync_file_range = _load_sync_file_range()
    if _sync_file_range:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def _load_sync_file_range() -> Any:
    """libc's ``sync_file_range``, or False where there is none (not Linux, no glibc symbol)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


class HashingWriter:
    """A write-only file wrapper that hashes and counts every byte it writes (one pass, no re-read)."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.bytes_written = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._raw.write(data)
        self.sha256.update(data)
        self.bytes_written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.bytes_written

    def flush(self) -> None:
        self._raw.flush()


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space_error(target: Path, exc: BaseException, *,
                   cleanup: str = "the temporary file was removed") -> Exception | None:
    """A one-line ``DiskFull`` (exit 8) for an ENOSPC/EDQUOT ``exc`` while writing ``target``, else None.

    Names the file and what the file system has left (statvfs), because a bare ``OSError 28`` says
    neither which of many outputs failed nor whether the disk is really full or a quota was hit;
    ``cleanup`` says what the caller removed.
    """
    if not isinstance(exc, OSError) or exc.errno not in _NO_SPACE:
        return None
    from shardprep.errors import DiskFull

    what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"
    try:
        st = os.statvfs(Path(target).parent)
        free = f"{st.f_bavail * st.f_frsize:,} bytes free of {st.f_blocks * st.f_frsize:,}"
    except OSError:
        free = "free space unknown"
    return DiskFull(f"{what} writing {target} ({free} on its file system); {cleanup}",
                    hint="free space or write to another file system, then re-run the same command")


def discard_temp(f: IO[bytes], tmp: Path) -> None:
    """Close ``f`` and remove its temporary file, even when closing fails (a flush on a full disk)."""
    try:
        f.close()
    except OSError:
        pass
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()


def _create_temp(tmp: Path, buffering: int) -> IO[bytes]:
    """Create the temporary file ``tmp`` as a new file, never through a link planted at its predictable name
    (``storage/nofollow.fresh_file_fd``)."""
    fd = fresh_file_fd(tmp)
    try:
        return os.fdopen(fd, "wb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


class AtomicFile:
    """A file written under a hidden temporary name beside ``target`` (:func:`temp_name_for`): ``file`` to
    write, :meth:`commit` to publish it (flush, fsync, rename to ``target``, fsync the directory),
    :meth:`abort` to drop it.  ``target`` never holds a partly written file."""

    def __init__(self, target: Path, *, buffering: int = 1 << 20):
        self.target = Path(target)
        self.tmp = temp_name_for(self.target)
        self.file: IO[bytes] = _create_temp(self.tmp, buffering)
        self._open = True

    def fileno(self) -> int:
        return self.file.fileno()

    def commit(self) -> Path:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.target)
        self._open = False
        fsync_dir(self.target.parent)
        return self.target

    def abort(self) -> None:
        """Remove the temporary file (also when closing it fails, e.g. a flush on a full disk); idempotent."""
        if self._open:
            self._open = False
            discard_temp(self.file, self.tmp)


@contextlib.contextmanager
def atomic_writer(target: Path, *, buffering: int = 1 << 20) -> Iterator[IO[bytes]]:
    """Open a temporary file for writing; on success fsync and rename it to ``target``.

    On any exception the temporary file is removed and ``target`` is untouched; a full disk or quota is
    one ``DiskFull`` naming the file.
    """
    f = AtomicFile(target, buffering=buffering)
    try:
        yield f.file
        f.commit()
    except BaseException as e:
        f.abort()
        full = no_space_error(f.target, e)
        if full is not None:
            raise full from e
        raise


def write_json_atomic(target: Path, obj: Any) -> None:
    """Write JSON (indented, keys in insertion order) atomically."""
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    with atomic_writer(Path(target)) as f:
        f.write(data)


def read_json(path: Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


def sha256_file(path: Path, *, block: int = 8 << 20) -> str:
    with open(path, "rb") as f:
        return sha256_reader(f, block=block)


def sha256_reader(f: Any, *, block: int = 8 << 20) -> str:
    """sha256 of everything ``f.read(block)`` returns until it is empty (a file, an S3 or fsspec body)."""
    h = hashlib.sha256()
    while chunk := f.read(block):
        h.update(chunk)
    return h.hexdigest()


def remove_stale_temps(directory: Path, stem: str) -> int:
    """Remove temporary files left for ``stem`` by dead processes (any host); return how many.

    Only called by the task that owns ``stem`` (one task per shard), so no live writer is affected.
    """
    removed = 0
    for p in directory.glob(f".{stem}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed += 1
    return removed
