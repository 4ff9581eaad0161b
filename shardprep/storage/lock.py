"""One writer per output directory: an exclusive lock on ``<output>/.shardprep.lock``.

Two ``submit``s into one directory used to race each other's temporary files and both failed with a raw
FileNotFoundError.  Whatever writes the plan, submits or finalizes now holds this lock; a second one is
refused at once with a message naming the holder (exit 4), so nothing is half done.  Array tasks do not
lock: each owns exactly one shard.

Two mechanisms, chosen by what the file system supports:

* ``flock`` (local disks, NFSv4, Lustre mounted with ``-o flock``): the kernel (or the Lustre lock
  manager, cluster-wide) releases the lock when its holder dies, so a killed run never leaves a lock
  behind.  The file also carries an owner record, read only to name the holder in the refusal.
* an ``O_EXCL`` lock file (Lustre mounted ``-o noflock``, where flock fails with ENOSYS; other file
  systems answering EOPNOTSUPP or ENOLCK): existence is the lock, and the owner record (host, pid,
  process start time, command) decides staleness.  On this host a dead pid (or a pid reused by another
  process) is stale and taken over; on another host this host cannot tell, so the refusal says how old
  the lock is and which file to remove once that process is known to be gone.

With ``-o localflock`` Lustre grants flock per node only, so a lock taken on one node would not exclude
another: there, set ``SHARDPREP_LOCK_MODE=exclusive`` to use the lock file always.  The lock is reentrant within a process (``plan_job`` inside ``submit``
inside ``tokenize_directory``), so library calls may take it without knowing whether a caller did.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import logging
import os
import shlex
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from shardprep.errors import ConfigError, EnvironmentProblem, OutputInUseError
from shardprep.storage.atomic import no_space_error
from shardprep.storage.nofollow import open_fd

log = logging.getLogger(__name__)

LOCK_FILE = ".shardprep.lock"
UNREADABLE_STALE_S = 30.0     # an empty/unparseable O_EXCL lock file this old was left by a crashed taker
POLL_S = 0.2                  # how often a waiting caller retries
MODE_ENV = "SHARDPREP_LOCK_MODE"  # "flock" (default: flock, the lock file where flock is unsupported) or "exclusive"
FLOCK_UNSUPPORTED = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK}
CANNOT_WRITE = {errno.EACCES, errno.EPERM, errno.EROFS}


@dataclass(frozen=True)
class LockOwner:
    """Who holds the lock, as recorded in the lock file (JSON, one object)."""

    host: str
    pid: int
    started: float                   # when the lock was taken (epoch seconds)
    process_start: float | None      # the holder's process start time: tells a reused pid from the holder
    command: str
    mode: str                        # "flock" or "exclusive"
    token: str                       # unique per acquisition

    @classmethod
    def for_this_process(cls, command: str | None, mode: str) -> "LockOwner":
        return cls(socket.gethostname(), os.getpid(), time.time(), _process_start(os.getpid()),
                   command or current_command(), mode, uuid.uuid4().hex)

    def to_bytes(self) -> bytes:
        import orjson

        return orjson.dumps(asdict(self)) + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> "LockOwner | None":
        import orjson

        try:
            d = orjson.loads(data)
            return cls(str(d["host"]), int(d["pid"]), float(d["started"]),
                       None if d.get("process_start") is None else float(d["process_start"]),
                       str(d["command"]), str(d["mode"]), str(d["token"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        since = _dt.datetime.fromtimestamp(self.started).astimezone().isoformat(timespec="seconds")
        return (f"`{self.command}` (pid {self.pid} on {self.host}, since {since}, "
                f"{_age_text(time.time() - self.started)} ago)")


def current_command() -> str:
    """This process's command line as a user would type it (``shardprep submit ...``)."""
    argv = list(sys.argv) or ["?"]
    if argv[0].endswith(("__main__.py", "/shardprep", "shardprep")):
        argv[0] = "shardprep"
    text = shlex.join(argv)
    return text if len(text) <= 300 else text[:297] + "..."


