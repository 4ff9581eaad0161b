"""The rules under remote inputs (issue 22), without a server: a glob on object keys means what the same glob
means on a directory tree; a remote range is read into exactly the blocks a local file gives; an object
that changes while it is read fails its item; plan records of remote inputs round-trip, and records of files
stay what they were; identities and transient errors are told apart as documented.

The remote store here is a ``RemoteStore`` of bytes in memory registered for ``mem://`` in the one scheme
table, so the readers run unchanged through ``OpenInput``."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep.errors import InputDataError
from shardprep.inputs.blocks import LongLine, TextBlock, item_blocks
from shardprep.inputs.discover import InputFile, discover_inputs
from shardprep.inputs.readers import WorkItem
from shardprep.inputs.remote import glob_regex
from shardprep.job.schema import TaskItem, decode_task, encode_task
from shardprep.storage import locations
from shardprep.storage.objects import ObjectChanged, ObjectInfo, compare, identity_parts, identity_text, transient
from shardprep.storage.store import exact


@dataclass
class MemStore:
    """Objects in memory: ``objects[url] = (bytes, identity)``; ``replace_after`` swaps one object's bytes
    after that many reads of it (an upload racing a task)."""

    objects: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    replace_after: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    reads: int = 0

    def info(self, url: str) -> ObjectInfo:
        if url not in self.objects:
            raise FileNotFoundError(f"{url}: no such object")
        data, identity = self.objects[url]
        return ObjectInfo(url, len(data), 0, identity)

    def walk(self, root: str) -> Iterator[ObjectInfo]:
        for url in sorted(self.objects):
            if url == root or url.startswith(root.rstrip("/") + "/"):
                yield self.info(url)

    def open_version(self, location: str, size: int, identity: str | None) -> "MemVersion":
        return MemVersion(self, location, size, identity)

    def connect(self, location: str) -> None:
        pass

    def open(self, location: str):
        raise NotImplementedError

    def read_bytes(self, location: str) -> bytes:
        return self.objects[location][0]

    def sizes(self, root: str) -> Mapping[str, int]:
        return {i.url.rsplit("/", 1)[1]: i.size for i in self.walk(root)}

    def sha256(self, location: str, *, block: int = 8 << 20) -> str:
        raise NotImplementedError


@dataclass
class MemVersion:
    store: MemStore
    url: str
    size: int
    identity: str | None

    def read(self, offset: int, size: int) -> bytes:
        self.store.reads += 1
        if self.url in self.store.replace_after:
            left, data = self.store.replace_after[self.url]
            if left == 0:
                self.store.objects[self.url] = (data, "etag=\"new\"")
            self.store.replace_after[self.url] = (left - 1, data)
        self.check()
        return exact(self.store.objects[self.url][0][offset:offset + size], self.url, offset, size)

    def check(self) -> None:
        change = compare(self.size, self.identity, self.store.info(self.url))
        if change:
            raise ObjectChanged(self.url, change)

    def close(self) -> None:
        pass


@pytest.fixture
def mem(monkeypatch) -> MemStore:
    store = MemStore()
    monkeypatch.setitem(locations.SCHEMES, "mem", lambda storage: store)
    return store


# -- globs ------------------------------------------------------------------------------------------------
SEGMENT = st.sampled_from(["a", "b", "ab", "ba", "a.txt", "b.jsonl", "x"])
PATTERN_PART = st.sampled_from(["*", "**", "?", "a", "b", "*.txt", "a*", "[ab]", "[!a]*", "**/*.jsonl"])


def tree_files(paths: list[list[str]]) -> list[str]:
    """Relative file paths of ``paths`` with no file also being another's directory."""
    files: list[str] = []
    for parts in sorted(paths, key=len):
        path = "/".join(parts)
        if not any(path.startswith(f + "/") or f.startswith(path + "/") or f == path for f in files):
            files.append(path)
    return files


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.lists(SEGMENT, min_size=1, max_size=3), min_size=1, max_size=12),
       pattern=st.lists(PATTERN_PART, min_size=1, max_size=3))
def test_a_glob_on_keys_matches_what_it_matches_in_a_directory(tmp_path_factory, paths, pattern):
    root = tmp_path_factory.mktemp("tree")
    files = tree_files(paths)
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("x")
    spec = "/".join(pattern)
    local = {os.path.relpath(p, root) for p in glob.glob(f"{root}/{spec}", recursive=True) if os.path.isfile(p)}
    rx = glob_regex(f"s3://bucket/raw/{spec}")
    remote = {f for f in files if rx.fullmatch(f"s3://bucket/raw/{f}")}
    assert remote == local, (spec, files)


