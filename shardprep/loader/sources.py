"""Where the loader's bytes come from: local/Lustre paths or ``s3://`` URLs; routing only.

``loader/index.py`` and the dataset call the functions below by location; each one sends a local path to
the file system and an ``s3://`` URL to the one S3 layer (``shardprep.storage.s3``: the client per process
and options, botocore's standard retries, exact ranged reads), so the loader and staging share URL
parsing, clients, retries and error mapping.  A shard is never downloaded whole: each sample is one ranged
read at the byte offsets of the sidecar's chunk table (``shard.reader.ByteSource``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from shardprep.errors import ConfigError, InputDataError
from shardprep.shard.reader import ByteSource, LocalSource
from shardprep.storage import s3 as s3layer
from shardprep.storage.atomic import sha256_file
from shardprep.storage.s3 import ClientOptions


@dataclass(frozen=True)
class StorageOptions:
    """How to reach remote shards: the S3 client's options (endpoint, profile, region, attempts).

    Frozen and hashable: it keys the per-process client cache and travels to DataLoader workers.
    """

    s3: ClientOptions = field(default_factory=ClientOptions)

    @classmethod
    def build(cls, *, endpoint_url: str | None = None, s3: ClientOptions | None = None) -> "StorageOptions":
        """From ``ShardDataset``'s arguments; ``endpoint_url`` is the shorthand for ``s3=ClientOptions(...)``."""
        if endpoint_url is not None and s3 is not None:
            raise ConfigError(f"endpoint_url={endpoint_url!r} and s3=... both given: set the endpoint in "
                              f"s3=ClientOptions(endpoint_url=...) only")
        return cls(s3=s3 if s3 is not None else ClientOptions(endpoint_url=endpoint_url))


_DEFAULT = StorageOptions()


def is_s3(location: str | os.PathLike) -> bool:
    return s3layer.is_s3_url(location)


def join(root: str, name: str) -> str:
    """``root/name`` for a directory path or an ``s3://`` prefix."""
    if is_s3(root):
        return root.rstrip("/") + "/" + name
    return str(Path(root) / name)


def _client(storage: StorageOptions | None):
    return s3layer.shared_client((storage or _DEFAULT).s3)


def open_source(location: str, *, storage: StorageOptions | None = None) -> ByteSource:
    """A ByteSource for a local path or an ``s3://`` URL."""
    if is_s3(location):
        return s3layer.S3Source(location, (storage or _DEFAULT).s3)
    try:
        return LocalSource(location)
    except FileNotFoundError:
        raise InputDataError(f"{location}: shard is missing") from None


def read_bytes(location: str, *, storage: StorageOptions | None = None) -> bytes:
    """A whole small file (index.json, a sidecar); FileNotFoundError when it does not exist."""
    if is_s3(location):
        return s3layer.read_object(_client(storage), s3layer.parse_s3_object(location))
    return Path(location).read_bytes()


def object_sizes(root: str, *, storage: StorageOptions | None = None) -> Mapping[str, int]:
    """Sizes of the files directly under ``root`` (one LIST per 1,000 objects on S3, a scandir locally);
    FileNotFoundError when ``root`` (the directory or the bucket) does not exist."""
    if is_s3(root):
        return s3layer.object_sizes(_client(storage), s3layer.parse_s3_url(root))
    with os.scandir(root) as it:
        return {e.name: e.stat().st_size for e in it if e.is_file()}


def sha256_of(location: str, *, storage: StorageOptions | None = None, block: int = 8 << 20) -> str:
    """sha256 of a whole shard, streamed (``verify=True``)."""
    if is_s3(location):
        return s3layer.sha256_object(_client(storage), s3layer.parse_s3_object(location), block=block)
    return sha256_file(Path(location), block=block)
