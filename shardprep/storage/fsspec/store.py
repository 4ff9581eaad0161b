"""The fsspec store: any URL fsspec knows (``gs://``, ``az://``, ``https://``, ``hf://`` ...), as
``storage.locations.SCHEMES`` picks it for every URL without a store of its own.

Shards and index files are read with ``client.py``'s exact ranged reads; input files are listed and read
in their planned version by ``inputs.py``.  The top of the package's line of imports (``client`` <-
``inputs`` <- ``store``): nothing below imports it back.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from shardprep.storage.fsspec.client import FsspecSource, object_sizes, read_object, resolve, sha256_object
from shardprep.storage.fsspec.inputs import FsspecVersion, walk_files
from shardprep.storage.objects import ObjectInfo, VersionSource


class FsspecStore:
    """Any URL fsspec knows, its file systems built with ``options`` (a ``Store``, see ``storage.store``)."""

    def __init__(self, options: Mapping[str, Any]):
        self.options = options

    def open(self, location: str) -> FsspecSource:
        return FsspecSource(location, self.options)

    def read_bytes(self, location: str) -> bytes:
        return read_object(location, self.options)

    def sizes(self, root: str) -> Mapping[str, int]:
        return object_sizes(root, self.options)

    def sha256(self, location: str, *, block: int = 8 << 20) -> str:
        return sha256_object(location, self.options, block=block)

    def connect(self, location: str) -> None:
        resolve(location, self.options)

    def walk(self, root: str) -> Iterator[ObjectInfo]:
        """The file at ``root`` and every file under ``root/``, with their identity (one listing)."""
        return walk_files(root, self.options)

    def open_version(self, location: str, size: int, identity: str | None) -> VersionSource:
        return FsspecVersion(location, self.options, size, identity)
