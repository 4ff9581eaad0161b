"""``upload``: copy a finished output directory (shards, sidecars, index) to an S3 prefix.

Integrity: every upload carries a checksum (``ChecksumAlgorithm``, CRC32 by default) that S3 checks per
request and per part, so a corrupted byte fails the upload instead of landing.

Skipping: an object already at the destination is skipped only when it provably holds the same bytes:
same size and the content check of ``integrity.verify_download`` (MD5 ETag, full-object checksum or the
multipart ETag recomputed with the object's part size) passes against the local file.  A size match alone
(an SSE-KMS bucket without checksums) is not enough; such files are uploaded again.

Ordering: ``index.json`` files go last, after every other upload succeeded, so a reader that finds an
index never finds it pointing at missing shards.  If anything else failed the index is not uploaded.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardprep.errors import ConfigError, InputDataError
from shardprep.staging.manifest import RemoteObject, list_prefix, matches_filters
from shardprep.storage.s3 import (DEFAULT_PART_SIZE, ClientOptions, check_transfer_settings,
                                        describe_client_error, make_client, parse_s3_url, transfer_error)
from shardprep.staging.summary import TransferSummary, progress_bar
from shardprep.staging.integrity import VerificationFailed, verify_download

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

    @property
    def todo_bytes(self) -> int:
        return sum(i.size for i in self.todo)


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
    return UploadPlan(loc.bucket,
                      todo=[i for i, s in zip(items, same) if not s],
                      skipped=[i for i, s in zip(items, same) if s])


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
    tm = create_transfer_manager(client, config)
    try:
        for batch in (first, last):
            if batch is last and summary.failed:
                for item in last:
                    summary.add_failed(item.key, f"not uploaded because {len(summary.failed)} other file(s) failed")
                break
            futures = [(item, tm.upload(str(item.path), plan.bucket, item.key, extra_args=extra,
                                        subscribers=[_Progress()])) for item in batch]
            for item, fut in futures:
                try:
                    fut.result()
                    summary.add_done(item.size)
                except Exception as e:  # each file fails on its own; the rest still lands
                    reason = describe_client_error(e, what="upload")
                    log.warning("failed %s: %s", item.key, reason)
                    summary.add_failed(item.key, reason)
    finally:
        tm.shutdown()
        bar.close()
    return summary.finish()
