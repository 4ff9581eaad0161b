"""Remote input objects: the identity a plan freezes, reads held to it, and the count of what reading cost.

Why: a task reads its objects hours or days after ``plan`` listed them, from a store anyone may write to.
The plan records each object's size and *identity* (S3: ETag, and VersionId in a versioned bucket; GCS:
generation; Azure: ETag and version id; HTTP: ETag or Last-Modified); a task reads through a
:class:`VersionSource` that fails with :class:`ObjectChanged` as soon as the object is not that version any
more, so a shard never mixes two versions of an input and never silently holds newer data than planned.

Transient failures (HTTP 5xx and 429, "SlowDown", connection resets, timeouts) are retried with backoff:
by botocore's standard mode for ``s3://`` (``storage.s3``), by :func:`retrying` for the fsspec stores
(their libraries' own retries run first where they have them).  Every request and every retry is counted in
this process's :data:`READS`, which the task reports in its log and its sidecar's ``stats.remote``.

A leaf below ``storage/s3/`` and ``storage/fsspec/``: it imports nothing of shardprep.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import urllib.parse
from dataclasses import dataclass, fields, replace
from typing import Callable, Protocol, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTEMPTS = 5                # per request, the first included (botocore's standard mode default, for S3 too)
BACKOFF_BASE = 0.2          # seconds; attempt n waits rand() * min(BACKOFF_CAP, BACKOFF_BASE * 2**n)
BACKOFF_CAP = 5.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# exception class names (anywhere in the MRO) of a connection that broke or timed out: aiohttp's, Python's
_TRANSIENT_NAMES = frozenset({"ConnectionError", "TimeoutError", "ClientConnectionError", "ClientPayloadError",
                              "ServerDisconnectedError", "ServerTimeoutError", "IncompleteRead"})


@dataclass(frozen=True)
class ObjectInfo:
    """One object as a listing or a HEAD saw it; ``identity`` None when the store gives none (size only)."""

    url: str
    size: int
    mtime_ns: int
    identity: str | None


def identity_text(**parts: str | int | None) -> str | None:
    """``etag="abc" version=v1``: the parts that are set, each value percent-quoted where it must be."""
    words = [f"{k}={urllib.parse.quote(str(v), safe=chr(34) + '/:.-_~+')}" for k, v in parts.items()
             if v not in (None, "", "null")]
    return " ".join(words) or None


def identity_parts(identity: str | None) -> dict[str, str]:
    """:func:`identity_text`'s inverse."""
    out = {}
    for word in (identity or "").split():
        key, _, value = word.partition("=")
        out[key] = urllib.parse.unquote(value)
    return out


class ObjectChanged(Exception):
    """The object at ``url`` is not the version the plan froze (``change`` says how)."""

    def __init__(self, url: str, change: str):
        super().__init__(f"{url}: {change}")
        self.url, self.change = url, change


def compare(planned_size: int, planned: str | None, now: ObjectInfo) -> str | None:
    """How ``now`` differs from the planned size and identity, or None."""
    if now.size != planned_size:
        return f"size {planned_size} -> {now.size} bytes"
    if planned is not None and now.identity != planned:
        return f"{planned} -> {now.identity or 'no identity'}"
    return None


class VersionSource(Protocol):
    """A ``ByteSource`` (exact ranged reads) of one object's planned version."""

    def read(self, offset: int, size: int) -> bytes: ...

    def check(self) -> None:
        """After reading: raise ObjectChanged when the object is no longer the planned version."""
        ...

    def close(self) -> None: ...


# -- what reading cost, per process -------------------------------------------------------------------------
@dataclass
class ReadCounts:
    """Requests sent for remote inputs, the retries among them, and the body bytes received."""

    requests: int = 0
    retries: int = 0
    bytes: int = 0

    def since(self, before: "ReadCounts") -> "ReadCounts":
        return ReadCounts(*(getattr(self, f.name) - getattr(before, f.name) for f in fields(self)))


class _Reads:
    """This process's :class:`ReadCounts` (reader threads add to it; a task reads a snapshot)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = ReadCounts()

    def add(self, *, requests: int = 0, retries: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self._counts.requests += requests
            self._counts.retries += retries
            self._counts.bytes += nbytes

    def merge(self, counts: ReadCounts) -> None:
        """Add what another process (a worker of the task) counted."""
        self.add(requests=counts.requests, retries=counts.retries, nbytes=counts.bytes)

    def snapshot(self) -> ReadCounts:
        with self._lock:
            return replace(self._counts)


READS = _Reads()


# -- retries for stores whose library does not retry (fsspec's HTTP) or stops retrying too soon -------------
def http_status(exc: BaseException) -> int | None:
    """The HTTP status a library put on its exception (aiohttp, azure-core, gcsfs), or None."""
    for attr in ("status", "status_code", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def transient(exc: BaseException) -> bool:
    """A failure worth another attempt: a 5xx/429/408 answer, or a connection that broke or timed out.
    (fsspec's HTTP file system reports a HEAD that failed in any way as ``FileNotFoundError``: its cause
    decides.)"""
    if isinstance(exc, FileNotFoundError) and exc.__cause__ is not None:
        return transient(exc.__cause__)
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return False
    status = http_status(exc)
    if status is not None and status >= 400:
        return status in TRANSIENT_STATUS
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (exponential with full jitter, as botocore's standard)."""
    return random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** attempt))


def retrying(call: Callable[[], T], what: str, *, attempts: int = ATTEMPTS) -> T:
    """``call()``, again after a backoff while it fails transiently (each request and retry counted in
    :data:`READS`); the last failure, or the first permanent one, is raised as it is."""
    for attempt in range(1, attempts + 1):
        READS.add(requests=1)
        try:
            return call()
        except Exception as e:   # noqa: BLE001 - classified here, re-raised unless transient
            if attempt == attempts or not transient(e):
                raise
            delay = backoff(attempt)
            READS.add(retries=1)
            log.warning("%s: %s (attempt %d of %d); retrying in %.2f s", what, _describe(e), attempt, attempts, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _describe(exc: BaseException) -> str:
    status = http_status(exc)
    head = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}{f' (HTTP {status})' if status else ''}: {head}"