def test_discovery_lists_a_prefix_once_and_skips_hidden_names_and_outputs(mem):
    plan = b'{"created_by": "shardprep 0.1.0", "fingerprint": "f"}'
    for key, data in (("raw/a.jsonl", b'{"text": "a"}\n'), ("raw/sub/b.txt", b"b\n"), ("raw/.cache/c.txt", b"c\n"),
                      ("raw/notes.md", b"#\n"), ("raw/out/job.json", plan), ("raw/out/plan/tasks.jsonl", b"[]\n"),
                      ("raw2/d.txt", b"d\n")):
        mem.objects[f"mem://b/{key}"] = (data, f'etag="{key}"')
    found = discover_inputs(["mem://b/raw"])
    assert [(i.path, i.format, i.identity) for i in found] == [
        ("mem://b/raw/a.jsonl", "jsonl", 'etag="raw/a.jsonl"'), ("mem://b/raw/sub/b.txt", "txt", 'etag="raw/sub/b.txt"')]
    assert [i.path for i in discover_inputs(["mem://b/raw/**/*.txt", "mem://b/raw2/d.txt"])] == [
        "mem://b/raw/sub/b.txt", "mem://b/raw2/d.txt"]
    with pytest.raises(InputDataError, match="unknown file type"):
        discover_inputs(["mem://b/raw/notes.md"])
    with pytest.raises(InputDataError, match=r"input mem://b/nothing does not exist"):
        discover_inputs(["mem://b/nothing"])


# -- reading ----------------------------------------------------------------------------------------------
def pieces(inp: InputFile, start: int, end: int | None, limit: int, block: int) -> list[tuple]:
    return [(p.start, p.data, p.terminated) if isinstance(p, TextBlock) else (p.start, p.length, p.nul_bytes)
            for p in item_blocks(inp, start, end, limit, block_bytes=block)]


LINES = st.lists(st.sampled_from(["", "a", "hello world", "x" * 40, "é€😀", "\0\0", "long " * 30]), max_size=60)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=LINES, last_newline=st.booleans(), cut=st.floats(0, 1), length=st.floats(0, 1),
       limit=st.integers(8, 200), block=st.integers(1, 300))
def test_a_remote_range_is_read_into_the_blocks_a_local_file_gives(mem, tmp_path_factory, lines, last_newline, cut,
                                                                  length, limit, block):
    """The same whole-line blocks and over-long lines, for any range (cut where the planner cuts), any
    block size and line limit: remote reads differ in where the bytes come from, nothing else."""
    from shardprep.job.cutting import aligned_boundary

    data = ("\n".join(lines) + ("\n" if last_newline and lines else "")).encode()
    path = tmp_path_factory.mktemp("local") / "f.txt"
    path.write_bytes(data)
    local = InputFile(str(path), len(data), path.stat().st_mtime_ns, "txt", None)
    url = "mem://b/f.txt"
    mem.objects[url] = (data, 'etag="1"')
    remote = InputFile(url, len(data), 0, "txt", None, None, 'etag="1"')
    start = aligned_boundary(local, round(cut * len(data)), False)
    assert aligned_boundary(remote, round(cut * len(data)), False) == start
    end = min(len(data), aligned_boundary(local, start + round(length * (len(data) - start)), False))
    assert pieces(remote, start, end, limit, block) == pieces(local, start, end, limit, block)
    assert pieces(remote, 0, None, limit, block) == pieces(local, 0, None, limit, block)


def test_an_object_replaced_while_it_is_read_fails_its_item_naming_it(mem):
    url = "mem://b/big.txt"
    data = b"".join(b"line %d\n" % k for k in range(2000))
    mem.objects[url] = (data, 'etag="1"')
    mem.replace_after[url] = (2, data.replace(b"line", b"LINE"))
    inp = InputFile(url, len(data), 0, "txt", None, None, 'etag="1"')
    with pytest.raises(InputDataError, match=r'input mem://b/big.txt changed after it was planned '
                                             r'\(etag="1" -> etag="new"\); nothing read from it is kept'):
        list(item_blocks(inp, 0, None, 1 << 20, block_bytes=4096))
    mem.objects[url] = (data + b"more\n", 'etag="2"')
    with pytest.raises(InputDataError, match=rf"input {url} changed after it was planned \(size {len(data)} -> "):
        list(item_blocks(inp, 0, None, 1 << 20, block_bytes=4096))
    del mem.objects[url]
    with pytest.raises(InputDataError, match=rf"input {url} is missing: {url}: no such object"):
        list(item_blocks(inp, 0, None, 1 << 20, block_bytes=4096))


