"""Ranged downloads of large objects (``shardprep.staging.ranged``): ranges, retries, digests, no re-read.

Unit tests with in-memory bodies; the same code against moto's server is in ``test_staging_s3.py``
(``test_large_objects_are_fetched_in_their_upload_parts``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import IncompleteReadError

from shardprep.staging.integrity import VerificationFailed, combine_part_md5s, multipart_etag, verify_download
from shardprep.staging.ranged import fetch_ranges, range_size_for_parts, split_ranges, stream_into, upload_part_size
from shardprep.storage.atomic import start_writeback

MIB = 1 << 20


class Body:
    """A StreamingBody stand-in: yields ``data`` in ``chunk``-byte pieces, optionally failing after ``fail_after``."""

    def __init__(self, data: bytes, chunk: int = 1000, fail_after: int | None = None, error: Exception | None = None):
        self.data, self.chunk, self.fail_after = data, chunk, fail_after
        self.error = error or ConnectionResetError("connection reset by peer")

    def iter_chunks(self, _size: int):
        for i in range(0, len(self.data), self.chunk):
            if self.fail_after is not None and i >= self.fail_after:
                raise self.error
            yield self.data[i:i + self.chunk]


def ranged_server(data: bytes, calls: list[str | None], failures: dict[str, int] | None = None):
    """open_body for ``data`` honouring ``bytes=a-b``; ``failures[range]`` bodies break half way first."""
    failures = dict(failures or {})
    lock = threading.Lock()

    def open_body(byte_range: str | None):
        with lock:
            calls.append(byte_range)
            broken = failures.get(byte_range, 0) > 0
            if broken:
                failures[byte_range] -= 1
        if byte_range is None:
            piece = data
        else:
            a, b = (int(x) for x in byte_range.removeprefix("bytes=").split("-"))
            piece = data[a:b + 1]
        return Body(piece, chunk=4096, fail_after=len(piece) // 2 if broken else None)
    return open_body


def test_split_ranges_cover_the_object_exactly():
    assert split_ranges(0, 5) == []
    assert split_ranges(10, 5) == [(0, 5), (5, 5)]
    assert split_ranges(11, 5) == [(0, 5), (5, 5), (10, 1)]
    assert split_ranges(3, 5) == [(0, 3)]


def test_upload_part_size_from_the_etag_or_part_one():
    heads: list[dict] = []

    def head(**extra):
        heads.append(extra)
        return {"ContentLength": 16 * MIB}

    assert upload_part_size(100 * MIB, "0" * 32 + "-13", head) == 8 * MIB and heads == []   # inferred
    assert upload_part_size(100 * MIB, "0" * 32, head) is None and heads == []              # single part
    assert upload_part_size(20 * MIB + 1, "0" * 32 + "-2", head) == 16 * MIB                # 15 or 16: ask
    assert heads == [{"PartNumber": 1}]
    # S3's answer does not fit the size and count (e.g. a proxy that drops the query): no guessing
    assert upload_part_size(20 * MIB + 1, "0" * 32 + "-2", lambda **e: {"ContentLength": 5 * MIB}) is None


def test_stream_into_restarts_a_broken_body_and_counts_progress_once(tmp_path):
    data = os.urandom(50_000)
    calls: list[str | None] = []
    progress: list[int] = []
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        digests = stream_into(fd, 7, len(data), ranged_server(data, calls, {None: 2}), None, attempts=3,
                              progress=progress.append, md5_every=len(data))
    finally:
        os.close(fd)
    assert digests == (hashlib.md5(data).digest(),)
    assert calls == [None, None, None]                      # two broken bodies, then a whole one
    assert sum(progress) == len(data) and min(progress) < 0  # taken back before each retry
    assert (tmp_path / "f").read_bytes() == b"\0" * 7 + data


def test_stream_into_gives_up_after_the_attempts(tmp_path):
    data = os.urandom(10_000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(ConnectionResetError):
            stream_into(fd, 0, len(data), ranged_server(data, [], {None: 5}), None, attempts=3, progress=int)
        short = [0]

        def truncated(_range):      # a body that ends early without an error: retried, then reported
            short[0] += 1
            return Body(data[:-1])
        with pytest.raises(IncompleteReadError):
            stream_into(fd, 0, len(data), truncated, None, attempts=2, progress=int)
        assert short[0] == 2
        with pytest.raises(VerificationFailed, match="more than the 9999 bytes asked for .bytes=0-9998."):
            stream_into(fd, 0, len(data) - 1, lambda r: Body(data), "bytes=0-9998", attempts=3, progress=int)
    finally:
        os.close(fd)


def test_fetch_ranges_writes_every_range_in_place_and_returns_the_part_md5s(tmp_path):
    data = os.urandom(5 * 4096 * 3 + 123)
    part = 4096 * 3
    calls: list[str | None] = []
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    with ThreadPoolExecutor(4) as pool:
        try:
            digests = fetch_ranges(fd, len(data), part, ranged_server(data, calls, {f"bytes={part}-{2 * part - 1}": 1}),
                                   pool, attempts=2, progress=int, part_md5s_of=part).parts
        finally:
            os.close(fd)
    assert path.read_bytes() == data
    assert digests == tuple(hashlib.md5(data[i:i + part]).digest() for i in range(0, len(data), part))
    assert combine_part_md5s(digests) == multipart_etag(path, part)
    assert sorted(calls, key=lambda r: int(r.split("=")[1].split("-")[0])) == \
        ["bytes=0-12287", "bytes=12288-24575", "bytes=12288-24575", "bytes=24576-36863", "bytes=36864-49151",
         "bytes=49152-61439", "bytes=61440-61562"]


def test_ranges_spanning_several_parts_still_give_every_part_md5(tmp_path):
    assert range_size_for_parts(5 * MIB, 16 * MIB) == 15 * MIB      # three 5 MiB parts per GET
    assert range_size_for_parts(8 * MIB, 16 * MIB) == 16 * MIB
    assert range_size_for_parts(64 * MIB, 16 * MIB) == 64 * MIB     # never less than one part
    data = os.urandom(10 * 1000 + 17)
    part = 1000
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    with ThreadPoolExecutor(3) as pool:
        try:
            got = fetch_ranges(fd, len(data), 3 * part, ranged_server(data, []), pool, attempts=1, progress=int,
                               part_md5s_of=part)
            with pytest.raises(ValueError, match="not a multiple"):
                fetch_ranges(fd, len(data), 2500, ranged_server(data, []), pool, attempts=1, progress=int,
                             part_md5s_of=part)
        finally:
            os.close(fd)
    assert got.parts == tuple(hashlib.md5(data[i:i + part]).digest() for i in range(0, len(data), part))
    assert combine_part_md5s(got.parts) == multipart_etag(path, part)
    empty = tmp_path / "empty"
    fd = os.open(empty, os.O_RDWR | os.O_CREAT)
    try:
        assert stream_into(fd, 0, 0, lambda r: Body(b""), None, attempts=1, progress=int,
                           md5_every=1) == (hashlib.md5(b"").digest(),)
    finally:
        os.close(fd)


def test_the_whole_md5_is_taken_behind_ranges_that_land_in_any_order(tmp_path, monkeypatch):
    import random

    from shardprep.staging.ranged import _PrefixMD5

    data = os.urandom(3 * MIB + 77)
    part = 256 << 10
    path = tmp_path / "f"
    path.write_bytes(data)
    ranges = split_ranges(len(data), part)
    # every range written as 4 chunks in sequence (as stream_into does), the ranges interleaved in
    # several orders: last range first, at random, all abreast
    per_range = [[(i, off, data[off:min(off + part // 4, start + length)])
                  for off in range(start, start + length, part // 4)] for i, (start, length) in enumerate(ranges)]
    rng = random.Random(3)

    def interleaved() -> list:
        queues, out = [list(q) for q in per_range], []
        while any(queues):
            out.append(rng.choice([q for q in queues if q]).pop(0))
        return out

    orders = [[c for q in reversed(per_range) for c in q], interleaved(), interleaved(),
              sorted((c for q in per_range for c in q), key=lambda c: (c[1] - ranges[c[0]][0], c[0]))]
    fd = os.open(path, os.O_RDONLY)
    try:
        for order in orders:
            prefix = _PrefixMD5(fd, ranges)
            for index, offset, chunk in order[:-1]:
                prefix.wrote(index, offset, chunk)
            with pytest.raises(AssertionError, match="hashed"):
                prefix.hexdigest(len(data))                  # the last chunk is missing: never skipped over
            prefix.wrote(*order[-1])
            assert prefix.hexdigest(len(data)) == hashlib.md5(data).hexdigest()
    finally:
        os.close(fd)

    # Chunks arriving in file order are hashed straight from memory: nothing is read back.
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a) or real_pread(*a))
    fd = os.open(path, os.O_RDONLY)
    try:
        prefix = _PrefixMD5(fd, ranges)
        for index, offset, chunk in (c for q in per_range for c in q):
            prefix.wrote(index, offset, chunk)
        assert prefix.hexdigest(len(data)) == hashlib.md5(data).hexdigest() and reads == []
    finally:
        os.close(fd)
    monkeypatch.undo()

    # The same through fetch_ranges with ranges finishing in a random order on 8 threads.
    rng = random.Random(5)
    serve = ranged_server(data, [])

    def slow_body(byte_range):
        time.sleep(rng.random() / 200)
        return serve(byte_range)

    out = tmp_path / "g"
    fd = os.open(out, os.O_RDWR | os.O_CREAT)
    with ThreadPoolExecutor(8) as pool:
        try:
            got = fetch_ranges(fd, len(data), part, slow_body, pool, attempts=1, progress=int, whole_md5=True)
        finally:
            os.close(fd)
    assert got.whole == hashlib.md5(data).hexdigest() and got.parts == ()
    assert out.read_bytes() == data


def test_a_failed_range_cancels_the_rest_and_nothing_writes_after_the_error(tmp_path):
    data = os.urandom(64 * 1000)
    part = 1000
    writing = threading.Event()
    active = [0]
    lock = threading.Lock()

    def open_body(byte_range):
        if byte_range == "bytes=0-999":
            raise PermissionError("AccessDenied")
        with lock:
            active[0] += 1
        writing.set()
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        a, b = (int(x) for x in byte_range.removeprefix("bytes=").split("-"))
        return Body(data[a:b + 1])

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    with ThreadPoolExecutor(4) as pool:
        try:
            with pytest.raises(PermissionError):
                fetch_ranges(fd, len(data), part, open_body, pool, attempts=3, progress=int)
            assert active[0] == 0           # every started range finished before the error reached us
        finally:
            os.close(fd)


def test_a_multipart_etag_hashed_while_streaming_needs_no_head_and_no_re_read(tmp_path):
    path = tmp_path / "f"
    data = os.urandom(11 * MIB)
    path.write_bytes(data)
    etag = multipart_etag(path, 5 * MIB)

    def no_head(**extra):
        raise AssertionError(f"unexpected HEAD {extra}")

    assert verify_download(path, size=len(data), etag=etag, head=no_head,
                           multipart_etag_of_stream=etag).method == "multipart-etag"
    # A digest that disagrees (e.g. parts that were not the upload's) falls back to the full procedure.
    heads: list[dict] = []
    r = verify_download(path, size=len(data), etag=etag, head=lambda **e: heads.append(e) or {},
                        multipart_etag_of_stream="0" * 32 + "-3")
    assert r.method == "multipart-etag" and heads == [{"ChecksumMode": "ENABLED"}]


def test_start_writeback_is_harmless_and_uses_sync_file_range_on_linux(tmp_path):
    import sys

    from shardprep.storage import atomic as fsutil

    data = os.urandom(3 * MIB)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, data, 0)
        start_writeback(fd, 0, len(data))
        start_writeback(fd, MIB, MIB)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    if sys.platform.startswith("linux"):
        assert callable(fsutil._sync_file_range)


def test_a_stop_request_fails_the_ranges_not_yet_started(tmp_path):
    from concurrent.futures import CancelledError

    data = os.urandom(8 * 1000)
    stop = threading.Event()
    calls: list[str | None] = []
    serve = ranged_server(data, calls)

    def open_body(byte_range):
        stop.set()                 # Ctrl-C arrives while the first ranges stream
        return serve(byte_range)

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    with ThreadPoolExecutor(2) as pool:
        try:
            with pytest.raises(CancelledError, match="stopped before"):
                fetch_ranges(fd, len(data), 1000, open_body, pool, attempts=1, progress=int, stop=stop)
        finally:
            os.close(fd)
    assert 1 <= len(calls) <= 2          # only the ranges already running were fetched
