"""Where a dataset's bytes come from: the one table that picks a store for a path or URL.

A location is a local/Lustre path, an ``s3://`` URL or any other URL fsspec knows (``gs://``, ``az://``,
``https://``, ``hf://`` ...).  :data:`SCHEMES` maps its scheme to a :class:`~shardprep.storage.store.Store`,
as webdataset's ``gopen_schemes`` does: a path goes to the file system (``storage/local.py``), ``s3://`` to
the one S3 layer (``storage/s3/``: the client per process and options, botocore's standard retries,
shared with staging) and every other URL to fsspec (``storage/fsspec/``).  A new kind of location is one
``Store`` (a module, or a package like those two) and one entry here; nothing above ``storage/`` changes.

There is no process-wide default: every caller passes the ``StorageOptions`` it was given (the loader's,
a command's, the plan's ``storage`` record, which discovered inputs carry: ``InputFile.storage``), and
no options means the environment's (``StorageOptions()``).

``shard.index``, the loader and the ``verify``/``inspect``/``report`` commands read through
:func:`store_for` (or the one-line helpers below).  A shard is never downloaded whole for reading samples:
each sample is one ranged read at the byte offsets of the sidecar's chunk table (``shard.reader.read_chunk``
over a ``ByteSource``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, cast

from shardprep.errors import ConfigError, InputDataError
from shardprep.storage.fsspec.store import FsspecStore
from shardprep.storage.local import LocalStore
from shardprep.storage.s3.client import ClientOptions
from shardprep.storage.s3.store import S3Store
from shardprep.storage.store import ByteSource, RemoteStore, Store


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


_ENVIRONMENT = StorageOptions()     # no options given: the environment's (never reassigned)
_LOCAL = LocalStore()
# scheme:// or fsspec's chained form (simplecache::gs://...): its first scheme
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)(://|::)")
ANY_URL = "*"

# scheme -> the store serving it ("": a path; ANY_URL: every URL without an entry of its own)
SCHEMES: dict[str, Callable[[StorageOptions], Store]] = {
    "": lambda storage: _LOCAL,
    "s3": lambda storage: S3Store(storage.s3),
    ANY_URL: lambda storage: FsspecStore(storage.fsspec),
}


def scheme(location: str | os.PathLike) -> str:
    """The URL scheme of ``location`` (``s3``, ``gs``, ``simplecache`` ...), or ``""`` for a path."""
    m = _SCHEME_RE.match(str(location))
    return m.group(1) if m else ""


def store_for(location: str | os.PathLike, storage: StorageOptions | None = None) -> Store:
    """The store that serves ``location``, configured with ``storage`` (None: the environment's)."""
    key = scheme(location)
    return SCHEMES.get(key, SCHEMES[ANY_URL])(storage or _ENVIRONMENT)


def remote_store_for(url: str, storage: StorageOptions | None = None) -> RemoteStore:
    """The store of an input object's URL (every store but the local one lists and pins objects)."""
    if not is_url(url):
        raise ValueError(f"{url!r} is a path, not a URL")
    return cast(RemoteStore, store_for(url, storage))


def is_s3(location: str | os.PathLike) -> bool:
    return scheme(location) == "s3"


def is_url(location: str | os.PathLike) -> bool:
    """Any URL (read through a remote store), as opposed to a local or Lustre path."""
    return scheme(location) != ""


def join(root: str | os.PathLike, name: str) -> str:
    """``root/name`` for a directory path or a URL prefix."""
    if is_url(root):
        return str(root).rstrip("/") + "/" + name
    return str(Path(root) / name)


def split(location: str | os.PathLike) -> tuple[str, str]:
    """``(parent, name)`` of a file's path or URL: ``join``'s inverse."""
    if is_url(location):
        parent, _, name = str(location).rstrip("/").rpartition("/")
        return parent, name
    path = Path(location)
    return str(path.parent), path.name


def open_source(location: str, *, storage: StorageOptions | None = None) -> ByteSource:
    """A shard opened for ranged reads; a missing one is an ``InputDataError`` naming it."""
    try:
        return store_for(location, storage).open(location)
    except FileNotFoundError:
        raise InputDataError(f"{location}: shard is missing") from None


def read_bytes(location: str, *, storage: StorageOptions | None = None) -> bytes:
    """A whole small file (index.json, a sidecar); FileNotFoundError when it does not exist."""
    return store_for(location, storage).read_bytes(location)


def object_sizes(root: str, *, storage: StorageOptions | None = None) -> Mapping[str, int]:
    """Sizes of the files directly under ``root`` (one LIST per 1,000 objects on S3, one listing on other
    stores, a HEAD per name looked up over HTTP, a scandir locally); FileNotFoundError when ``root`` (the
    directory or the bucket) does not exist."""
    return store_for(root, storage).sizes(root)


def sha256_of(location: str, *, storage: StorageOptions | None = None, block: int = 8 << 20) -> str:
    """sha256 of a whole shard, streamed (the loader's ``verify=True``)."""
    return store_for(location, storage).sha256(location, block=block)
