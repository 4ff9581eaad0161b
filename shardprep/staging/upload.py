"""``upload``: copy a finished output directory (shards, sidecars, index) to an S3 prefix.

Integrity: every upload carries a checksum (``ChecksumAlgorithm``, CRC32 by default) that S3 checks per
request and per part, so a corrupted byte fails the upload instead of landing.

Skipping: an object already at the destination is skipped only when it provably holds the same bytes:
same size and the content check of ``integrity.verify_download`` (MD5 ETag, full-object checksum or the
multipart ETag recomputed with the object's part size) passes against the local file.  A size match alone
(an SSE-KMS bucket without checksums) is not enough; such files are uploaded again.

Ordering: ``index.json`` files go last, after every other upload succeeded, so a reader that finds an
index never finds it pointing at missing shards.  If anything else failed the index is not uploaded.

Another dataset at the prefix (``staging.published``): refused, or with ``replace`` its index.json is
deleted before anything is uploaded and its leftover files after the new index.json is up.

Only what verifies is published: a directory holding a shardprep dataset (its index.json, or its job.json)
is checked first as ``shardprep verify`` checks it (``job.verify``: index.json against itself and the
plan, every listed shard re-hashed and walked against its sidecar), and one that does not verify is
refused before anything is sent (exit 5, naming the first bad shards).  Those files then go up only while
their identity is the one they had when they were verified.

What was sent is what was meant: before a shard outside such a dataset goes up its bytes are hashed and
compared with the sha256 its sidecar recorded (a shard modified or corrupted since its task wrote it is not uploaded), and
every file's identity (inode, size, mtime, ctime) is taken before its upload and compared after it.  A file
that changed meanwhile may have gone up as a mix of old and new bytes: that object is deleted again and
the file counts as failed, so index.json is not uploaded either (exit 7, naming the file).
"""

from __future__ import annotations

import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import orjson

from shardprep.errors import ConfigError, IncompleteError, InputDataError, RecordError, TransferError
from shardprep.shard.format import INDEX_FILE, JOB_FILE, SHARD_RE
from shardprep.staging.integrity import VerificationFailed, verify_download
from shardprep.staging.manifest import RemoteObject, list_prefix, matches_filters
from shardprep.staging.published import Published, inspect_prefix, refuse_or_announce
from shardprep.staging.summary import TransferSummary, progress_bar
from shardprep.storage.atomic import sha256_file
from shardprep.storage.s3.client import (
    DEFAULT_PART_SIZE,
    ClientOptions,
    check_transfer_settings,
    describe_client_error,
    make_client,
    parse_s3_url,
    transfer_error,
)

log = logging.getLogger(__name__)

LAST_NAMES = frozenset({"index.json"})
CHECKSUM_ALGORITHMS = ("CRC32", "SHA1", "SHA256")   # computable without awscrt


@dataclass(frozen=True)
class UploadOptions:
    source: Path
    dest: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    concurrency: int = 16
    multipart_threshold: int = DEFAULT_PART_SIZE
    multipart_chunksize: int = DEFAULT_PART_SIZE
    checksum_algorithm: str = "CRC32"
    progress: bool | None = None
    client: ClientOptions = field(default_factory=ClientOptions)
    replace: bool = False         # another dataset at the prefix: replace it (staging.published) instead of refusing

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", Path(self.source))
        if self.checksum_algorithm not in CHECKSUM_ALGORITHMS:
            raise ConfigError(f"--checksum-algorithm {self.checksum_algorithm!r}: choose one of "
                              f"{', '.join(CHECKSUM_ALGORITHMS)}")
        check_transfer_settings(self.concurrency, self.multipart_chunksize)


@dataclass(frozen=True)
class UploadItem:
    path: Path
    key: str
    size: int


@dataclass
class UploadPlan:
    bucket: str
    todo: list[UploadItem]
    skipped: list[UploadItem]
    published: Published = field(default_factory=Published)   # what --replace deletes (first, last)
    verified: dict[Path, FileIdentity] = field(default_factory=dict)   # the dataset's files as verify read them

    @property
    def todo_bytes(self) -> int:
        return sum(i.size for i in self.todo)


