"""A plan's per-task records: ``plan/tasks.jsonl``, read by offset through ``plan/tasks.idx``.

Why (issue 16): a task must not pay for the size of its job.  job.json keeps the header every task
needs (tokenizer, options, fingerprint) and the digest of the offset table; a task then reads a few
verified pieces of the table and its own record, a few tens of KB whatever the number of tasks, and
hashes only those.  ``status``, ``finalize`` and the loader never read the records at all.

``plan/tasks.jsonl`` holds one line per task (``schema.job.encode_task``).  ``plan/tasks.idx``,
little-endian:

| part | size | content |
|---|---|---|
| header | 32 B | magic ``shardprep-tasks\\0``, number of tasks (u64), block size B (u32), 0 (u32) |
| entries | 24 B per task | offset of the task's line in tasks.jsonl (u64), first 16 bytes of its sha256 |
| end | 8 B | size of tasks.jsonl (where the last line ends) |
| blocks | 32 B per B entries | sha256 of each block's entry bytes |

job.json's ``plan.table_sha256`` is the sha256 of header + end + blocks: reading task t checks that
(n/B x 32 bytes), then t's block of entries against its block digest (B x 24 bytes), then t's line
against its entry.  Any change to a record, an entry or the table is refused, naming the file.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Iterator

from shardprep.errors import RecordError
from shardprep.job.schema import Job, Task, TaskItem, decode_task, encode_task
from shardprep.shard.format import JOB_FILE, PLAN_RECORDS_FILE, PLAN_TABLE_FILE
from shardprep.storage.nofollow import open_file, real_dir

RECORDS_FILE = Path(PLAN_RECORDS_FILE).name
TABLE_FILE = Path(PLAN_TABLE_FILE).name
MAGIC = b"shardprep-tasks\x00"
BLOCK = 1024
_HEADER = struct.Struct("<16sQII")
_ENTRY = 24
_DIGEST = 16


def _record_digest(line: bytes) -> bytes:
    return hashlib.sha256(line).digest()[:_DIGEST]


class TaskTableWriter:
    """Stream task records into ``directory`` (a staging directory: the caller renames it into place); a
    link planted at its name or at a file's is refused, never written through (``storage/nofollow.py``)."""

    def __init__(self, directory: Path, root: str) -> None:
        real_dir(directory, parents=True)
        self.directory = directory
        self.root = root
        self._records = open_file(directory / RECORDS_FILE, "wb", buffering=1 << 20, parent_too=True)
        self._entries = bytearray()
        self._offset = 0
        self.n_tasks = 0

    def add(self, items: list[TaskItem]) -> None:
        line = encode_task(items, self.root)
        self._entries += struct.pack("<Q", self._offset) + _record_digest(line)
        self._records.write(line)
        self._offset += len(line)
        self.n_tasks += 1

    def close(self) -> str:
        """Write the table, fsync both files; return the table digest job.json records."""
        self._records.flush()
        os.fsync(self._records.fileno())
        self._records.close()
        header = _HEADER.pack(MAGIC, self.n_tasks, BLOCK, 0)
        end = struct.pack("<Q", self._offset)
        step = BLOCK * _ENTRY
        blocks = b"".join(hashlib.sha256(self._entries[i:i + step]).digest()
                          for i in range(0, len(self._entries), step))
        with open_file(self.directory / TABLE_FILE, "wb", parent_too=True) as f:
            f.write(header + self._entries + end + blocks)
            f.flush()
            os.fsync(f.fileno())
        return hashlib.sha256(header + end + blocks).hexdigest()

    def abort(self) -> None:
        self._records.close()


