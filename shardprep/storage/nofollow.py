"""Writing under an output directory without following a link someone planted there.

An output directory on a shared file system is often group-writable, so anyone in the group can put a
symbolic link at a name shardprep is about to write (``.shardprep.lock``, ``logs/task-00003.log``,
``logs/`` itself, a temporary name, repair's scratch directory) and redirect the write into a file of the
user running shardprep: the lock record once truncated such a file, a task once appended its log to one.
Every file shardprep creates or appends to under an output directory is therefore opened here, with
``O_NOFOLLOW`` (and ``O_EXCL`` for new temporary names), and every directory it makes there is made here and
must be a real directory; a link found at such a name is refused with :class:`PlantedLinkError` (exit 4,
one line naming the link and where it points), never followed and never silently removed.

The output directory itself, and the directories above it, are the user's choice and are followed as
given; only the names shardprep writes below it are not.  Renaming a finished temporary file onto a final
name (``storage.atomic``) replaces a link there rather than writing through it, so final names need no
check of their own.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import IO

from shardprep.errors import PlantedLinkError
from shardprep.records import printable

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_MODES = {"wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "xb": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def _refusal(path: Path, what: str = "") -> PlantedLinkError:
    try:
        where = f" (to {printable(os.readlink(path))})"
    except OSError:
        where = ""
    return PlantedLinkError(
        f"{printable(str(path))} is a symbolic link{where}{what}: shardprep writes this name itself and does "
        f"not follow a link there", hint="remove the link (whoever can write to the output directory put it "
                                          "there) and run the command again")


def refuse_link(path: str | os.PathLike[str]) -> None:
    """Raise :class:`PlantedLinkError` when ``path`` itself is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise _refusal(Path(path))


def open_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o666, *, parent_too: bool = False) -> int:
    """``os.open`` that never follows a link at ``path`` (nor, ``parent_too``, at its directory: for files in
    a subdirectory shardprep made, such as ``logs/``).  A link there is :class:`PlantedLinkError`; any other
    ``OSError`` (FileExistsError for ``O_EXCL`` included) is the caller's.  ``mode`` is ``open()``'s (the
    umask decides, as for every file shardprep wrote before)."""
    path = Path(path)
    dir_fd = None
    try:
        if parent_too:
            try:
                dir_fd = os.open(path.parent, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path.parent):
                    raise _refusal(path.parent) from None
                raise
        try:
            return os.open(path.name if dir_fd is not None else path, flags | _NOFOLLOW | _CLOEXEC, mode,
                           dir_fd=dir_fd)
        except OSError as e:
            # ELOOP: a link with O_NOFOLLOW; EEXIST: O_EXCL found a name, a link (even a dangling one) included
            if e.errno in (errno.ELOOP, errno.EEXIST) and os.path.islink(path):
                raise _refusal(path) from None
            raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def open_file(path: str | os.PathLike[str], mode: str = "wb", *, buffering: int = -1,
              parent_too: bool = False) -> IO[bytes]:
    """A binary file opened for writing (``wb``, ``ab`` or ``xb``) with :func:`open_fd`'s refusal of links."""
    fd = open_fd(path, _MODES[mode], parent_too=parent_too)
    try:
        return os.fdopen(fd, mode, buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def fresh_file_fd(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> int:
    """A new file at ``path`` (a temporary name of this process: host and pid, so predictable), created
    ``O_EXCL | O_NOFOLLOW``: a link planted there is :class:`PlantedLinkError`, a regular file left under that
    name by a dead process with the same pid is removed and the file created again."""
    try:
        return open_fd(path, flags | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        os.unlink(path)         # not a link (open_fd refused that): an earlier process's leftover
        return open_fd(path, flags | os.O_CREAT | os.O_EXCL)


def real_dir(path: str | os.PathLike[str], *, parents: bool = False) -> bool:
    """Make the directory ``path`` (True) or accept it as it is (False) when it is a real directory, never a
    link: a link at ``path`` is :class:`PlantedLinkError`, a file there too (it cannot hold what goes
    there).  ``parents``: create missing directories above it (those are the user's, followed as given)."""
    path = Path(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        pass
    if os.path.islink(path):
        raise _refusal(path, " where shardprep keeps a directory")
    if not path.is_dir():
        raise PlantedLinkError(f"{printable(str(path))} is a file where shardprep keeps a directory",
                               hint="move the file away and run the command again")
    return False


def fresh_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` as a new, empty directory of this process (a scratch or staging name of its own):
    an earlier one left under that name (a dead process with the same pid) is removed first; a link is
    refused, never followed or emptied."""
    path = Path(path)
    refuse_link(path)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:         # put back between the removal and mkdir
        refuse_link(path)
        raise
    return path
