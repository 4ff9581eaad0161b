"""Writing an object into its temporary file: one GET, or concurrent ranged GETs, hashed while they stream.

Why not s3transfer for the large objects: it re-chunks every 256 KiB through queues and an I/O thread and
knows nothing of the digests verification needs, so the finished file had to be read a second time to
recompute its multipart ETag (MD5 runs at ~640 MiB/s per core here: 0.6 s of CPU per 384 MiB, plus the
reads).  Here, when the ETag says the object was uploaded in N parts, every range spans whole parts (part
size inferred from N and the size, or read from ``HEAD ?partNumber=1``), so each part's MD5 is taken while
its bytes pass through and the multipart ETag is known when the last range lands; for a single-part ETag
the whole file's MD5 is taken behind the download (:class:`_PrefixMD5`).
Ranges are written with ``pwrite`` at their offsets (no shared file position, no lock) and the write-back
of each finished range is started at once (``storage.atomic.start_writeback``), so the final ``fsync`` before the
rename has little left to wait for.

Every range GET goes through ``client.get_object`` (its ~2 ms of per-call CPU is nothing next to MiBs of
data) with ``If-Match``, so botocore's standard retries apply to each request; errors while a body streams
(reset connections, short reads) restart that range, up to ``attempts`` times, as s3transfer does.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from shardprep.staging.integrity import (
    HeadFn,
    PartMD5s,
    VerificationFailed,
    infer_part_size,
    multipart_parts,
    part_size_fits,
)
from shardprep.storage.atomic import start_writeback

STREAM_CHUNK = 1 << 20
WHOLE_MD5_WINDOW = 3     # ranges in flight per object when its whole-file MD5 is taken (see fetch_ranges)

OpenBody = Callable[[str | None], Any]     # Range header value (None: the whole object) -> StreamingBody
Progress = Callable[[int], Any]            # bytes written (negative: taken back before a retry)


def split_ranges(size: int, part_size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of each ``part_size`` range covering ``size`` bytes (the last one shorter)."""
    return [(start, min(part_size, size - start)) for start in range(0, size, part_size)]


def upload_part_size(size: int, etag: str, head: HeadFn) -> int | None:
    """The part size a multipart-ETag object was uploaded with; None for other ETags or when it is unclear.

    Inferred from the part count when exactly one common part size fits, else the length of part 1 from a
    ``HEAD ?partNumber=1`` (one request, against minutes of transfer).
    """
    parts = multipart_parts(etag)
    if parts is None or size == 0:
        return None
    part_size = infer_part_size(size, parts)
    if part_size is None:
        part_size = int(head(PartNumber=1).get("ContentLength") or 0)
    return part_size if part_size > 0 and part_size_fits(size, parts, part_size) else None


def stream_into(fd: int, offset: int, length: int, open_body: OpenBody, range_header: str | None, *,
                attempts: int, progress: Progress, md5_every: int | None = None,
                on_chunk: Callable[[int, bytes], Any] | None = None) -> tuple[bytes, ...]:
    """Write one body (``length`` bytes) at ``offset`` of ``fd``.

    Returns the MD5s of its consecutive ``md5_every``-byte pieces (the upload parts a range spans; one
    piece for a whole object), or ``()`` without ``md5_every``.  ``on_chunk(offset, chunk)`` is called
    after each chunk is written.  The body is re-requested from the start after a mid-stream error, up to
    ``attempts`` times; a body longer than asked for (a server ignoring ``Range``) is an error, never
    silently written.
    """
    from botocore.exceptions import IncompleteReadError
    from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

    last: Exception | None = None
    for _ in range(attempts):
        done = 0
        try:
            body = open_body(range_header)
            hasher = PartMD5s(md5_every) if md5_every else None
            for chunk in body.iter_chunks(STREAM_CHUNK):
                if done + len(chunk) > length:
                    raise VerificationFailed(f"the server sent more than the {length} bytes asked for"
                                             + (f" ({range_header})" if range_header else ""))
                _pwrite_all(fd, chunk, offset + done)
                if hasher:
                    hasher.update(chunk)
                if on_chunk:
                    on_chunk(offset + done, chunk)
                done += len(chunk)
                progress(len(chunk))
            if done != length:
                raise IncompleteReadError(actual_bytes=done, expected_bytes=length)
            return hasher.digests() if hasher else ()
        except S3_RETRYABLE_DOWNLOAD_ERRORS as e:
            progress(-done)
            last = e
    assert last is not None
    raise last


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class _PrefixMD5:
    """MD5 of a file whose ranges are written concurrently, hashed up to the first unwritten byte as they go.

    Why: an object with a single-part ETag (one PUT, a CopyObject, or S3 implementations that give every
    object a plain MD5) needs the MD5 of the whole file, which is sequential.  Every range reports each
    chunk it writes; whichever thread finds the hasher free hashes from the current offset up to what the
    range there has written: straight from the chunk it just wrote when that chunk is the next one, else
    read back from the page cache.  So the MD5 runs during the transfer, not as a second pass after it.
    One thread hashes at a time; what lands meanwhile is picked up before it lets go.

    A range re-requested after a mid-stream error rewrites the same bytes (``If-Match`` pins the version),
    so what was hashed stays valid; and the result is checked against the ETag anyway.
    """

    _BLOCK = 4 << 20

    def __init__(self, fd: int, ranges: list[tuple[int, int]]):
        self._fd = fd
        self._ranges = ranges
        self._written = [0] * len(ranges)      # bytes written from each range's start (high-water mark)
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._hashed = 0                        # everything before this offset is in _md5
        self._at = 0                            # index of the range containing _hashed
        self._lock = threading.Lock()           # guards _written
        self._hashing = threading.Lock()        # held by the one thread currently hashing

    def wrote(self, index: int, offset: int, chunk: bytes | memoryview) -> None:
        """Range ``index`` has written ``chunk`` at ``offset`` (sequentially from the range's start)."""
        start = self._ranges[index][0]
        with self._lock:
            self._written[index] = max(self._written[index], offset + len(chunk) - start)
        while self._hashing.acquire(blocking=False):
            try:
                self._advance(offset, chunk)
            finally:
                self._hashing.release()
            if self._hashable_end() <= self._hashed:   # nothing new landed while we were letting go
                return

    def _hashable_end(self) -> int:
        if self._at >= len(self._ranges):
            return self._hashed
        with self._lock:
            return self._ranges[self._at][0] + self._written[self._at]

    def _advance(self, offset: int, chunk: bytes | memoryview) -> None:
        while (end := self._hashable_end()) > self._hashed:
            if offset <= self._hashed and offset + len(chunk) >= end:   # the chunk in hand covers it
                self._md5.update(memoryview(chunk)[self._hashed - offset:end - offset])
            else:
                for pos in range(self._hashed, end, self._BLOCK):
                    self._md5.update(os.pread(self._fd, min(self._BLOCK, end - pos), pos))
            self._hashed = end
            start, length = self._ranges[self._at]
            if end == start + length:
                self._at += 1

    def hexdigest(self, size: int) -> str:
        if self._hashed != size:
            raise AssertionError(f"hashed {self._hashed} of {size} bytes")   # a bug, not bad data
        return self._md5.hexdigest()


