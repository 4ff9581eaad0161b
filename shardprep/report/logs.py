"""Per-task logs (``OUTPUT/logs/task-NNNNN.log``): when each attempt started and ended, and how.

Sidecars say how long a *finished* task took but not when it ran, and a task without a sidecar has only
its log: whether it started, is still going, failed (and why) or was stopped for requeue.  Every executor
writes the same file (``job.task._attach_task_log``), appending one run per attempt, so this reads the
executor-independent record rather than Slurm's ``%A_%a.out`` files.

Times are the log's local wall-clock timestamps (``logging``'s default ``asctime``), read in the report
machine's time zone; they only feed durations and the timeline, never a number that must match a sidecar.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

LOG_NAME_RE = re.compile(r"^task-(\d{5,})\.log$")
_RECORD_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) [\w.]+: (.*)$")
# The first line of an attempt lists its inputs ("task 3: /data/a.txt[0:None]"); later "task 3: backend ...".
_START_RE = re.compile(r"^task (\d+): (?!backend )")
_DONE_RE = re.compile(r"^task (\d+) done: ")
_FAILED_RE = re.compile(r"^task (\d+) failed: (.*)$")


@dataclass(frozen=True)
class TaskLog:
    """What one task's log says about its last attempt (``attempts`` counts them all)."""

    task: int
    attempts: int
    started: float | None        # epoch seconds, start of the last attempt
    ended: float | None          # epoch seconds of its "done"/"failed" line; None while it runs
    status: str                  # "done" | "failed" | "running" (started, no end line: running or killed)
    reason: str | None = None    # the failure message of a failed attempt

    @property
    def duration_s(self) -> float | None:
        return None if self.started is None or self.ended is None else self.ended - self.started


def _epoch(stamp: str, millis: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def parse_task_log(task: int, text: str) -> TaskLog | None:
    """The last attempt in ``text`` (None when the log holds no record yet).

    Continuation lines (a multi-line message) carry no timestamp and are ignored.
    """
    attempts = 0
    started = ended = None
    status, reason = "running", None
    implicit = False   # the current attempt was opened by a record other than its start line
    for line in text.splitlines():
        m = _RECORD_RE.match(line)
        if not m:
            continue
        when, message = _epoch(m.group(1), m.group(2)), m.group(4)
        if _START_RE.match(message):
            if not (implicit and ended is None):   # else: the start line of the attempt already opened
                attempts += 1
                started, ended, status, reason = when, None, "running", None
            implicit = False
        elif attempts == 0:
            attempts, started, implicit = 1, when, True
        if _DONE_RE.match(message):
            ended, status = when, "done"
        elif (f := _FAILED_RE.match(message)) is not None:
            ended, status, reason = when, "failed", f.group(2)
    if attempts == 0:
        return None
    return TaskLog(task, attempts, started, ended, status, reason)
