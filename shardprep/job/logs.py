"""Per-task logs (``OUTPUT/logs/task-NNNNN.log``): the lines a task writes that others read, and reading
them back: when each attempt started and ended, and how.

Sidecars say how long a *finished* task took but not when it ran, and a task without a sidecar has only
its log: whether it started, is still going, failed (and why) or was stopped for requeue.  Every executor
writes the same file (``job.task._task_log``), appending one run per attempt, so this reads the
executor-independent record rather than Slurm's ``%A_%a.out`` files.  The messages ``status`` and
``report`` rely on are declared here (``STARTED``, ``PROGRESS``, ``DONE``, ``FAILED``): the task logs
through them and the reader's patterns are built from them, so rewording one cannot break the other.

An attempt starts with one line carrying a marker nothing else writes (``attempt start``, with the pid and
host of the attempt); only that line opens an attempt.  Logs written before the marker existed opened an
attempt with any ``task N: ...`` line, which is how a task reading remote inputs came to count two
attempts (its ``task N: remote inputs: ...`` line); such logs are still read, as ``task N: `` lines other
than the task's other messages (``BACKEND``, ``REMOTE_READS``).  While it encodes, a task writes how much
of its planned input it has read (``PROGRESS``, every few seconds), so ``status`` counts the running
tasks' work too (``job.progress``).

``status`` reads every log of a job (10,000 tasks: 10,000 logs), so :func:`read_task_logs` can bound what it
reads of each: the first record's timestamp (when the task first started) and the last ``tail_bytes``
(the last attempt).  A log is a few lines per attempt, read whole in practice; the bound matters for a
packed task whose first line lists thousands of inputs, or a long run of warnings.

Times are the log's local wall-clock timestamps (``logging``'s default ``asctime``), read in the report
machine's time zone; they only feed durations and the timeline, never a number that must match a sidecar.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from shardprep.records import FS_BYTES
from shardprep.storage.nofollow import open_fd, real_dir

# The task's messages that this module reads back (``logging`` %-formats; the task logs through them).
STARTED = "task %d: attempt start (pid %d on %s): %s"   # an attempt's first line, and only there: its inputs
LEGACY_STARTED = "task %d: %s"       # the first line of an attempt in logs from before the marker (read only)
PROGRESS = "task %d progress: %d of %d input bytes read"  # while it encodes, every few seconds (``Progress``)
BACKEND = "task %d: backend %s"      # what encodes (logged again once checked); not a start
DONE = "task %d done: %d documents, %d tokens, %d bytes, %d skipped, %.1fs"
FAILED = "task %d failed: %s"
STOPPED = "task %d stopped on %s at a safe point; temporary shard removed, safe to requeue"   # a FAILED reason
REMOTE_READS = "task %d: remote inputs: %d request(s), %d of them retries after transient errors, %d bytes"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LOG_NAME_RE = re.compile(r"^task-(\d{5,})\.log$")
_RECORD_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) [\w.]+: (.*)$")


class _NoFollowFileHandler(logging.FileHandler):
    """``logging.FileHandler`` that appends without following a link at the log's name or at ``logs/``."""

    def _open(self) -> io.TextIOWrapper:
        fd = open_fd(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, parent_too=True)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def task_log_handler(path: Path) -> logging.FileHandler:
    """The handler a task logs to: ``path`` (``logs/task-NNNNN.log``) appended to, ``logs/`` made if needed.

    Why not a plain ``FileHandler``: a link planted at the log's name (or at ``logs/``) in a group-writable
    output directory once had a task append its log to the link's target; here it is refused (exit 4,
    ``storage/nofollow.py``).  A file name that is not UTF-8 (issue 23) is logged with ``\\xNN`` escapes.
    """
    real_dir(path.parent)
    return _NoFollowFileHandler(path, encoding="utf-8", errors=FS_BYTES)


def _prefix(message: str) -> str:
    """The regex of a message's fixed start, up to its second placeholder: ``task %d done: %d ...`` ->
    ``^task (\\d+) done: ``."""
    cut = message.index("%d") + 2
    head = message[:cut] + message[cut:].split("%", 1)[0]
    return "^" + re.escape(head).replace("%d", r"(\d+)")


def _not_followed_by(*messages: str) -> str:
    """A lookahead refusing what follows ``task %d: `` in each of ``messages``."""
    return "(?!" + "|".join(re.escape(m.split("task %d: ", 1)[1].split("%", 1)[0]) for m in messages) + ")"


