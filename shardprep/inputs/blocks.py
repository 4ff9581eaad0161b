"""A text input's planned range as large blocks of whole lines: the reading half of the fast path.

Why blocks: a task used to walk its input one line at a time through a chain of Python generators, a
frame and a ``decode`` per line, which cost more than the encoder itself (issue 20).  Here the input is
read in 8 MiB pieces and cut at the last newline; everything after that (validating UTF-8, finding the
empty lines, handing the documents to the encoder) works on whole blocks in C (``inputs.batches``).

What a block holds is exactly what the per-line reader (``inputs.readers._scan_lines``) yields, so the
skip accounting cannot drift: the lines that *start* inside the item's ``[start, end)`` byte range (the
last one finished past ``end``), never past the planned size of the file.  A line longer than ``limit``
is never held whole: it is consumed in pieces and reported as a :class:`LongLine` in its place in the
stream (the consumer counts it as ``too_long``).  Line numbers are the consumer's business: it knows how
many lines each block held once it has cut it into documents, which spares a count of every newline.

Reads can run one block ahead in a thread (``prefetched``): file reads and zlib/zstd decompression release
the GIL, so waiting on a network file system overlaps with the encoder.  It is worth it only where reads
wait (``reads_wait``: Lustre, NFS, FUSE...); on a local disk or tmpfs the page cache answers in a few
milliseconds and a block held ahead only adds to the task's memory.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import queue
import threading
import zlib
from dataclasses import dataclass
from typing import Iterator, Protocol, TypeVar

from shardprep.errors import InputDataError
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import OpenInput, PlannedSize
from shardprep.storage.locations import is_url

BLOCK_BYTES = 8 << 20
T = TypeVar("T")
REMOTE_MARGIN = 64 << 10    # a remote range shorter than a block is read in one request this much past its end
UTF8_BOM = b"\xef\xbb\xbf"   # stripped at byte 0 of a (decompressed) text input only; anywhere else it is text

# What a corrupt compressed stream raises: gzip (OSError/BadGzipFile, EOFError, zlib.error) and zstandard
# (ZstdError, a subclass of Exception only).
STREAM_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError, zlib.error)
try:
    import zstandard as _zstd

    STREAM_ERRORS += (_zstd.ZstdError,)
except ImportError:  # pragma: no cover - zstandard is a dependency
    pass


class Stream(Protocol):
    """What reading needs of a file or a decompressing reader."""

    def read(self, size: int = ..., /) -> bytes: ...

    def seek(self, offset: int, whence: int = ..., /) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TextBlock:
    """Whole lines of one input: ``data[0]`` is byte ``start`` (decompressed offset) and starts a line.

    Every line ends with ``\\n`` except, when ``terminated`` is False, the last line of the input.
    """

    data: bytes
    start: int
    terminated: bool = True


@dataclass(frozen=True)
class LongLine:
    """A line longer than the limit, consumed without being held: ``length`` bytes at ``start``."""

    start: int
    length: int
    nul_bytes: int


Piece = TextBlock | LongLine


def open_binary(inp: InputFile) -> tuple[OpenInput, Stream]:
    """(the opened input, to ``check()`` after reading; its decompressed stream); a compressed input ends at
    its planned size.  A remote object is read in ranged requests of the size asked (a block), or of
    ``BLOCK_BYTES`` under a decompressor."""
    opened = OpenInput(inp)
    if inp.compression is None:
        return opened, opened.raw
    # a remote object ends at its planned size (SourceRaw) and is read in requests of a block
    planned: io.RawIOBase | io.BufferedReader = (opened.buffered(BLOCK_BYTES) if opened.remote
                                                 else PlannedSize(opened.raw, inp.size))
    if inp.compression == "gz":
        source = planned if opened.remote else io.BufferedReader(planned, buffer_size=1 << 20)
        return opened, gzip.GzipFile(fileobj=source)
    import zstandard

    # zstandard's stub asks for IO[bytes]; the reader needs only read(), which a RawIOBase has
    return opened, zstandard.ZstdDecompressor().stream_reader(planned, closefd=True)  # type: ignore[arg-type]


class CorruptStream(Exception):
    """Reading the (decompressed) stream failed at byte ``at``."""

    def __init__(self, at: int, cause: BaseException):
        super().__init__(at, cause)
        self.at, self.cause = at, cause


def _read_exactly(f: Stream, n: int) -> bytes:
    """Up to ``n`` bytes; short only at the end of the stream (a raw file may return less per call)."""
    data = f.read(n)
    if not data or len(data) == n:
        return data or b""
    parts, got = [data], len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Splitter:
    """The state machine behind :func:`scan_blocks`: raw reads in, whole-line pieces out."""

    def __init__(self, start: int, end: int | None, limit: int):
        self.pos = start            # where the first line not yet handed out starts
        self.end = end
        self.limit = limit
        self.carry: list[bytes] = []   # the start of a line whose newline is not read yet
        self.carry_len = 0
        self.discarding = False     # the carried line is over the limit: only counted until its newline
        self.nuls = 0               # NUL bytes of a discarded line
        self.done = False           # the range's last line was handed out

    def _past_end(self) -> bool:
        self.done = self.end is not None and self.pos >= self.end
        return self.done

    def _hold(self, piece: bytes) -> None:
        """Carry ``piece`` (no newline in it) to the next read; count it once the line is too long."""
        self.carry_len += len(piece)
        if self.discarding:
            self.nuls += piece.count(b"\0")
            return
        self.carry.append(piece)
        if self.carry_len > self.limit:
            self.discarding = True
            self.nuls = sum(p.count(b"\0") for p in self.carry)
            self.carry = []

    def _long_line(self, tail: bytes) -> LongLine:
        """The carried line ends with ``tail`` (its newline excluded) and is over the limit."""
        nuls = self.nuls + tail.count(b"\0") + (0 if self.discarding else sum(p.count(b"\0") for p in self.carry))
        line = LongLine(self.pos, self.carry_len + len(tail), nuls)
        self.pos += line.length + 1
        self.carry, self.carry_len, self.discarding, self.nuls = [], 0, False, 0
        return line

    def feed(self, chunk: bytes) -> Iterator[Piece]:
        first = chunk.find(b"\n")
        if first < 0:
            self._hold(chunk)
            return
        if self.discarding or self.carry_len + first > self.limit:    # the carried line ends over the limit
            yield self._long_line(chunk[:first])
            if self._past_end():
                return
            chunk, first = chunk[first + 1:], 0
            if b"\n" not in chunk:
                self._hold(chunk) if chunk else None
                return
        last = chunk.rfind(b"\n")
        # one copy of the block at most (a slice of bytes is a copy, and so is each concatenation)
        whole = memoryview(chunk)[:last + 1]
        data = b"".join((*self.carry, whole)) if self.carry else chunk if last + 1 == len(chunk) else bytes(whole)
        self.carry, self.carry_len = [], 0
        if self.end is not None and self.pos + len(data) > self.end:
            data = data[:data.find(b"\n", max(0, self.end - self.pos - 1)) + 1]   # finish the line holding end-1
            self.done = True
        yield TextBlock(data, self.pos)
        self.pos += len(data)
        if not self.done and last + 1 < len(chunk):
            self._hold(chunk[last + 1:])

    def finish(self) -> Iterator[Piece]:
        """At the end of the stream: the last line, when it has no newline and starts in range."""
        if self.done or not self.carry_len or (self.end is not None and self.pos >= self.end):
            return
        if self.discarding:
            yield self._long_line(b"")
        else:
            yield TextBlock(b"".join(self.carry), self.pos, terminated=False)


def scan_blocks(f: Stream, start: int, end: int | None, limit: int,
                block_bytes: int = BLOCK_BYTES) -> Iterator[Piece]:
    """Whole-line blocks and over-long lines of ``f`` (positioned at ``start``), for the lines starting in
    ``[start, end)``; ``end`` None: to the end of the stream.  A read error raises :class:`CorruptStream`
    with the offset of the line being read.

    A UTF-8 BOM at byte 0 of the stream is dropped here, before either reading path sees a line: it is an
    encoding mark, not text (it used to become tokens of document 0, and made line 1 of a jsonl file
    malformed JSON).  A range starting later (a split file's next task) starts at byte ``start`` > 0, where
    the same bytes are text (docs/dataflow.md, "5. Tokenize")."""
    split = _Splitter(start, end, limit)
    at_byte_0 = start == 0
    while not split.done and (end is None or split.pos < end):
        try:
            chunk = _read_exactly(f, max(block_bytes, len(UTF8_BOM)) if at_byte_0 else block_bytes)
        except STREAM_ERRORS as e:
            raise CorruptStream(split.pos + split.carry_len, e) from None
        if not chunk:
            break
        if at_byte_0 and chunk.startswith(UTF8_BOM):    # the file's BOM: no part of its first line
            chunk, split.pos = chunk[len(UTF8_BOM):], len(UTF8_BOM)
        at_byte_0 = False
        yield from split.feed(chunk)
    yield from split.finish()


def item_blocks(inp: InputFile, start: int, end: int | None, limit: int, *,
                block_bytes: int = BLOCK_BYTES) -> Iterator[Piece]:
    """:func:`scan_blocks` over one input's range, with the checks the plan asks for: never past the
    planned size, and, once the range is read, the input unchanged since planning (``fstat``, or the
    remote object's identity).  A remote range shorter than a block is read in one request of its size
    and ``REMOTE_MARGIN`` (to finish its last line), not a whole block past its end."""
    opened, f = open_binary(inp)
    try:
        if start:
            f.seek(start)
        if end is None and inp.compression is None:
            end = inp.size
        if opened.remote and end is not None:
            block_bytes = min(block_bytes, end - start + REMOTE_MARGIN)
        try:
            yield from scan_blocks(f, start, end, limit, block_bytes)
        except CorruptStream as e:  # a corrupt gzip/zstd stream, or one cut short by a truncation
            opened.check()
            raise InputDataError(f"{inp.path}: cannot read input near byte {e.at}: {e.cause}") from None
        opened.check()
    finally:
        f.close()
        opened.close()


# File systems whose reads come from memory or a local device in a few milliseconds per block.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay",
                                "squashfs", "devtmpfs"})


@functools.lru_cache(maxsize=1)
def _mounts() -> list:
    from shardprep.storage.mounts import read_mount_table

    try:
        return read_mount_table()
    except OSError:
        return []


def reads_wait(path: str) -> bool:
    """Whether reading ``path`` waits on a network or cluster file system or an object store (worth a block
    read ahead)."""
    from shardprep.storage.mounts import mount_for

    if is_url(path):
        return True
    mount = mount_for(os.path.abspath(path), _mounts())
    return mount is not None and mount.fstype not in LOCAL_FILE_SYSTEMS


_DONE = object()


def prefetched(pieces: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``pieces``, produced up to ``depth`` ahead in a thread (reads and decompression release the GIL).

    An exception in the producer is raised here, in order; leaving early stops the producer at its next
    piece (the thread is a daemon and holds at most ``depth`` pieces).
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for piece in pieces:
                while not stop.is_set():
                    try:
                        q.put(piece, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            q.put(e)

    thread = threading.Thread(target=produce, name="shardprep-read", daemon=True)
    thread.start()
    try:
        while True:
            got = q.get()
            if got is _DONE:
                return
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        stop.set()
        thread.join(timeout=5)
        close = getattr(pieces, "close", None)
        if close is not None and not thread.is_alive():
            close()