@dataclass(frozen=True)
class FileIdentity:
    """What changes whenever a file's bytes change (ctime cannot be set back by the writer, unlike mtime)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> "FileIdentity":
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def change(self, now: "FileIdentity") -> str:
        """A short description of how ``now`` differs (for the failure message)."""
        if (now.dev, now.ino) != (self.dev, self.ino):
            return "replaced by another file"
        if now.size != self.size:
            return f"size {self.size} -> {now.size} bytes"
        return "modified"


def sidecar_sha256(path: Path) -> str | None:
    """The sha256 the sidecar of shard ``path`` records, or None when ``path`` is not a shard with one."""
    if not SHARD_RE.match(path.name):
        return None
    from shardprep.shard.sidecar import Sidecar

    where = path.with_suffix(".json")
    try:
        return Sidecar.parse(where.read_bytes(), where).sha256
    except (OSError, RecordError):
        return None


def check_before_upload(item: "UploadItem", verified: Mapping[Path, FileIdentity] | None = None) -> FileIdentity | str:
    """The identity to compare after the upload, or the reason (a string) not to upload the file at all.

    A file of a verified dataset (``verified``: its identity when verify read it) must still be that file;
    any other shard is hashed here against its sidecar."""
    try:
        before = FileIdentity.of(item.path)
        if verified and item.path in verified:
            was = verified[item.path]
            return before if before == was else (f"{item.path} changed after it was verified ({was.change(before)}); "
                                                 f"not uploaded")
        expected = sidecar_sha256(item.path)
        if expected is not None and sha256_file(item.path) != expected:
            return (f"sha256 of {item.path} differs from its sidecar {item.path.with_suffix('.json').name} "
                    f"(modified or corrupt since its task wrote it); not uploaded")
    except OSError as e:
        return f"cannot read {item.path}: {e.strerror}"
    return before


def is_dataset(source: Path) -> bool:
    """Does ``source`` hold a shardprep dataset (checked before its index.json is uploaded)?  Its index.json
    unless that is a JSON object another tool wrote (a torn one counts as ours), or a shardprep job.json
    beside it: ``upload`` also copies other directories (raw inputs) as they are."""
    from shardprep.inputs.discover import is_plan_bytes

    try:
        index = (source / INDEX_FILE).read_bytes()
    except OSError:         # none (or not a file): nothing is published as a dataset
        return False
    try:
        record = orjson.loads(index)
        ours = isinstance(record, dict) and str(record.get("created_by", "")).startswith("shardprep")
    except orjson.JSONDecodeError:      # torn: never published as it is
        ours = True
    with contextlib.suppress(OSError):
        ours = ours or is_plan_bytes((source / JOB_FILE).read_bytes())
    return ours


def verify_dataset(source: Path, files: list[tuple[Path, str]]) -> dict[Path, FileIdentity]:
    """Check the dataset in ``source`` as ``shardprep verify`` does, before anything is sent: the identity of
    every file it read, taken before it read them; refused in one line (exit 5) when it does not verify."""
    from shardprep.job.verify import open_output, verify_output

    before = {}
    for p, _ in files:
        with contextlib.suppress(OSError):      # gone since it was listed: its own upload says so
            before[p] = FileIdentity.of(p)
    out = open_output(source)           # torn, or not the finalized dataset: IncompleteError (exit 5)
    read = [INDEX_FILE, JOB_FILE] + [n for s in out.index.shards for n in (s.name, s.sidecar)]
    identities = {source / n: before[source / n] for n in read if source / n in before}
    bad = verify_output(out)
    if bad:
        first = "; ".join(f"{c.name}: {', '.join(c.problems)}" for c in bad[:3])
        raise IncompleteError(f"{source} does not verify ({len(bad)} bad shard(s): {first}"
                              f"{'; ...' if len(bad) > 3 else ''}): nothing was uploaded",
                              hint=f"`shardprep repair {source}` rebuilds them from the frozen plan; then upload "
                                   f"again")
    return identities


def local_files(root: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> list[tuple[Path, str]]:
    """Regular files under ``root`` (relative POSIX paths, sorted), skipping hidden files and directories.

    Hidden names are temporaries (``.shard-00000.tar.host.pid.tmp``) and tool state; they never belong
    in a published dataset.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if matches_filters(rel, include, exclude):
                found.append((path, rel))
    return found


