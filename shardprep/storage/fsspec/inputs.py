"""fsspec inputs (issue 22): files at ``gs://``, ``az://``/``abfs://`` and ``http(s)://`` URLs listed with their
identity, and read only while they are the version the plan froze.

Built on ``client.py`` (file systems, error mapping, exact ranged reads); ``store.py``'s ``FsspecStore``
offers it as ``walk`` and ``open_version``.  The identity is the store's version of the content: a GCS
object's generation, an Azure blob's ETag (and version id where versioning is on), an HTTP resource's
ETag, or its Last-Modified when it has none (``storage.objects``).  A file is checked against it with one
HEAD when it is opened and one after it was read; every request is retried while it fails transiently
(fsspec's HTTP file system does not retry at all).
"""

from __future__ import annotations

import datetime as dt
import email.utils
from functools import partial
from typing import Any, Iterator, Mapping

from shardprep.storage.fsspec.client import FsspecSource, is_http, remote_errors, resolve
from shardprep.storage.objects import ATTEMPTS, READS, ObjectChanged, ObjectInfo, compare, identity_text, retrying


def _mtime_ns(value: Any) -> int:
    """A modification time as fsspec's file systems report it (datetime, ISO text, HTTP date) in ns; 0 if none."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            try:
                value = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return 0
    if isinstance(value, dt.datetime):
        return int(value.timestamp()) * 1_000_000_000
    return 0


def file_info(url: str, entry: Mapping[str, Any]) -> ObjectInfo:
    """An fsspec info record as an ``ObjectInfo``."""
    modified = entry.get("updated") or entry.get("last_modified") or entry.get("Last-Modified") or entry.get("mtime")
    if entry.get("generation"):                                 # GCS: the generation names the content
        identity = identity_text(generation=entry["generation"])
    elif entry.get("etag") or entry.get("ETag"):                # Azure, HTTP
        identity = identity_text(etag=entry.get("etag") or entry.get("ETag"), version=entry.get("version_id"))
    else:                                                       # an HTTP server without ETags
        identity = identity_text(modified=entry.get("Last-Modified"))
    return ObjectInfo(url, int(entry["size"]), _mtime_ns(modified), identity)


def walk_files(root: str, options: Mapping[str, Any]) -> Iterator[ObjectInfo]:
    """The file at ``root`` and every file under ``root/`` (one recursive listing); over HTTP, which has no
    listings, only the file at ``root`` (one HEAD)."""
    fs, path = resolve(root, options)
    scheme = root.split("://", 1)[0]
    if is_http(fs):
        with remote_errors(f"{root}: HEAD"):
            yield file_info(root, retrying(lambda: fs.info(path), f"{root}: HEAD"))
        return
    with remote_errors(f"listing {root}"):
        found = retrying(lambda: fs.find(path.rstrip("/"), detail=True, withdirs=False), f"listing {root}")
        if isinstance(found, list):     # adlfs answers with names, not details, when ``path`` is one file
            found = {name: retrying(partial(fs.info, name), f"{root}: HEAD") for name in found}
    for name in sorted(found):
        entry = found[name]
        if entry.get("type", "file") == "file":
            yield file_info(f"{scheme}://{name}", entry)


class FsspecVersion:
    """One file's planned version as a ``ByteSource`` (a ``VersionSource``, see ``storage.objects``): checked
    with a HEAD when opened and again by :meth:`check`, read in exact ranges with retries."""

    def __init__(self, url: str, options: Mapping[str, Any], size: int, identity: str | None):
        self.path, self.size, self.identity = url, size, identity
        self._source = FsspecSource(url, options, attempts=ATTEMPTS)
        self.check()

    def read(self, offset: int, size: int) -> bytes:
        data = self._source.read(offset, size)
        READS.add(nbytes=len(data))
        return data

    def check(self) -> None:
        fs, path = self._source.resolved()
        if not is_http(fs):
            fs.invalidate_cache(path)           # a listing cached in this process is not the object now
        with remote_errors(f"{self.path}: HEAD"):
            now = file_info(self.path, retrying(lambda: fs.info(path), f"{self.path}: HEAD"))
        change = compare(self.size, self.identity, now)
        if change:
            raise ObjectChanged(self.path, change)

    def close(self) -> None:
        self._source.close()
