"""Reading exactly what the plan froze: an input appended, truncated or rewritten while its task reads it
must fail the task (naming the file), never end up in a shard.

The plan records each input's size and mtime.  A task checks them before it starts (``job.task``); the
readers read no further than the planned size (``PlannedSize`` for compressed files, the planned end for
plain ones) and check again with ``fstat``/``stat`` once an input's range is read (``check_unchanged``).
A truncation shows up as a short read or a corrupt compressed stream; the check then reports the change
rather than the corruption.

A remote input (a URL, issue 22) is opened through its store, with the options it carries
(``InputFile.storage``), held to the planned size and identity (``OpenInput``: ``storage.objects``):
every read fails once the object is another version, and ``check`` asks the store again after reading.
What the store raises becomes one line naming the input (``input_errors``): changed or gone, exit 3; a
transfer that failed after its retries, exit 7.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TypeVar

from shardprep.errors import InputDataError, ShardprepError
from shardprep.inputs.discover import InputFile
from shardprep.storage.locations import is_url, remote_store_for, scheme
from shardprep.storage.objects import ObjectChanged
from shardprep.storage.store import SourceRaw

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import WriteableBuffer

T = TypeVar("T")
log = logging.getLogger(__name__)


def changed_since_planned(inp: InputFile, st: os.stat_result) -> str | None:
    """How the file behind ``st`` differs from the planned ``inp`` (size, mtime), or None when it does not."""
    if st.st_size != inp.size:
        return f"size {inp.size} -> {st.st_size} bytes"
    if st.st_mtime_ns != inp.mtime_ns:
        return "modified (same size, new mtime)"
    return None


def stat_change(inp: InputFile) -> str | None:
    """How a local input differs from its plan now (:func:`changed_since_planned`); None too for a remote
    object, which every read holds to its planned identity.  InputDataError when it cannot be read."""
    if is_url(inp.path):
        return None
    try:
        st = os.stat(inp.path)
    except OSError as e:
        raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None
    return changed_since_planned(inp, st)


def check_unchanged(inp: InputFile, st: os.stat_result) -> None:
    """After reading: the bytes read are the planned ones only if the file did not change meanwhile."""
    _changed_while_read(inp, changed_since_planned(inp, st))


def _changed_while_read(inp: InputFile, change: str | None) -> None:
    if change:
        raise InputDataError(f"input {inp.path} changed while its task was reading it ({change}); "
                             f"the shard was not written", hint="re-plan into a new output directory "
                                                                "once the file is final")


class PlannedSize(io.RawIOBase):
    """A raw file that ends at the planned size: bytes appended after planning are never read."""

    def __init__(self, raw: io.RawIOBase, size: int):
        self._raw, self._left = raw, size

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        if self._left <= 0:
            return 0
        n = self._raw.readinto(memoryview(b)[:self._left]) or 0
        self._left -= n
        return n

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()
        super().close()


def rows_then_check(inp: InputFile, docs: Iterator[T]) -> Iterator[T]:
    """A tabular reader's batches, then the check that the file did not change while they were read (a
    remote input's reader checks its object itself: ``tabular.parquet_batches``)."""
    yield from docs
    _changed_while_read(inp, stat_change(inp))


PROBE_BYTES = 64 << 10      # a remote input's small reads (line boundaries, heads, a parquet footer) per request


@contextlib.contextmanager
def input_errors(inp: InputFile) -> Iterator[None]:
    """A store's exceptions for input ``inp`` as one line naming it: a changed, missing or short object is
    bad input (exit 3); a ``TransferError`` (retries used up, access denied: exit 7) stays as it is."""
    try:
        yield
    except ShardprepError:
        raise
    except ObjectChanged as e:
        raise InputDataError(f"input {inp.path} changed after it was planned ({e.change}); nothing read from it "
                             f"is kept", hint="re-plan (a new --output, or --overwrite) once the object is final, "
                                              "then `submit --resume`") from None
    except FileNotFoundError as e:
        raise InputDataError(f"input {inp.path} is missing: {e}", hint="re-plan without it") from None
    except EOFError as e:
        raise InputDataError(f"input {inp.path} is shorter than planned: {e}", hint="re-plan") from None