def is_identical(path: Path, remote: RemoteObject, *, head: Any) -> bool:
    """Does ``remote`` provably hold the bytes of ``path``?  (Size-only evidence does not count.)"""
    if path.stat().st_size != remote.size:
        return False
    try:
        result = verify_download(path, size=remote.size, etag=remote.etag, head=head)
    except VerificationFailed:
        return False
    return result.method != "size-only"


def plan_upload(options: UploadOptions, client: Any) -> UploadPlan:
    """List the destination once and decide per local file: upload, or skip as identical."""
    from botocore.exceptions import BotoCoreError, ClientError

    if not options.source.is_dir():
        raise InputDataError(f"SRC_DIR {options.source} is not a directory")
    loc = parse_s3_url(options.dest, what="DEST")
    files = local_files(options.source, options.include, options.exclude)
    if not files:
        raise InputDataError(f"no files to upload under {options.source} (hidden files are never uploaded)")
    if not any(Path(rel).name in LAST_NAMES for _, rel in files):
        log.warning("%s has no index.json: readers will not see a finished dataset (run finalize first?)",
                    options.source)
    publishes = any(rel == INDEX_FILE for _, rel in files) and is_dataset(options.source)
    verified = verify_dataset(options.source, files) if publishes else {}
    try:
        remote = {o.key: o for o in list_prefix(client, loc.bucket, loc.prefix)}
    except (BotoCoreError, ClientError) as e:
        raise transfer_error(e, what=f"listing {loc.url}") from e

    items = [UploadItem(p, loc.prefix + rel, p.stat().st_size) for p, rel in files]

    def decide(item: UploadItem) -> bool:
        obj = remote.get(item.key)
        if obj is None or obj.size != item.size:
            return False

        def head(**extra: Any) -> dict[str, Any]:
            return client.head_object(Bucket=loc.bucket, Key=item.key, **extra)

        return is_identical(item.path, obj, head=head)

    with ThreadPoolExecutor(options.concurrency) as pool:
        same = list(pool.map(decide, items))
    identical = {rel: s for (_, rel), s in zip(files, same)}
    published = inspect_prefix(client, loc.bucket, loc.prefix, remote, {rel: p for p, rel in files},
                               identical.__getitem__, options.include, options.exclude)
    refuse_or_announce(published, loc.url, replace=options.replace)
    return UploadPlan(loc.bucket,
                      todo=[i for i, s in zip(items, same) if not s],
                      skipped=[i for i, s in zip(items, same) if s],
                      published=published if options.replace else Published(), verified=verified)


def upload_directory(options: UploadOptions, *, client: Any = None) -> TransferSummary:
    """Upload ``options.source`` to ``options.dest``; return the summary (call ``raise_if_failed``)."""
    client = client or make_client(options.client)
    plan = plan_upload(options, client)
    return run_upload(options, client, plan)


