"""``stage``: copy an S3 prefix to a (Lustre) directory, verified, resumable, concurrent.

The flow is list once -> refuse unsafe keys -> skip what is already verified -> download the rest ->
verify -> rename.  Every object is written to a hidden temporary name beside its target
(``storage.atomic.temp_name_for``), checked against the listing (see ``integrity.py``), fsynced and only then renamed,
so an interrupted stage leaves no partial file under a final name; the next run removes the dead
temporaries and fetches only objects without a still-valid verified record.

Concurrency: a pool of ``concurrency`` workers handles objects; objects below ``multipart_threshold``
are fetched with one GET each (``fastget.DirectGetter``: the client's signer, HTTP session and retry rules
without ``get_object``'s per-call overhead), larger ones in concurrent ranged GETs on a second pool of as
many workers (``ranged.py``: the ranges are the upload's own parts when the ETag reveals them, else
``multipart_chunksize``).  Either way the bytes are hashed while they stream, so verification needs no
second read of the file.
Every GET carries ``If-Match: <listed ETag>``, so an object replaced mid-stage fails cleanly (HTTP 412)
instead of mixing two versions; the next run re-lists and fetches the new one.

:func:`stage_prefix` is a plain function so a Slurm job (``stage --submit``) can run the same code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from functools import partial
from pathlib import Path
from typing import Any, Callable

from shardprep.staging import s5cmd
from shardprep.staging.fastget import DirectGetter, SigningCapture, direct_getter
from shardprep.staging.integrity import (
    VerificationFailed,
    combine_part_md5s,
    is_single_part_etag,
    md5_hex,
    multipart_etag,
    verify_download,
)
from shardprep.staging.manifest import RemoteObject, VerifiedCopy, VerifiedJournal, write_manifest
from shardprep.staging.options import StageOptions
from shardprep.staging.plan import StageItem, StagePlan, plan_stage
from shardprep.staging.ranged import fetch_ranges, range_size_for_parts, stream_into, upload_part_size
from shardprep.staging.summary import TransferSummary, progress_bar
from shardprep.storage.atomic import fsync_dir, is_temp_name, no_space_error, start_writeback, temp_name_for
from shardprep.storage.lustre import prepare_output_dir
from shardprep.storage.nofollow import fresh_file_fd
from shardprep.storage.s3.client import describe_client_error, make_client

log = logging.getLogger(__name__)



class _Stager:
    """Runs one plan: owns the client, the transfer manager, the journal and the progress bar."""

    def __init__(self, options: StageOptions, client: Any, plan: StagePlan):
        self.options = options
        self.client = client
        self.plan = plan
        self.journal = VerifiedJournal(options.dest)
        self.summary = TransferSummary("staged", skipped_as="already verified",
                                       planned_files=len(plan.todo) + len(plan.skipped), planned_bytes=plan.todo_bytes)
        self.bar = progress_bar(plan.todo_bytes, desc="stage", enabled=options.progress)
        self._dirs: set[Path] = set()
        self._dirs_lock = threading.Lock()
        # Ranges of large objects run on their own workers: the object workers wait on them.
        self._parts = ThreadPoolExecutor(options.concurrency, thread_name_prefix="stage-part")
        self._stop = threading.Event()
        self._direct: DirectGetter | None = None
        self._s5cmd = s5cmd.choose_engine(options.engine)     # its binary, or None: our own GETs

    def remove_dead_temporaries(self) -> int:
        """Delete temporaries a killed run left for the objects about to be fetched.

        One ``scandir`` per directory that receives objects (not one glob per object, which is quadratic
        in a directory of many files).
        """
        wanted: dict[Path, set[str]] = {}
        for item in self.plan.todo:
            target = self.options.dest / item.relative
            wanted.setdefault(target.parent, set()).add(target.name)
        removed = 0
        for directory, names in wanted.items():
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            for entry in entries:
                # temp_name_for: ".<target name>.<host>.<pid>.tmp" (the host part has no dots); s5cmd's
                # own temporary of one appends digits to it
                name = entry.name.rstrip("0123456789")
                parts = name[:-len(".tmp")].rsplit(".", 2) if is_temp_name(name) else []
                if len(parts) == 3 and parts[0][1:] in names:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed += 1
        if removed:
            log.info("removed %d temporary file(s) left by an interrupted stage", removed)
        return removed

    def run(self) -> TransferSummary:
        for item in self.plan.skipped:
            self.summary.add_skipped(item.obj.size)
        self.remove_dead_temporaries()
        pool = ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="stage")
        full: Exception | None = None     # the first object that found the disk full (DiskFull, exit 8)
        try:
            futures = self._submit_all(pool)
            for fut in as_completed(futures):
                item = futures[fut]
                try:
                    fut.result()
                except Exception as e:  # one object failing must not stop the others (but a full disk does)
                    full = full or self._stop_if_disk_full(item, e, futures)
                    if full is None:
                        reason = _reason(e)
                        log.warning("failed %s: %s", item.obj.key, reason)
                        self.summary.add_failed(item.obj.key, reason)
        finally:
            # On Ctrl-C: drop queued objects and ranges instead of finishing the whole stage first (an
            # object whose ranges are stopped fails and its temporary file is removed).
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            self._parts.shutdown(wait=True)
            if self._s5cmd:   # after Ctrl-C: what s5cmd had in flight (its own temporaries too)
                self.remove_dead_temporaries()
            self.bar.close()
            for d in sorted(self._dirs):
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(d)
            self.journal.compact()
        if full is not None:
            raise full
        return self.summary.finish()

    def _stop_if_disk_full(self, item: StageItem, exc: Exception,
                           futures: dict[Future, StageItem]) -> Exception | None:
        """A one-line ``DiskFull`` (exit 8) when ``exc`` is a full disk or quota, after stopping the rest:
        every object after it would fail the same way, each with a raw ``OSError`` (it was exit 7)."""
        full = no_space_error(self.options.dest / item.relative, exc, cleanup=(
            f"its temporary file was removed; the {self.summary.files} object(s) staged so far are verified "
            f"and kept, and the same command fetches only the rest"))
        if full is not None:
            self._stop.set()
            for fut in futures:
                fut.cancel()
        return full

    def _submit_all(self, pool: ThreadPoolExecutor) -> dict[Future, StageItem]:
        """Submit every object ours to fetch, the smallest one below the multipart threshold first and
        alone, then hand s5cmd its share (:meth:`_for_s5cmd`) and land those as it reports them.

        That first one goes through ``get_object`` and its request shows the direct GET (``fastget``) how
        to address and sign this bucket; waiting for it costs one round trip, the others then start at once.
        """
        ours = [i for i in self.plan.todo if not self._for_s5cmd(i)]
        small = [i for i in ours if i.obj.size < self.options.multipart_threshold]
        first = min(small, key=lambda i: i.obj.size, default=None)
        futures: dict[Future, StageItem] = {}
        if first is not None:
            futures[pool.submit(self.fetch_first_small, first)] = first
            wait(futures)
        futures.update({pool.submit(self.fetch, item): item for item in ours if item is not first})
        if self._s5cmd is not None and len(ours) < len(self.plan.todo):
            futures.update(self._run_s5cmd(pool, self._s5cmd, [i for i in self.plan.todo if self._for_s5cmd(i)]))
        return futures

    def _for_s5cmd(self, item: StageItem) -> bool:
        """With ``--engine s5cmd``, s5cmd fetches the objects of at least ``--part-size`` (the ones we would
        fetch in ranges).  Small objects stay ours: s5cmd spends a HEAD and a fresh client on every
        single-object command, and measured that way it was 0.6-0.7x our direct GET (docs/benchmarks.md)."""
        return (self._s5cmd is not None and s5cmd.usable_key(item.obj.key)
                and item.obj.size >= self.options.multipart_threshold)

    def fetch_first_small(self, item: StageItem) -> None:
        """:meth:`fetch` through ``get_object``, watching its request to set up the direct GET for the rest."""
        with SigningCapture(self.client) as capture:
            try:
                self.fetch(item)
            finally:
                self._direct = direct_getter(self.client, capture, item.obj.key,
                                             max_attempts=self.options.client.max_attempts)

    def fetch(self, item: StageItem) -> None:
        """Download (our own GETs, hashing as the bytes stream), fsync, then :meth:`_land` one object."""
        obj = item.obj
        target = self.options.dest / item.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name_for(target)
        try:
            fd = fresh_file_fd(tmp, os.O_RDWR)   # RDWR: the whole-MD5 reads back; never through a planted link
            md5: str | None
            try:
                if obj.size < self.options.multipart_threshold:
                    md5, etag = stream_into(fd, 0, obj.size, self._open_body(obj), None,
                                            attempts=self.options.download_attempts, progress=self.bar.update,
                                            md5_every=max(obj.size, 1))[0].hex(), None
                else:
                    md5, etag = self._get_in_ranges(obj, fd, self._head(obj))
                os.fsync(fd)
            finally:
                os.close(fd)
            self._land(item, tmp, md5, etag)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise

    def _land(self, item: StageItem, tmp: Path, md5: str | None, etag: str | None) -> None:
        """Verify the fsynced ``tmp`` (using the digests taken so far), rename it, record it in the journal."""
        obj = item.obj
        target = self.options.dest / item.relative
        result = verify_download(tmp, size=obj.size, etag=obj.etag, head=self._head(obj), md5_of_stream=md5,
                                 multipart_etag_of_stream=etag)
        os.replace(tmp, target)
        with self._dirs_lock:
            self._dirs.add(target.parent)
        st = target.stat()
        self.journal.append(VerifiedCopy(key=obj.key, path=item.relative, size=obj.size, etag=obj.etag,
                                         method=result.method, checksum=result.value, mtime_ns=st.st_mtime_ns,
                                         verified_at=round(time.time(), 3)))
        self.summary.add_done(obj.size)

    def _head(self, obj: RemoteObject) -> Callable[..., dict[str, Any]]:
        return partial(self.client.head_object, Bucket=self.plan.bucket, Key=obj.key)

    def _run_s5cmd(self, pool: ThreadPoolExecutor, binary: str,
                   items: list[StageItem]) -> dict[Future, StageItem]:
        """Let one s5cmd process (``binary``) download ``items``; land each on ``pool`` as soon as s5cmd
        reports it.  Blocks until s5cmd is done."""
        futures: dict[Future, StageItem] = {}
        jobs: dict[s5cmd.Job, StageItem] = {}
        for item in items:
            target = self.options.dest / item.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            jobs[s5cmd.Job(f"s3://{self.plan.bucket}/{item.obj.key}", temp_name_for(target))] = item

        lock = threading.Lock()   # s5cmd's stdout (finished) and stderr (failed) are read on two threads

        def done(job: s5cmd.Job, failure: str | None) -> None:
            with lock:
                futures[pool.submit(self._land_fetched, jobs[job], job.temp, failure)] = jobs[job]

        s5cmd.S5cmdRun(binary, self.options.client, concurrency=self.options.concurrency,
                       part_size=self.options.multipart_chunksize,
                       state_dir=self.journal.path.parent).run(list(jobs), done)
        return futures

    def _land_fetched(self, item: StageItem, tmp: Path, failure: str | None) -> None:
        """An object s5cmd finished: hash the file again (s5cmd verifies nothing), fsync, :meth:`_land`."""
        obj = item.obj
        try:
            if failure is not None:
                raise s5cmd.S5cmdFailed(failure)
            self.bar.update(obj.size)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                start_writeback(fd, 0, obj.size)    # s5cmd wrote it all at once: write out while we hash
                md5 = etag = None
                if is_single_part_etag(obj.etag):
                    md5 = md5_hex(tmp)
                elif obj.size >= self.options.multipart_threshold:
                    part = upload_part_size(obj.size, obj.etag, self._head(obj))
                    etag = multipart_etag(tmp, part) if part else None
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                self._land(item, tmp, md5, etag)
            except VerificationFailed:   # no If-Match with s5cmd: say so when the object was replaced
                if self._head(obj)().get("ETag", "").strip('"') != obj.etag:
                    raise s5cmd.ObjectChanged(obj.key) from None
                raise
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise

    def _open_body(self, obj: RemoteObject) -> Callable[[str | None], Any]:
        """Opens the whole object's streaming body: the direct GET when possible, else ``get_object``."""
        def open_whole(_range: str | None) -> Any:
            body = self._direct.get(obj.key, obj.etag) if self._direct is not None else None
            if body is None:
                body = self.client.get_object(Bucket=self.plan.bucket, Key=obj.key, **_if_match(obj))["Body"]
            return body
        return open_whole

    def _get_in_ranges(self, obj: RemoteObject, fd: int,
                       head: Callable[..., dict[str, Any]]) -> tuple[str | None, str | None]:
        """Concurrent ranged GETs into ``fd``: (MD5, multipart ETag) of what arrived, as far as they help.

        When the ETag reveals the upload's parts, ranges span whole parts and each part's MD5 is taken (they
        give the multipart ETag); for a single-part ETag the whole file's MD5 is taken behind the download;
        otherwise nothing is hashed here and verification takes its own route (a full-object checksum, or
        a re-read).
        """
        part_size = upload_part_size(obj.size, obj.etag, head)
        chunk = self.options.multipart_chunksize

        def open_range(byte_range: str | None) -> Any:
            return self.client.get_object(Bucket=self.plan.bucket, Key=obj.key, Range=byte_range,
                                          **_if_match(obj))["Body"]

        fetch = partial(fetch_ranges, fd, obj.size, open_body=open_range, pool=self._parts,
                        attempts=self.options.download_attempts, progress=self.bar.update, stop=self._stop)
        if part_size:
            got = fetch(range_size=range_size_for_parts(part_size, chunk), part_md5s_of=part_size)
            return None, combine_part_md5s(got.parts)
        if is_single_part_etag(obj.etag):
            return fetch(range_size=chunk, whole_md5=True).whole, None
        fetch(range_size=chunk)
        return None, None