_START_RE = re.compile(_prefix(STARTED))
_LEGACY_START_RE = re.compile(_prefix(LEGACY_STARTED) + _not_followed_by(BACKEND, REMOTE_READS))
_PROGRESS_RE = re.compile(_prefix(PROGRESS) + r"(\d+)")
_DONE_RE = re.compile(_prefix(DONE))
_FAILED_RE = re.compile(_prefix(FAILED) + "(.*)$")
TAIL_BYTES = 64 << 10    # what ``status`` reads of a log past its first line: the last attempt, in practice


@dataclass(frozen=True)
class TaskLog:
    """What one task's log says about its last attempt (``attempts`` counts them all)."""

    task: int
    attempts: int
    started: float | None        # epoch seconds, start of the last attempt
    ended: float | None          # epoch seconds of its "done"/"failed" line; None while it runs
    status: str                  # "done" | "failed" | "running" (started, no end line: running or killed)
    reason: str | None = None    # the failure message of a failed attempt
    first_started: float | None = None   # epoch seconds of the log's first record: the first attempt's start
    read_bytes: int = 0          # planned input bytes the last attempt had read at its last progress line

    @property
    def duration_s(self) -> float | None:
        return None if self.started is None or self.ended is None else self.ended - self.started


def _epoch(stamp: str, millis: str) -> float:
    """``2026-01-02 03:04:05`` (local time) -> epoch seconds; as ``time.strptime`` + ``mktime`` but without
    strptime's format machinery, a third of ``status``'s time on 10,000 logs."""
    fields = (int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13]), int(stamp[14:16]),
              int(stamp[17:19]), 0, 0, -1)
    return time.mktime(fields) + int(millis) / 1000


def parse_task_log(task: int, text: str, first_started: float | None = None) -> TaskLog | None:
    """The last attempt in ``text`` (None when the log holds no record yet).

    Continuation lines (a multi-line message) carry no timestamp and are ignored.  ``first_started`` is
    given when ``text`` is only the log's tail (then ``attempts`` counts the attempts in the tail).  Only
    ``STARTED`` lines open an attempt; a text without any (a log from before the marker, or a tail that
    begins inside the last start line) is read with the older rule (``_LEGACY_START_RE``).
    """
    records = [(_epoch(m.group(1), m.group(2)), m.group(4)) for m in map(_RECORD_RE.match, text.splitlines()) if m]
    is_start = _START_RE.match if any(_START_RE.match(message) for _, message in records) else _LEGACY_START_RE.match
    attempts = read = 0
    started = ended = None
    status, reason = "running", None
    implicit = False   # the current attempt was opened by a record other than its start line
    for when, message in records:
        first_started = when if first_started is None else first_started
        if is_start(message):
            if not (implicit and ended is None):   # else: the start line of the attempt already opened
                attempts += 1
                started, ended, status, reason, read = when, None, "running", None, 0
            implicit = False
        elif attempts == 0:
            attempts, started, implicit = 1, when, True
        if _DONE_RE.match(message):
            ended, status = when, "done"
        elif (f := _FAILED_RE.match(message)) is not None:
            ended, status, reason = when, "failed", f.group(2)
        elif (g := _PROGRESS_RE.match(message)) is not None:
            read = int(g.group(2))
    if attempts == 0:
        return None
    return TaskLog(task, attempts, started, ended, status, reason, first_started, read)


def _first_stamp(head: str) -> float | None:
    m = _RECORD_RE.match(head.split("\n", 1)[0])
    return _epoch(m.group(1), m.group(2)) if m else None


def read_task_log(path: str | Path, task: int, tail_bytes: int | None = None) -> TaskLog | None:
    """Parse one local log: whole, or (``tail_bytes``) its first record's time and its last ``tail_bytes``.

    A tail that starts inside the last attempt's first line (a packed task's long input list) opens that
    attempt at its next record, a moment later.  None when the log is gone or holds no record yet.
    """
    try:
        with open(path, "rb") as f:
            head = f.read() if tail_bytes is None else f.read(tail_bytes)
            if tail_bytes is None or len(head) < tail_bytes:
                return parse_task_log(task, head.decode("utf-8", "replace"))
            f.seek(-tail_bytes, os.SEEK_END)
            tail = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    return parse_task_log(task, tail, _first_stamp(head.decode("utf-8", "replace")))


def read_task_logs(logs_dir: Path, tail_bytes: int | None = None) -> dict[int, TaskLog]:
    """Every ``task-NNNNN.log`` under ``logs_dir`` (one listing, one open per log, no stat): task -> log."""
    try:
        names = os.listdir(logs_dir)
    except FileNotFoundError:
        return {}
    logs = {}
    for name in names:
        m = LOG_NAME_RE.match(name)
        if m and (lg := read_task_log(os.path.join(logs_dir, name), int(m.group(1)), tail_bytes)) is not None:
            logs[lg.task] = lg
    return logs