class TaskTable:
    """Read tasks of a frozen plan, each checked against the digests chained from job.json."""

    def __init__(self, output: Path, job: Job) -> None:
        self.job = job
        self.records_path = Path(output) / PLAN_RECORDS_FILE
        self.table_path = Path(output) / PLAN_TABLE_FILE
        try:
            self._table = os.open(self.table_path, os.O_RDONLY)
            self._records = os.open(self.records_path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise RecordError(f"{e.filename}: missing: the plan in {output} is incomplete",
                              hint="re-plan into a new output directory") from None
        self.n_tasks, self.block, self.end, self._blocks = self._read_summary()

    def close(self) -> None:
        for fd in (self._table, self._records):
            os.close(fd)

    def __enter__(self) -> "TaskTable":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, what: str) -> RecordError:
        return RecordError(f"{what}: the plan was altered after planning (digest chain from job.json broken)",
                           hint="re-plan into a new output directory")

    def _pread(self, fd: int, size: int, offset: int, path: Path) -> bytes:
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise self._fail(f"{path}: truncated")
        return data

    def _read_summary(self) -> tuple[int, int, int, bytes]:
        header = self._pread(self._table, _HEADER.size, 0, self.table_path)
        magic, n, block, _ = _HEADER.unpack(header)
        if magic != MAGIC or block < 1:
            raise self._fail(f"{self.table_path}: header")
        n_blocks = -(-n // block)
        tail = self._pread(self._table, 8 + 32 * n_blocks, _HEADER.size + _ENTRY * n, self.table_path)
        if hashlib.sha256(header + tail).hexdigest() != self.job.plan.table_sha256:
            raise self._fail(f"{self.table_path}: table digest")
        if n != self.job.n_tasks:   # the table is the plan's (chained): job.json's count was edited
            raise RecordError(f"{self.table_path.parent.parent / JOB_FILE}: field 'summary.tasks' is "
                              f"{self.job.n_tasks} but the plan ({self.table_path}) holds {n} tasks: job.json "
                              f"was edited after planning", hint="re-plan into a new output directory")
        return n, block, struct.unpack_from("<Q", tail)[0], tail[8:]

    def _block(self, b: int) -> bytes:
        first = b * self.block
        count = min(self.block, self.n_tasks - first)
        data = self._pread(self._table, count * _ENTRY, _HEADER.size + first * _ENTRY, self.table_path)
        if hashlib.sha256(data).digest() != self._blocks[32 * b:32 * (b + 1)]:
            raise self._fail(f"{self.table_path}: entries of tasks {first}-{first + count - 1}")
        return data

    def _span(self, t: int, i: int, entries: bytes) -> tuple[int, int, bytes]:
        """``(start, end, digest)`` of task t's line, t being entry i of the (verified) block ``entries``."""
        start, digest = struct.unpack_from("<Q16s", entries, i * _ENTRY)
        if t + 1 == self.n_tasks:
            end = self.end
        elif (i + 1) * _ENTRY < len(entries):
            end = struct.unpack_from("<Q", entries, (i + 1) * _ENTRY)[0]
        else:   # the next entry opens the next block; a wrong offset there fails t's own digest check
            end = struct.unpack("<Q", self._pread(self._table, 8, _HEADER.size + (t + 1) * _ENTRY,
                                                  self.table_path))[0]
        return start, end, digest

    def _decode(self, t: int, start: int, end: int, digest: bytes) -> Task:
        if not start <= end <= self.end:
            raise self._fail(f"{self.table_path}: task {t}'s offsets")
        line = self._pread(self._records, end - start, start, self.records_path)
        if _record_digest(line) != digest:
            raise self._fail(f"{self.records_path}: task {t}'s record")
        return decode_task(line, t, self.job.plan.root, self.records_path)

    def task(self, t: int) -> Task:
        """Task ``t``: hashes n/B x 32 + B x 24 bytes of the table and the task's own line, nothing else."""
        if not 0 <= t < self.n_tasks:
            raise IndexError(t)
        b, i = divmod(t, self.block)
        return self._decode(t, *self._span(t, i, self._block(b)))

    def __iter__(self) -> Iterator[Task]:
        """Every task in order, each line checked (for readers that need them all: linear, one pass)."""
        for b in range(-(-self.n_tasks // self.block)):
            entries = self._block(b)
            for i in range(len(entries) // _ENTRY):
                t = b * self.block + i
                yield self._decode(t, *self._span(t, i, entries))


def check_task_count(output: Path, job: Job) -> None:
    """job.json's task count is the plan's (``plan/tasks.idx``, chained from job.json by digest): what
    ``finalize`` checks before it publishes ``summary.tasks`` shards, also for plans without a seal.
    Reads 32 bytes per 1024 tasks; the records are not read."""
    with TaskTable(output, job):
        pass


def read_task(output: Path, job: Job, t: int) -> Task:
    """One task of the plan in ``output`` (what ``run-task`` reads), its remote inputs reached with the
    plan's ``storage`` (job.json), as planning reached them: every read of the task gets it from its input."""
    with TaskTable(output, job) as table:
        task = table.task(t)
    if job.storage is None:
        return task
    return Task(task.index, tuple(TaskItem(i.input.reached_with(job.storage), i.work) for i in task.items))