def _if_match(obj: RemoteObject) -> dict[str, str]:
    """``If-Match: <listed ETag>``: a GET of an object replaced since the listing fails with 412."""
    return {"IfMatch": f'"{obj.etag}"'} if obj.etag else {}


def _reason(exc: BaseException) -> str:
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, s5cmd.ObjectChanged) or (
            isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412")):
        return "object changed since it was listed (ETag no longer matches); re-run to fetch the new version"
    if isinstance(exc, (ClientError, BotoCoreError)):
        return describe_client_error(exc, what="download")
    if isinstance(exc, VerificationFailed):
        return f"verification failed: {exc}"
    if isinstance(exc, s5cmd.S5cmdFailed):
        return f"download: {exc}"
    return f"{type(exc).__name__}: {exc}"


def stage_prefix(options: StageOptions, *, client: Any = None) -> TransferSummary:
    """Stage ``options.source`` into ``options.dest``; return the summary (call ``raise_if_failed``).

    Raises before writing anything when the listing fails, nothing matches, or keys are unsafe.
    The destination gets the staged-input stripe layout when it is a new directory on Lustre.
    """
    client = client or make_client(options.client)
    plan = plan_stage(options, client)
    lustre = prepare_output_dir(options.dest, options.layout)
    items = sorted(plan.todo + plan.skipped, key=lambda i: i.obj.key)
    write_manifest(options.dest, source=plan.source, include=options.include, exclude=options.exclude,
                   objects=[(i.obj, i.relative) for i in items], lustre=lustre)
    log.info("%s: %d objects to fetch (%d bytes), %d already verified", plan.source, len(plan.todo),
             plan.todo_bytes, len(plan.skipped))
    return _Stager(options, client, plan).run()
