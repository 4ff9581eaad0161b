"""The S3 store: ``s3://`` through the one S3 layer (``client.py``), as ``storage.locations.SCHEMES`` picks it.

Shards and index files are read with the client's exact ranged reads; input objects are listed and read in
their planned version by ``inputs.py``.  This module is the top of the package's line of imports
(``client`` <- ``inputs`` <- ``store``): nothing below imports it back.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from shardprep.storage.objects import ObjectInfo, VersionSource
from shardprep.storage.s3.client import (
    ClientOptions,
    S3Source,
    object_sizes,
    parse_s3_object,
    parse_s3_url,
    read_object,
    sha256_object,
    shared_client,
    split_url,
)
from shardprep.storage.s3.inputs import S3Version, walk_objects


class S3Store:
    """``s3://`` through this process's shared client for ``options`` (a ``Store``, see ``storage.store``)."""

    def __init__(self, options: ClientOptions):
        self.options = options

    def open(self, location: str) -> S3Source:
        return S3Source(location, self.options)

    def read_bytes(self, location: str) -> bytes:
        return read_object(shared_client(self.options), parse_s3_object(location))

    def sizes(self, root: str) -> Mapping[str, int]:
        return object_sizes(shared_client(self.options), parse_s3_url(root))

    def sha256(self, location: str, *, block: int = 8 << 20) -> str:
        return sha256_object(shared_client(self.options), parse_s3_object(location), block=block)

    def connect(self, location: str) -> None:
        shared_client(self.options)

    def walk(self, root: str) -> Iterator[ObjectInfo]:
        """Every object whose URL starts with ``root``, in key order, with its identity (one listing)."""
        bucket, prefix = split_url(root, "input URL")
        return walk_objects(shared_client(self.options), bucket, prefix)

    def open_version(self, location: str, size: int, identity: str | None) -> VersionSource:
        return S3Version(location, self.options, size, identity)