def _age_text(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def _process_start(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def is_unused_dir(directory: Path) -> bool:
    """True when ``directory`` holds nothing but (possibly) its lock file: a new output directory.

    Why: the lock is taken before anything else is written, so "is this directory new" (Lustre striping
    applies only to new directories) must not count the lock file itself.
    """
    return all(p.name == LOCK_FILE for p in Path(directory).iterdir())


# ------------------------------------------------------------------------------------------ staleness

def stale_reason(owner: LockOwner | None, path: Path, *, now: float | None = None) -> str | None:
    """Why the O_EXCL lock file ``path`` (recording ``owner``) is stale; None when it may be live.

    Only this host's processes can be checked: on another host a lock is never declared stale here.
    """
    now = time.time() if now is None else now
    if owner is None:
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            return "the lock file is gone"
        return f"its owner record is unreadable and {age:.0f} s old" if age > UNREADABLE_STALE_S else None
    if owner.host != socket.gethostname():
        return None
    import psutil

    if not psutil.pid_exists(owner.pid):
        return f"pid {owner.pid} on {owner.host} is no longer running"
    start = _process_start(owner.pid)
    if owner.process_start is not None and start is not None and abs(start - owner.process_start) > 1.0:
        return f"pid {owner.pid} on {owner.host} now belongs to another process"
    return None


def _busy(directory: Path, owner: LockOwner | None, *, mode: str) -> OutputInUseError:
    """The refusal: who holds ``directory``; how to get rid of a lock file this host cannot judge."""
    path = directory / LOCK_FILE
    who = owner.describe() if owner else "another process (its owner record is not written yet)"
    hint = f"wait for it to finish (`shardprep status {directory}`), or use another output directory"
    if owner is not None and owner.host != socket.gethostname() and "exclusive" in (mode, owner.mode):
        hint += (f"; this host cannot check a process on {owner.host}: if it is no longer running there, "
                 f"remove {path}")
    return OutputInUseError(f"{directory} is in use by another shardprep run: {who}", hint=hint)


# --------------------------------------------------------------------------------------------- taking

class _FlockUnsupported(Exception):
    """flock is not available on this file system (ENOSYS, EOPNOTSUPP, ENOLCK)."""


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 65536, 0)


def _try_flock(path: Path, command: str | None) -> tuple[int | None, LockOwner | None]:
    """(fd holding the lock, None) or (None, the holder as far as known).  Raises _FlockUnsupported."""
    import fcntl

    while True:
        try:
            fd, created = _open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL), True
        except FileExistsError:
            try:
                fd, created = _open(path, os.O_RDWR), False
            except FileNotFoundError:
                continue                                     # released meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = LockOwner.from_bytes(_read_fd(fd))
            os.close(fd)
            return None, holder
        except OSError as e:
            os.close(fd)
            if e.errno in FLOCK_UNSUPPORTED:
                if created:                   # the O_EXCL fallback must not find our empty file
                    path.unlink()
                raise _FlockUnsupported(e.strerror) from None
            raise
        # A holder releasing the lock unlinks the file before unlocking: if the name no longer leads to
        # the inode we locked, we locked a dead file; start again.
        with contextlib.suppress(FileNotFoundError):
            st, now = os.fstat(fd), os.stat(path)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                break
        os.close(fd)
    previous = LockOwner.from_bytes(_read_fd(fd))
    if previous is not None and previous.mode == "exclusive" and stale_reason(previous, path) is None:
        os.close(fd)          # a node without flock support holds it as an O_EXCL file: respect that
        return None, previous
    owner = LockOwner.for_this_process(command, "flock")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.to_bytes(), 0)
    except OSError as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)                  # held: unlinked as a release does
        os.close(fd)
        raise _write_failed(path, e) from None
    return fd, None


def _try_exclusive(path: Path, command: str | None) -> tuple[LockOwner | None, LockOwner | None]:
    """(our owner record, None) when the O_EXCL lock file was created, else (None, its holder)."""
    while True:
        owner = LockOwner.for_this_process(command, "exclusive")
        try:
            fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            try:
                before = path.read_bytes()
            except FileNotFoundError:
                continue                                   # released meanwhile: try again
            holder = LockOwner.from_bytes(before)
            why = stale_reason(holder, path)
            if why is None:
                return None, holder
            _break_stale(path, before, why)
            continue
        try:
            os.write(fd, owner.to_bytes())
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()                # ours (O_EXCL): an empty lock file must not stay behind
            raise _write_failed(path, e) from None
        os.close(fd)
        return owner, None