_CONNECTING = threading.Lock()       # held while a thread connects ahead
_FORK_HOOK: list[bool] = []


def connect_ahead(inputs: Iterable[InputFile]) -> None:
    """Connect to the stores of the remote ones among ``inputs`` in a thread (boto3 alone takes ~0.1 s to
    import), so that the first read finds them ready; failures are left for that read to report.

    A fork waits until the thread is done (``os.register_at_fork``): a child must not inherit an import or a
    client half made by it, with its locks held for ever (a task with several CPUs forks its workers).
    """
    first = {scheme(i.path): i for i in inputs if is_url(i.path)}
    if not first:
        return

    def connect() -> None:
        try:
            for inp in first.values():
                try:
                    remote_store_for(inp.path, inp.storage).connect(inp.path)
                except Exception:   # noqa: BLE001 - the read that needs it raises it again, naming the input
                    log.debug("connecting ahead to %s failed", inp.path, exc_info=True)
        finally:
            _CONNECTING.release()

    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        # boto3 imports it, and it registers a pair of fork hooks: imported in the thread while a fork waits
        # for it, its "after" hook would run without its "before" one (RuntimeError: release unlocked lock)
        import concurrent.futures.thread  # noqa: F401

        os.register_at_fork(before=_connected)
        _FORK_HOOK.append(True)
    _CONNECTING.acquire()           # here, not in the thread: a fork right after this call waits too
    threading.Thread(target=connect, name="shardprep-connect", daemon=True).start()


def _connected() -> None:
    with _CONNECTING:
        pass


class _Checked:
    """A remote input's ``VersionSource`` whose failures name the input (``input_errors``)."""

    def __init__(self, inp: InputFile):
        self.inp = inp
        with input_errors(inp):
            self._source = remote_store_for(inp.path, inp.storage).open_version(inp.path, inp.size, inp.identity)

    def read(self, offset: int, size: int) -> bytes:
        with input_errors(self.inp):
            return self._source.read(offset, size)

    def check(self) -> None:
        with input_errors(self.inp):
            self._source.check()

    def close(self) -> None:
        self._source.close()


class OpenInput:
    """An input opened to read what the plan froze: ``raw`` (one read of the file, or one ranged request of
    the object, per call), ``buffered(n)`` for small reads, and ``check()`` once it was read."""

    def __init__(self, inp: InputFile):
        self.inp = inp
        self.remote = is_url(inp.path)
        self.raw: Any
        if self.remote:
            self._source = _Checked(inp)
            self.raw = SourceRaw(self._source, inp.size)
            return
        try:
            self.raw = open(inp.path, "rb", buffering=0)
        except OSError as e:
            raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None

    def buffered(self, size: int = PROBE_BYTES) -> io.BufferedReader:
        """``raw`` read in pieces of ``size`` bytes (closing it closes ``raw``)."""
        return io.BufferedReader(self.raw, buffer_size=size)

    def for_pyarrow(self) -> Any:
        """What pyarrow opens: a file by its path (its own reads), an object through ranged requests."""
        return self.buffered() if self.remote else self.inp.path

    def check(self) -> None:
        """After reading: the bytes read are the planned ones only if the input did not change meanwhile."""
        if self.remote:
            self._source.check()
        else:
            check_unchanged(self.inp, os.fstat(self.raw.fileno()))

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> "OpenInput":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parquet_file(opened: OpenInput) -> Any:
    """pyarrow's ``ParquetFile`` of an opened input; a file that is not parquet is one line naming it."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(opened.for_pyarrow())
    except ShardprepError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for junk files
        raise InputDataError(f"input {opened.inp.path} is not a readable parquet file: {e}") from None
