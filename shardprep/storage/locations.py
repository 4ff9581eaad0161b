"""Where a dataset's bytes come from: local/Lustre paths, ``s3://`` or any other URL fsspec knows.

``ByteSource`` is the random-access seam every shard read goes through (``LocalSource`` reads a local or
Lustre file with ``pread``).  ``shard.index``, the loader and the ``verify``/``inspect``/``report``
commands call the functions below by location; each one sends a local path to the file system, an ``s3://`` URL to the one S3 layer
(``shardprep.storage.s3``: the client per process and options, botocore's standard retries, exact ranged
reads, shared with staging) and any other URL (``gs://``, ``az://``, ``https://``, ``hf://`` ...) to
``shardprep.storage.remote`` (fsspec).  A shard is never downloaded whole: each sample is one ranged read
at the byte offsets of the sidecar's chunk table (``shard.reader.read_chunk`` over a ``ByteSource``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from shardprep.errors import ConfigError, InputDataError
from shardprep.storage import remote
from shardprep.storage import s3 as s3layer
from shardprep.storage.atomic import sha256_file
from shardprep.storage.s3 import ClientOptions


class ByteSource(Protocol):
    """Random-access bytes of one shard."""

    def read(self, offset: int, size: int) -> bytes: ...

    def close(self) -> None: ...


class LocalSource:
    """A local or Lustre file read with ``os.pread`` (thread-safe, no seek state)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDONLY)

    def read(self, offset: int, size: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise EOFError(f"{self.path}: truncated: wanted {size} bytes at offset {offset}, got {len(data)}")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # best effort; readers usually close explicitly
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class StorageOptions:
    """How to reach remote shards: the S3 client's options (endpoint, profile, region, attempts) for
    ``s3://``, and fsspec's ``storage_options`` (passed to the file system of any other URL).

    Frozen; it travels to DataLoader workers (which build their own clients and file systems).
    """

    s3: ClientOptions = field(default_factory=ClientOptions)
    fsspec: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def build(cls, *, endpoint_url: str | None = None, s3: ClientOptions | None = None,
              storage_options: Mapping[str, Any] | None = None) -> "StorageOptions":
        """From ``ShardDataset``'s arguments; ``endpoint_url`` is the shorthand for ``s3=ClientOptions(...)``."""
        if endpoint_url is not None and s3 is not None:
            raise ConfigError(f"endpoint_url={endpoint_url!r} and s3=... both given: set the endpoint in "
                              f"s3=ClientOptions(endpoint_url=...) only")
        return cls(s3=s3 if s3 is not None else ClientOptions(endpoint_url=endpoint_url),
                   fsspec=dict(storage_options or {}))


_DEFAULT = StorageOptions()


def is_s3(location: str | os.PathLike) -> bool:
    return s3layer.is_s3_url(location)


def is_url(location: str | os.PathLike) -> bool:
    """``s3://`` or any other URL (read remotely), as opposed to a local or Lustre path."""
    return is_s3(location) or remote.is_fsspec_url(location)


def join(root: str, name: str) -> str:
    """``root/name`` for a directory path or a URL prefix."""
    if is_url(root):
        return str(root).rstrip("/") + "/" + name
    return str(Path(root) / name)


def _client(storage: StorageOptions | None) -> Any:   # a boto3 S3 client
    return s3layer.shared_client((storage or _DEFAULT).s3)


def open_source(location: str, *, storage: StorageOptions | None = None) -> ByteSource:
    """A ByteSource for a local path or a URL."""
    if is_s3(location):
        return s3layer.S3Source(location, (storage or _DEFAULT).s3)
    if remote.is_fsspec_url(location):
        return remote.FsspecSource(location, (storage or _DEFAULT).fsspec)
    try:
        return LocalSource(location)
    except FileNotFoundError:
        raise InputDataError(f"{location}: shard is missing") from None


def read_bytes(location: str, *, storage: StorageOptions | None = None) -> bytes:
    """A whole small file (index.json, a sidecar); FileNotFoundError when it does not exist."""
    if is_s3(location):
        return s3layer.read_object(_client(storage), s3layer.parse_s3_object(location))
    if remote.is_fsspec_url(location):
        return remote.read_object(location, (storage or _DEFAULT).fsspec)
    return Path(location).read_bytes()


def object_sizes(root: str, *, storage: StorageOptions | None = None) -> Mapping[str, int]:
    """Sizes of the files directly under ``root`` (one LIST per 1,000 objects on S3, one listing on other
    stores, a HEAD per name looked up over HTTP, a scandir locally); FileNotFoundError when ``root`` (the
    directory or the bucket) does not exist."""
    if is_s3(root):
        return s3layer.object_sizes(_client(storage), s3layer.parse_s3_url(root))
    if remote.is_fsspec_url(root):
        return remote.object_sizes(root, (storage or _DEFAULT).fsspec)
    with os.scandir(root) as it:
        return {e.name: e.stat().st_size for e in it if e.is_file()}


def sha256_of(location: str, *, storage: StorageOptions | None = None, block: int = 8 << 20) -> str:
    """sha256 of a whole shard, streamed (``verify=True``)."""
    if is_s3(location):
        return s3layer.sha256_object(_client(storage), s3layer.parse_s3_object(location), block=block)
    if remote.is_fsspec_url(location):
        return remote.sha256_object(location, (storage or _DEFAULT).fsspec, block=block)
    return sha256_file(Path(location), block=block)
