"""``OUTPUT/slurm/jobs.json``: which Slurm jobs ran which tasks, across the first submission and resumes.

Slurm forgets finished jobs after ``MinJobAge`` and many sites disable ``sacct``, so the mapping from a
task to its array element and log file must live with the data.  Every submission (sbatch or submitit,
first run or ``--resume``) appends one record; the record is rewritten after each successful ``sbatch``
so a submission that fails halfway still lists the jobs it did start (to inspect or ``scancel``).

An array record maps array indices to tasks by position: the i-th index in ``indices`` runs the i-th
task in ``tasks`` (both in Slurm array syntax, ascending).  For sbatch arrays that is ``offset + index``;
for submitit arrays it is the order of ``map_array``'s arguments.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from shardprep.job.state import format_array_ranges, parse_array_ranges
from shardprep.storage.atomic import read_json, write_json_atomic

if TYPE_CHECKING:
    from shardprep.executor.slurm.options import SlurmOptions
    from shardprep.executor.slurm.submission import SubmissionPlan

SLURM_DIR = "slurm"
JOBS_FILE = "jobs.json"


def jobs_path(output: Path) -> Path:
    return Path(output) / SLURM_DIR / JOBS_FILE


def read_submissions(output: Path) -> list[dict[str, Any]]:
    """Every recorded submission, oldest first (empty when the job never went through Slurm)."""
    path = jobs_path(output)
    if not path.exists():
        return []
    return list(read_json(path).get("submissions", []))


def last_submission(output: Path) -> dict[str, Any] | None:
    """The most recent submission record (its executor and options seed ``submit --resume``)."""
    subs = read_submissions(output)
    return subs[-1] if subs else None


def write_submissions(output: Path, submissions: list[dict[str, Any]]) -> None:
    path = jobs_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"submissions": submissions})


def now_iso() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


class SubmissionRecorder:
    """Appends one submission record and keeps it up to date as jobs are submitted."""

    def __init__(self, output: Path, record: dict[str, Any]):
        self.output = Path(output)
        self.previous = read_submissions(output)
        self.record = {"seq": len(self.previous) + 1, "submitted_at": now_iso(), **record,
                       "arrays": [], "finalize": None}

    @classmethod
    def for_plan(cls, output: Path, executor: str, task_ids: list[int], plan: "SubmissionPlan", source: str,
                 options: "SlurmOptions") -> "SubmissionRecorder":
        """The record of a tokenize submission of ``plan`` (MaxArraySize read from ``source``)."""
        return cls(output, {"executor": executor, "tasks": format_array_ranges(task_ids),
                            "max_array_size": plan.max_array_size, "max_array_size_source": source,
                            "throttle": plan.throttle_mode, "options": options.to_dict()})

    @property
    def seq(self) -> int:
        return int(self.record["seq"])

    def add_array(self, entry: dict[str, Any]) -> None:
        self.record["arrays"].append(entry)
        self.save()

    def set_finalize(self, entry: dict[str, Any]) -> None:
        self.record["finalize"] = entry
        self.save()

    def save(self) -> None:
        write_submissions(self.output, [*self.previous, self.record])


@dataclass(frozen=True)
class TaskAttempt:
    """Where a task last ran: its array element and log file (relative to the output directory)."""

    task: int
    job_id: str          # the array's job id
    index: int           # array index
    log: str             # path relative to OUTPUT
    seq: int             # submission number
    executor: str
    plain: bool = False  # a plain job, not an array (submitit submits a single call that way)

    @property
    def queue_key(self) -> tuple[str, int | None]:
        """How squeue/sacct name this attempt: (job id, array index or None)."""
        return self.job_id, None if self.plain else self.index

    @property
    def element(self) -> str:
        return self.job_id if self.plain else f"{self.job_id}_{self.index}"


def array_elements(array: dict[str, Any]) -> Iterator[tuple[int, int]]:
    """(index, task) pairs of one array record."""
    yield from zip(parse_array_ranges(array["indices"]), parse_array_ranges(array["tasks"]))


def latest_attempts(submissions: list[dict[str, Any]]) -> dict[int, TaskAttempt]:
    """For each task, the most recent array element that was submitted to run it."""
    out: dict[int, TaskAttempt] = {}
    for sub in submissions:
        for array in sub.get("arrays", []):
            for index, task in array_elements(array):
                log = array["log"].format(job=array["job_id"], index=index)
                out[task] = TaskAttempt(task, str(array["job_id"]), index, log, int(sub["seq"]),
                                        sub.get("executor", "slurm"), bool(array.get("plain")))
    return out
