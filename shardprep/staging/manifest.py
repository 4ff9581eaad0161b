"""The listing of a prefix, the filters applied to it, and the record of verified copies.

A stage lists the prefix exactly once (paginated) and works from that snapshot; the snapshot is written to
``DEST/.shardprep-stage/manifest.json`` so a user (or a later tokenize job) can see exactly what was meant
to be staged.  Every object that has been downloaded *and verified* is appended to
``DEST/.shardprep-stage/verified.jsonl``; a re-run skips an object only when that record's size and
ETag still equal the fresh listing and the local file is the one that was verified (size and mtime as
recorded).  The modification time alone never decides anything.  The journal is append-only so a killed
run loses at most the line being written (a torn last line is ignored on reading).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import IO, Any, Iterable, Sequence

import orjson

from shardprep.storage.atomic import atomic_writer, write_json_atomic
from shardprep.storage.nofollow import open_file, real_dir
from shardprep.storage.s3.client import S3Location, list_objects

log = logging.getLogger(__name__)

STATE_DIR = ".shardprep-stage"
MANIFEST_NAME = "manifest.json"
JOURNAL_NAME = "verified.jsonl"


@dataclass(frozen=True)
class RemoteObject:
    """One listed object; ``etag`` is stored without the surrounding quotes."""

    key: str
    size: int
    etag: str
    last_modified: str = ""

    @classmethod
    def from_listing(cls, entry: dict[str, Any]) -> "RemoteObject":
        lm = entry.get("LastModified")
        return cls(
            key=entry["Key"],
            size=int(entry["Size"]),
            etag=str(entry.get("ETag", "")).strip('"'),
            last_modified=lm.isoformat() if isinstance(lm, date) else str(lm or ""),
        )


def list_prefix(client: Any, bucket: str, prefix: str) -> list[RemoteObject]:
    """Every object under ``prefix`` (all pages of ListObjectsV2), in key order."""
    objects = [RemoteObject.from_listing(e) for e in list_objects(client, S3Location(bucket, prefix))]
    log.debug("listed %d objects under s3://%s/%s", len(objects), bucket, prefix)
    return objects


def matches_filters(relative: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Selected when it matches any ``include`` (or none are given) and no ``exclude``.

    Patterns are shell globs matched against the key below the prefix; ``*`` also matches ``/`` so
    ``*.jsonl.zst`` selects files in every sub-directory.
    """
    if include and not any(fnmatch.fnmatchcase(relative, pat) for pat in include):
        return False
    return not any(fnmatch.fnmatchcase(relative, pat) for pat in exclude)


def write_manifest(dest: Path, *, source: str, include: Sequence[str], exclude: Sequence[str],
                   objects: Iterable[tuple[RemoteObject, str]], lustre: dict | None = None) -> Path:
    """Write the selected listing (object, relative local path) to the destination's state directory."""
    rows = [{"key": o.key, "path": rel, "size": o.size, "etag": o.etag, "last_modified": o.last_modified}
            for o, rel in objects]
    state = dest / STATE_DIR
    real_dir(state, parents=True)
    target = state / MANIFEST_NAME
    write_json_atomic(target, {
        "source": source,
        "listed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "include": list(include),
        "exclude": list(exclude),
        "lustre": lustre,
        "objects": len(rows),
        "bytes": sum(r["size"] for r in rows),
        "entries": rows,
    })
    return target


@dataclass(frozen=True)
class VerifiedCopy:
    """What was true when an object was downloaded and its content checked."""

    key: str
    path: str           # relative to the destination
    size: int
    etag: str
    method: str         # "md5", "multipart-etag", "crc32", "sha256", ... or "size-only"
    checksum: str       # the value that matched
    mtime_ns: int       # of the local file right after the rename
    verified_at: float

    def still_valid(self, obj: RemoteObject, local: Path) -> bool:
        """True when the object is unchanged in S3 and the local file is still the verified one."""
        if (obj.size, obj.etag) != (self.size, self.etag):
            return False
        try:
            st = local.stat()
        except FileNotFoundError:
            return False
        return st.st_size == self.size and st.st_mtime_ns == self.mtime_ns


class VerifiedJournal:
    """Append-only, thread-safe record of verified copies in ``DEST/.shardprep-stage/verified.jsonl``."""

    def __init__(self, dest: Path):
        self.path = dest / STATE_DIR / JOURNAL_NAME
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None

    def load(self) -> dict[str, VerifiedCopy]:
        """The latest record per key; unreadable lines (a torn write from a killed run) are skipped."""
        records: dict[str, VerifiedCopy] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return records
        for line in data.splitlines():
            try:
                rec = VerifiedCopy(**orjson.loads(line))
            except (orjson.JSONDecodeError, TypeError):
                continue
            records[rec.key] = rec
        return records

    def append(self, record: VerifiedCopy) -> None:
        """Append one record; flushed at once so a kill right after loses nothing that was verified."""
        line = orjson.dumps(asdict(record)) + b"\n"
        with self._lock:
            if self._file is None:
                real_dir(self.path.parent, parents=True)
                self._file = open_file(self.path, "ab")     # never appended through a planted link
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None

    def compact(self) -> None:
        """Rewrite the journal with only the latest line per key (superseded and torn lines go).

        Records for keys outside the current selection are kept: a later stage with other filters into
        the same destination still knows those copies are verified.
        """
        self.close()
        records = self.load()
        if not self.path.exists():
            return
        with atomic_writer(self.path) as f:
            for _, r in sorted(records.items()):
                f.write(orjson.dumps(asdict(r)) + b"\n")