def test_a_long_line_across_remote_blocks_is_consumed_not_held(mem):
    url = "mem://b/long.txt"
    data = b"short\n" + b"y" * 5000 + b"\nafter\n"
    mem.objects[url] = (data, None)
    inp = InputFile(url, len(data), 0, "txt", None, None, None)
    got = list(item_blocks(inp, 0, None, 100, block_bytes=64))
    assert [type(p) for p in got] == [TextBlock, LongLine, TextBlock]
    assert got[1] == LongLine(6, 5000, 0) and got[2].data == b"after\n"


# -- plan records ------------------------------------------------------------------------------------------
def test_plan_records_carry_urls_and_identities_and_leave_files_as_they_were():
    local = InputFile("/data/raw/a.jsonl", 10, 5, "jsonl", None)
    remote = InputFile("s3://b/raw/a.jsonl", 10, 5, "jsonl", None, None, 'etag="x" version=v1')
    gz = InputFile("gs://b/c.txt.gz", 7, 0, "txt", "gz", None, "generation=17")
    items = [TaskItem(local, WorkItem(0)), TaskItem(remote, WorkItem(1, 0, 6, "bytes", 1)),
             TaskItem(gz, WorkItem(2))]
    line = encode_task(items, "/data/raw")
    assert line == (b'[[0,"a.jsonl",10,5,"jsonl"],[1,"s3://b/raw/a.jsonl",10,5,"jsonl",null,null,0,6,1,'
                    b'"etag=\\"x\\" version=v1"],[2,"gs://b/c.txt.gz",7,0,"txt","gz",null,0,null,1,"generation=17"]]\n')
    assert decode_task(line, 0, "/data/raw", "tasks.jsonl").items == tuple(items)
    assert "identity" not in local.to_dict() and remote.to_dict()["identity"] == 'etag="x" version=v1'


def test_identities_and_transient_errors():
    text = identity_text(etag='"d41d8cd9-2"', version="3/Lz.x y", generation=None)
    assert text == 'etag="d41d8cd9-2" version=3/Lz.x%20y' and identity_parts(text) == {
        "etag": '"d41d8cd9-2"', "version": "3/Lz.x y"}
    assert identity_text(etag=None, version="null") is None

    class Answer(Exception):
        def __init__(self, status: int):
            super().__init__(f"HTTP {status}")
            self.status = status

    def not_found_from(cause: BaseException) -> FileNotFoundError:
        try:
            raise FileNotFoundError("url") from cause
        except FileNotFoundError as e:
            return e

    assert transient(Answer(503)) and transient(Answer(429)) and transient(ConnectionResetError())
    assert transient(TimeoutError()) and transient(not_found_from(Answer(503)))
    assert not transient(Answer(403)) and not transient(Answer(404)) and not transient(PermissionError())
    assert not transient(not_found_from(Answer(404))) and not transient(FileNotFoundError("gone"))
    assert not transient(ValueError("bad"))


def test_a_path_list_may_mix_files_and_urls(mem, tmp_path):
    (tmp_path / "here.txt").write_text("local\n")
    mem.objects["mem://b/there.txt"] = (b"remote\n", 'etag="9"')
    listing = tmp_path / "inputs.txt"
    listing.write_text("here.txt\nmem://b/there.txt\n")
    assert [i.path for i in discover_inputs([f"@{listing}"])] == [str(tmp_path / "here.txt"), "mem://b/there.txt"]


def test_cut_points_of_a_remote_object_read_only_around_them(mem):
    from shardprep.job.cutting import aligned_boundary

    url = "mem://b/cut.txt"
    data = b"".join(b"%06d\n" % k for k in range(200_000))        # 1.4 MB
    mem.objects[url] = (data, None)
    inp = InputFile(url, len(data), 0, "txt", None, None, None)
    before = mem.reads
    assert aligned_boundary(inp, 700_001, False) == 700_007
    assert mem.reads - before == 1


def test_arrow_objects_are_refused_by_name(mem):
    mem.objects["mem://b/d.arrow"] = (b"ARROW1", None)
    with pytest.raises(InputDataError, match=r"input mem://b/d.arrow: Arrow files are read memory-mapped"):
        discover_inputs(["mem://b/d.arrow"])