def run_upload(options: UploadOptions, client: Any, plan: UploadPlan) -> TransferSummary:
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    from s3transfer.subscribers import BaseSubscriber

    summary = TransferSummary("uploaded", planned_files=len(plan.todo) + len(plan.skipped),
                              planned_bytes=plan.todo_bytes)
    for item in plan.skipped:
        summary.add_skipped(item.size)
    bar = progress_bar(plan.todo_bytes, desc="upload", enabled=options.progress)

    class _Progress(BaseSubscriber):
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            bar.update(bytes_transferred)

    config = TransferConfig(multipart_threshold=options.multipart_threshold,
                            multipart_chunksize=options.multipart_chunksize,
                            max_concurrency=options.concurrency, preferred_transfer_client="classic")
    extra = {"ChecksumAlgorithm": options.checksum_algorithm}
    first = [i for i in plan.todo if Path(i.key).name not in LAST_NAMES]
    last = [i for i in plan.todo if Path(i.key).name in LAST_NAMES]
    if plan.published.index_key:        # --replace: the old index goes before any of its shards is overwritten
        reason = _delete_or_reason(client, plan.bucket, plan.published.index_key)
        if reason:
            raise TransferError(f"s3://{plan.bucket}/{plan.published.index_key}: {reason}: nothing was uploaded")
    tm = create_transfer_manager(client, config)
    try:
        with ThreadPoolExecutor(options.concurrency) as checks:
            for batch in (first, last):
                if batch is last and summary.failed:
                    for item in last:
                        summary.add_failed(item.key, f"not uploaded because {len(summary.failed)} other file(s) "
                                                     f"failed")
                    break
                _upload_batch(batch, checks, summary, lambda item: tm.upload(
                    str(item.path), plan.bucket, item.key, extra_args=extra, subscribers=[_Progress()]),
                    lambda item: _delete_quietly(client, plan.bucket, item.key), plan.verified)
    finally:
        tm.shutdown()
        bar.close()
    if not summary.failed:              # --replace: the old dataset's leftovers, once the new index is up
        for key in plan.published.leftovers:
            reason = _delete_or_reason(client, plan.bucket, key)
            if reason:
                summary.add_failed(key, f"leftover of the replaced dataset: {reason}")
    return summary.finish()


def _upload_batch(batch: list[UploadItem], checks: ThreadPoolExecutor, summary: TransferSummary,
                  upload: Any, delete: Any, verified: Mapping[Path, FileIdentity]) -> None:
    """Check each file (unchanged since verified, or its sidecar's sha256), upload it, then confirm it did not
    change while it went up.

    Checks run in parallel and each upload starts as soon as its check passed; a file that changed during
    its upload is deleted from the destination again (``delete``) and counted as failed.
    """
    pending = {checks.submit(check_before_upload, item, verified): item for item in batch}
    started = []
    for fut in as_completed(pending):
        item = pending[fut]
        before = fut.result()
        if isinstance(before, str):
            log.warning("failed %s: %s", item.key, before)
            summary.add_failed(item.key, before)
        else:
            started.append((item, before, upload(item)))
    for item, before, transfer in started:
        try:
            transfer.result()
        except Exception as e:  # each file fails on its own; the rest still lands
            reason = describe_client_error(e, what="upload")
            log.warning("failed %s: %s", item.key, reason)
            summary.add_failed(item.key, reason)
            continue
        try:
            after = FileIdentity.of(item.path)
        except OSError as e:
            after = None
            change = f"unreadable after the upload ({e.strerror})"
        if after == before:
            summary.add_done(item.size)
            continue
        if after is not None:
            change = before.change(after)
        reason = (f"{item.path} changed while it was uploaded ({change}): the object may mix old and new "
                  f"bytes, {delete(item)}")
        log.warning("failed %s: %s", item.key, reason)
        summary.add_failed(item.key, reason)


def _delete_or_reason(client: Any, bucket: str, key: str) -> str | None:
    """Delete one object; None when done, else why not (for a failure message)."""
    try:
        client.delete_object(Bucket=bucket, Key=key)
    except Exception as e:  # reported by the caller
        return describe_client_error(e, what="delete")
    return None


def _delete_quietly(client: Any, bucket: str, key: str) -> str:
    """Delete an object that must not stay published; say what happened (for the failure message)."""
    reason = _delete_or_reason(client, bucket, key)
    if reason:  # reported, not raised: the upload already failed
        return f"and deleting it failed ({reason}): delete it by hand"
    return "so it was deleted again; re-run the upload once the file is final"