@dataclass(frozen=True)
class Digests:
    """What :func:`fetch_ranges` hashed: the MD5 of every range, or of the whole file, or neither."""

    parts: tuple[bytes, ...] = ()
    whole: str | None = None


def range_size_for_parts(upload_part: int, preferred: int) -> int:
    """The multiple of the upload's part size nearest ``preferred`` (at least one part).

    Ranges spanning whole parts keep every part's MD5 computable while streaming, and are not smaller
    than asked for: each GET has a fixed cost (some servers, moto among them, even read the whole object
    for every ranged GET), so 5 MiB parts are fetched three at a time with the default 16 MiB.
    """
    return upload_part * max(1, round(preferred / upload_part))


def fetch_ranges(fd: int, size: int, range_size: int, open_body: OpenBody, pool: ThreadPoolExecutor, *,
                 attempts: int, progress: Progress, part_md5s_of: int | None = None,
                 whole_md5: bool = False, stop: threading.Event | None = None) -> Digests:
    """All ``range_size`` ranges of one object, concurrently on ``pool``, hashed as asked.

    ``part_md5s_of=P``: the MD5 of every ``P``-byte upload part (``range_size`` must be a multiple of
    ``P``), for a multipart ETag; ``whole_md5``: the MD5 of the file, for a single-part ETag.  On the first
    failure the ranges not yet started are cancelled and the running ones awaited (they write into ``fd``,
    which the caller closes next), then the error propagates.  Once ``stop`` is set, ranges not yet
    started fail with ``CancelledError`` instead of starting (how a stage stops on Ctrl-C: cancelling the
    pool's queued futures instead would leave ``wait`` here waiting for ever, as cancelled futures do
    not wake it).
    """
    if part_md5s_of and range_size % part_md5s_of:
        raise ValueError(f"range size {range_size} is not a multiple of the part size {part_md5s_of}")
    ranges = split_ranges(size, range_size)
    prefix = _PrefixMD5(fd, ranges) if whole_md5 else None

    def one(index: int, start: int, length: int) -> tuple[bytes, ...]:
        byte_range = f"bytes={start}-{start + length - 1}"
        if stop is not None and stop.is_set():
            raise CancelledError(f"stopped before {byte_range}")
        digests = stream_into(fd, start, length, open_body, byte_range, attempts=attempts, progress=progress,
                              md5_every=part_md5s_of,
                              on_chunk=partial(prefix.wrote, index) if prefix is not None else None)
        start_writeback(fd, start, length)
        return digests

    # With a whole-file MD5 only the range at the hashing frontier can be hashed as it streams; keeping
    # a few ranges in flight per object (instead of all) lets the frontier move during the transfer
    # rather than leaving most of the hashing for the end.
    results = _in_window(pool, one, ranges, WHOLE_MD5_WINDOW if prefix is not None else len(ranges))
    if prefix is not None:
        return Digests(whole=prefix.hexdigest(size))
    return Digests(parts=tuple(d for digests in results for d in digests))


def _in_window(pool: ThreadPoolExecutor, one: Callable[[int, int, int], tuple[bytes, ...]],
               ranges: list[tuple[int, int]], window: int) -> list[tuple[bytes, ...]]:
    """``one(index, start, length)`` of every range on ``pool``, at most ``window`` in flight, results in
    range order.  On the first failure the ranges not yet started are cancelled and the running ones
    awaited, then the error propagates."""
    todo = iter(enumerate(ranges))
    futures: list[Future[tuple[bytes, ...]]] = []
    running: set[Future[tuple[bytes, ...]]] = set()

    def submit_next() -> None:
        nxt = next(todo, None)
        if nxt is not None:
            index, (start, length) = nxt
            futures.append(pool.submit(one, index, start, length))
            running.add(futures[-1])

    try:
        for _ in range(window):
            submit_next()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                running.discard(f)
                f.result()            # the first failure stops the object
                submit_next()
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise
