"""Reading exactly what the plan froze: an input appended, truncated or rewritten while its task reads it
must fail the task (naming the file), never end up in a shard.

The plan records each input's size and mtime.  A task checks them before it starts (``job.task``); the
readers read no further than the planned size (``PlannedSize`` for compressed files, the planned end for
plain ones) and check again with ``fstat``/``stat`` once an input's range is read (``check_unchanged``).
A truncation shows up as a short read or a corrupt compressed stream; the check then reports the change
rather than the corruption.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Iterator, TypeVar

from shardprep.errors import InputDataError
from shardprep.inputs.discover import InputFile

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import WriteableBuffer

T = TypeVar("T")


def changed_since_planned(inp: InputFile, st: os.stat_result) -> str | None:
    """How the file behind ``st`` differs from the planned ``inp`` (size, mtime), or None when it does not."""
    if st.st_size != inp.size:
        return f"size {inp.size} -> {st.st_size} bytes"
    if st.st_mtime_ns != inp.mtime_ns:
        return "modified (same size, new mtime)"
    return None


def check_unchanged(inp: InputFile, st: os.stat_result) -> None:
    """After reading: the bytes read are the planned ones only if the file did not change meanwhile."""
    change = changed_since_planned(inp, st)
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
    """A tabular reader's batches, then the check that the file did not change while they were read."""
    yield from docs
    try:
        st = os.stat(inp.path)
    except OSError as e:
        raise InputDataError(f"input {inp.path} is not readable: {e.strerror}") from None
    check_unchanged(inp, st)