def _break_stale(path: Path, seen: bytes, why: str) -> None:
    """Remove a stale O_EXCL lock file, but only the one judged: two processes taking over the same stale
    lock must not delete each other's fresh one.  The file is renamed aside first (atomic), and if what
    was moved is not what was judged stale, it is put back."""
    aside = path.with_name(f"{LOCK_FILE}.stale.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if aside.read_bytes() != seen:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        aside.unlink()
        return
    aside.unlink()
    log.warning("took over the stale lock %s: %s", path, why)


def _write_failed(path: Path, e: OSError) -> Exception:
    """The one-line error for a lock file that could not be created or written (a full disk, a quota, a
    read-only directory); anything else stays a bug (the OSError itself)."""
    full = no_space_error(path, e, cleanup="no lock file was left behind")
    if full is not None:
        return full
    if e.errno in CANNOT_WRITE:
        return EnvironmentProblem(f"cannot write in the output directory {path.parent}: {e.strerror}",
                                  hint="choose a directory you can write to")
    return e


def _open(path: Path, flags: int) -> int:
    try:
        return open_fd(path, flags, 0o644)    # never through a link planted there (PlantedLinkError, exit 4)
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as e:
        raise _write_failed(path, e) from None


def make_dir(directory: Path, *, what: str = "output directory") -> bool:
    """Create ``directory`` (and parents); True when it did not exist.  One-line errors for a path that
    is a file (exit 2) or cannot be created (exit 8: no permission, read-only, no space, or a parent that
    cannot hold directories, such as ``/proc``); ``what`` names the directory in them."""
    if directory.exists():
        if not directory.is_dir():
            raise ConfigError(f"{what} {directory} is a file, not a directory")
        return False
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        return False
    except NotADirectoryError:
        raise ConfigError(f"{what} {directory}: a parent of it is a file, not a directory") from None
    except OSError as e:
        full = no_space_error(directory, e, cleanup="nothing was written")
        raise full or EnvironmentProblem(f"cannot create the {what} {directory}: {e.strerror}",
                                         hint="choose a directory you can write to") from None
    return True


@dataclass
class _Held:
    pid: int
    depth: int
    fd: int | None           # flock mode
    owner: LockOwner | None  # exclusive mode


_HELD: dict[str, _Held] = {}


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike, *, command: str | None = None,
                wait_s: float = 0.0) -> Iterator[Path]:
    """Hold the exclusive lock of output directory ``directory`` (created if needed) for the block.

    Refuses with :class:`OutputInUseError` (exit 4) naming the holder, after waiting up to ``wait_s``
    seconds for it to go.  A directory this call created is removed again if it is still empty.
    """
    directory = Path(directory)
    key = os.path.realpath(directory)
    held = _HELD.get(key)
    if held is not None and held.pid == os.getpid():
        held.depth += 1
        try:
            yield directory
        finally:
            held.depth -= 1
        return
    created = make_dir(directory)
    try:
        _HELD[key] = _acquire(directory, command, time.monotonic() + wait_s)
        try:
            yield directory
        finally:
            _release(directory, _HELD.pop(key))
    finally:
        if created:
            with contextlib.suppress(OSError):
                directory.rmdir()           # only succeeds when nothing was written


def _lock_mode() -> str:
    mode = os.environ.get(MODE_ENV, "flock") or "flock"
    if mode not in ("flock", "exclusive"):
        raise ConfigError(f"{MODE_ENV}={mode!r}: use flock (the default) or exclusive")
    return mode


def _acquire(directory: Path, command: str | None, deadline: float) -> _Held:
    path = directory / LOCK_FILE
    mode = _lock_mode()
    announced = False
    while True:
        if mode == "flock":
            try:
                fd, holder = _try_flock(path, command)
                if fd is not None:
                    return _Held(os.getpid(), 1, fd, None)
            except _FlockUnsupported as e:
                log.info("%s: flock is not supported here (%s); using an O_EXCL lock file", directory, e)
                mode = "exclusive"
                continue
        else:
            owner, holder = _try_exclusive(path, command)
            if owner is not None:
                return _Held(os.getpid(), 1, None, owner)
        if time.monotonic() >= deadline:
            raise _busy(directory, holder, mode=mode)
        if not announced:
            log.info("waiting for %s: held by %s", path, holder.describe() if holder else "another process")
            announced = True
        time.sleep(POLL_S)


def _release(directory: Path, held: _Held) -> None:
    path = directory / LOCK_FILE
    if held.fd is not None:
        # unlink while still holding, so a waiter that opened the old file notices and starts again
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(held.fd)
        return
    try:
        mine = LockOwner.from_bytes(path.read_bytes())
    except FileNotFoundError:
        mine = None
    if mine is not None and held.owner is not None and mine.token == held.owner.token:
        path.unlink()
    else:
        log.warning("%s no longer holds this process's lock record; left as it is", path)
