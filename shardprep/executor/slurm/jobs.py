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

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

from shardprep.job.state import format_array_ranges, parse_array_ranges
from shardprep.records import OMIT_NONE, Fields, Record, load_json, record
from shardprep.storage.atomic import write_json_atomic
from shardprep.storage.nofollow import real_dir

if TYPE_CHECKING:
    from shardprep.executor.slurm.options import SlurmOptions
    from shardprep.executor.slurm.submission import SubmissionPlan

SLURM_DIR = "slurm"
JOBS_FILE = "jobs.json"


@dataclass(frozen=True)
class ArrayRecord(Record):
    """One submitted array: its job id, and which task each index runs (the i-th index the i-th task)."""

    job_id: str
    indices: str                   # array syntax, ascending
    tasks: str                     # array syntax, ascending
    log: str                       # relative to OUTPUT, with ``{job}`` and ``{index}``
    offset: int | None = None      # sbatch: index i runs task offset + i; submitit: None (positions)
    array: str | None = None       # sbatch's --array value, the %N throttle included
    script: str | None = None      # sbatch: the script, relative to OUTPUT
    dependency: str | None = None
    plain: bool = False            # submitit submits a single call as a plain job, not an array

    def elements(self) -> Iterator[tuple[int, int]]:
        """(index, task) pairs."""
        yield from zip(parse_array_ranges(self.indices), parse_array_ranges(self.tasks))


@dataclass(frozen=True)
class FinalizeRecord(Record):
    """The finalize job of a submission (``afterok`` on every array of it)."""

    job_id: str
    log: str | None = None         # relative to OUTPUT
    script: str | None = None      # sbatch: the script, relative to OUTPUT
    dependency: str | None = None


@dataclass(frozen=True)
class Submission(Record):
    """One ``submit`` through Slurm (first run or ``--resume``), or one stage job (``executor`` ``slurm-stage``:
    a plain job of its own, ``job_id``/``script``/``log``, no arrays)."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "seq", "submitted_at", "executor", "tasks", "max_array_size", "max_array_size_source", "throttle", "options",
        "arrays", "finalize", "job_id", "script", "log", "then_submit")

    seq: int
    executor: str = "slurm"
    submitted_at: str | None = None
    tasks: str | None = None                   # array syntax
    max_array_size: int | None = None
    max_array_size_source: str | None = None
    throttle: str | None = None                # SubmissionPlan.throttle_mode
    options: dict[str, Any] = field(default_factory=dict)   # SlurmOptions.to_dict(), as recorded
    arrays: tuple[ArrayRecord, ...] = ()
    finalize: FinalizeRecord | None = None
    job_id: str | None = field(default=None, metadata=OMIT_NONE)       # the stage job's
    script: str | None = field(default=None, metadata=OMIT_NONE)
    log: str | None = field(default=None, metadata=OMIT_NONE)
    then_submit: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)

    def slurm_options(self) -> SlurmOptions:
        """The options it was submitted with (fields recorded before they existed take today's defaults)."""
        from shardprep.executor.slurm.options import SlurmOptions

        return SlurmOptions.from_dict(self.options)

    @property
    def max_attempts(self) -> int | None:
        """--max-requeues + 1 as recorded; None for submissions made before the cap existed (unlimited)."""
        cap = self.options.get("max_requeues")
        return None if cap is None else int(cap) + 1

    @classmethod
    def parse(cls, f: Fields) -> Submission:
        values: dict[str, Any] = {"seq": f.int("seq", minimum=1)}
        for name, read in (("executor", f.str), ("submitted_at", f.str), ("tasks", f.str),
                           ("max_array_size", f.int), ("max_array_size_source", f.str), ("throttle", f.str),
                           ("job_id", f.str), ("script", f.str), ("log", f.str)):
            if f.has(name):
                values[name] = read(name, optional=name != "executor")
        if f.has("options") and f.raw("options") is not None:
            values["options"] = f.dict("options")
        if f.has("arrays"):
            values["arrays"] = tuple(record(ArrayRecord, a, defaults=True) for a in f.objects("arrays"))
        if f.has("finalize") and f.raw("finalize") is not None:
            values["finalize"] = record(FinalizeRecord, f.obj_at("finalize"), defaults=True)
        if f.has("then_submit") and f.raw("then_submit") is not None:
            values["then_submit"] = f.strs("then_submit")
        return cls(**values)


def jobs_path(output: Path) -> Path:
    return Path(output) / SLURM_DIR / JOBS_FILE


def read_submissions(output: Path) -> list[Submission]:
    """Every recorded submission, oldest first (empty when the job never went through Slurm)."""
    path = jobs_path(output)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):     # never submitted, or OUTPUT is no directory at all
        return []
    f = load_json(data, str(path), "Slurm jobs record")
    return [Submission.parse(s) for s in f.objects("submissions")] if f.has("submissions") else []


def last_submission(output: Path) -> Submission | None:
    """The most recent submission record (its executor and options seed ``submit --resume``)."""
    subs = read_submissions(output)
    return subs[-1] if subs else None


def write_submissions(output: Path, submissions: list[Submission]) -> None:
    path = jobs_path(output)
    real_dir(path.parent, parents=True)      # OUTPUT/slurm: never a link planted there (storage/nofollow.py)
    write_json_atomic(path, {"submissions": [s.to_dict() for s in submissions]})


def now_iso() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


class SubmissionRecorder:
    """Appends one submission record and keeps it up to date as jobs are submitted (rewritten after each
    ``sbatch``, so a submission that fails halfway still lists the jobs it did start)."""

    def __init__(self, output: Path, *, executor: str, tasks: str, options: dict[str, Any], **head: Any):
        self.output = Path(output)
        self.previous = read_submissions(output)
        self.record = Submission(seq=len(self.previous) + 1, submitted_at=now_iso(), executor=executor,
                                 tasks=tasks, options=options, **head)

    @classmethod
    def for_plan(cls, output: Path, executor: str, task_ids: list[int], plan: SubmissionPlan, source: str,
                 options: SlurmOptions) -> SubmissionRecorder:
        """The record of a tokenize submission of ``plan`` (MaxArraySize read from ``source``)."""
        return cls(output, executor=executor, tasks=format_array_ranges(task_ids), options=options.to_dict(),
                   max_array_size=plan.max_array_size, max_array_size_source=source, throttle=plan.throttle_mode)

    @property
    def seq(self) -> int:
        return self.record.seq

    def add_array(self, entry: ArrayRecord) -> None:
        self.record = dataclasses.replace(self.record, arrays=(*self.record.arrays, entry))
        self.save()

    def set_finalize(self, entry: FinalizeRecord) -> None:
        self.record = dataclasses.replace(self.record, finalize=entry)
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


def latest_attempts(submissions: list[Submission]) -> dict[int, TaskAttempt]:
    """For each task, the most recent array element that was submitted to run it."""
    out: dict[int, TaskAttempt] = {}
    for sub in submissions:
        for array in sub.arrays:
            for index, task in array.elements():
                log = array.log.format(job=array.job_id, index=index)
                out[task] = TaskAttempt(task, array.job_id, index, log, sub.seq, sub.executor, array.plain)
    return out
