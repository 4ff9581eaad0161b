"""What every store of shards is: the ``Store`` protocol, the ``ByteSource`` it opens, and their one check.

A store is one kind of location (the local file system, S3, anything fsspec knows); which store serves a
location is decided in one table (``storage.locations.SCHEMES``).  Everything above ``storage/`` (the
loader, ``verify``, ``inspect``, ``report``) reads through these four operations and never asks which
store it got, so a new kind of location is one new ``Store`` and one line in that table.

A leaf: the stores import it, and it imports nothing of shardprep.
"""

from __future__ import annotations

import hashlib
import io
from typing import TYPE_CHECKING, Iterator, Mapping, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import WriteableBuffer

    from shardprep.storage.objects import ObjectInfo, VersionSource

READ_BLOCK = 8 << 20     # bytes per ranged read when a whole file is read front to back (one request remotely)


class ByteSource(Protocol):
    """Random-access bytes of one file: each ``read`` returns exactly ``size`` bytes or raises."""

    def read(self, offset: int, size: int) -> bytes: ...

    def close(self) -> None: ...


class Store(Protocol):
    """One kind of location.  Missing files are ``FileNotFoundError``; a short read is ``EOFError``;
    a transfer that failed after the store's own retries is a ``TransferError`` (exit 7)."""

    def open(self, location: str) -> ByteSource:
        """The file at ``location`` for exact ranged reads (shards: one read per sample, never the whole file)."""
        ...

    def read_bytes(self, location: str) -> bytes:
        """A whole small file (index.json, a sidecar, tokenizer.json)."""
        ...

    def sizes(self, root: str) -> Mapping[str, int]:
        """``{name: size}`` of the files directly under ``root``; ``FileNotFoundError`` when it does not exist."""
        ...

    def sha256(self, location: str, *, block: int = 8 << 20) -> str:
        """sha256 of a whole file, streamed in ``block``-byte reads (never held in memory whole)."""
        ...


class RemoteStore(Store, Protocol):
    """A store of input objects (``s3://`` and the fsspec URLs): what ``plan`` lists and a task reads (issue 22)."""

    def connect(self, location: str) -> None:
        """Get ready to serve ``location`` (libraries imported, credentials found, a client made) without a
        request: a task does it while its tokenizer loads."""
        ...

    def walk(self, root: str) -> Iterator[ObjectInfo]:
        """The object at ``root`` and every object under ``root/``, with size and identity, in URL order."""
        ...

    def open_version(self, location: str, size: int, identity: str | None) -> VersionSource:
        """The object at ``location`` for exact ranged reads, held to the planned size and identity
        (``storage.objects.ObjectChanged`` once it is another version)."""
        ...


def exact(data: bytes, where: str, offset: int, size: int) -> bytes:
    """``data`` if it is the ``size`` bytes asked for at ``offset``; else an error saying why.

    One check for every store: fewer bytes than asked means the file is shorter than its reader thinks
    (``EOFError``: its callers say "truncated" or "shorter than planned").  More means the server ignored
    the ``Range`` header (an HTTP 200 with the whole file instead of a 206): a silent full download must
    never pass as a ranged read, and neither the file nor its plan is at fault, so it is a ``TransferError``
    naming the server's behaviour (it used to reach people as a file "shorter than planned" or "truncated").
    """
    if len(data) > size:
        from shardprep.errors import TransferError  # lazily: this module is a leaf (shard/reader.py's import)

        raise TransferError(f"{where}: the server ignored the Range request: asked for {size} bytes at offset "
                            f"{offset}, got {len(data)} (an HTTP 200 with the whole file instead of a 206)",
                            hint="serve the files from a server that answers Range requests (object stores "
                                 "and most web servers do; Python's http.server does not), or copy them here")
    if len(data) < size:
        raise EOFError(f"{where}: truncated: wanted {size} bytes at offset {offset}, got {len(data)}")
    return data


class _Positioned:
    """Read-only and seekable over ``_size`` bytes: the position is all the state a reader of a source needs."""

    _size: int
    _pos: int

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET, /) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


class SourceFile(_Positioned, io.BufferedIOBase):
    """A ``ByteSource`` of ``size`` bytes as a seekable read-only file (for ``tarfile``).

    Small reads (tar headers, members) are served from one block of ``READ_BLOCK`` bytes fetched with one
    ranged read, so a remote shard is walked in a few large requests instead of one per header; a read
    of a block or more goes to the source as it is (no copy through a buffer).
    """

    def __init__(self, source: ByteSource, size: int):
        self._source, self._size, self._pos = source, size, 0
        self._block, self._block_at = b"", 0

    def read(self, size: int | None = -1, /) -> bytes:
        start = self._pos
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        self._pos = end
        if self._block_at <= start and end <= self._block_at + len(self._block):
            return self._block[start - self._block_at:end - self._block_at]
        if end - start >= READ_BLOCK:
            return self._source.read(start, end - start)
        self._block_at, self._block = start, self._source.read(start, min(READ_BLOCK, self._size - start))
        return self._block[:end - start]


class SourceRaw(_Positioned, io.RawIOBase):
    """A ``ByteSource`` of ``size`` bytes as a raw seekable file: each read is exactly one read of the source
    (one ranged request remotely).  Wrap it in ``io.BufferedReader(raw, n)`` to read in requests of ``n``
    bytes: a line-boundary probe wants a few KiB, a stream of blocks its block size."""

    def __init__(self, source: ByteSource, size: int):
        self._source, self._size, self._pos = source, size, 0

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes as the source returned them (no copy through a buffer)."""
        n = self._size - self._pos if size is None or size < 0 else min(size, self._size - self._pos)
        if n <= 0:
            return b""
        data = self._source.read(self._pos, n)
        self._pos += n
        return data

    def readinto(self, b: WriteableBuffer, /) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


class HashingSource:
    """A ``ByteSource`` of ``size`` bytes that hashes its file front to back while it is read.

    Reads in file order (a tar walk) cost nothing extra: the file is read once, parsed and hashed on the
    way.  A read beyond the hashed prefix first fetches the gap; :meth:`sha256` fetches what was never read.
    """

    def __init__(self, source: ByteSource, size: int):
        self._source, self._size = source, size
        self._hashed = 0
        self._hash = hashlib.sha256()

    def read(self, offset: int, size: int) -> bytes:
        self._advance(offset)
        data = self._source.read(offset, size)
        if offset <= self._hashed < offset + len(data):
            self._hash.update(memoryview(data)[self._hashed - offset:])
            self._hashed = offset + len(data)
        return data

    def _advance(self, to: int) -> None:
        while self._hashed < to:
            n = min(READ_BLOCK, to - self._hashed)
            self._hash.update(self._source.read(self._hashed, n))
            self._hashed += n

    def sha256(self) -> str:
        """The whole file's sha256 (reads what the walk did not)."""
        self._advance(self._size)
        return self._hash.hexdigest()

    def close(self) -> None:
        self._source.close()
