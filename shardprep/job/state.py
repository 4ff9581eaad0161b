"""The truth about a job is the files in its output directory: job.json plus one sidecar per finished
task.  Status, resume, finalize and the Slurm view all read it from here (never from sacct)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from shardprep.errors import ConfigError, RecordError, TokenizerError
from shardprep.job.schema import Job
from shardprep.records import Record, read_record
from shardprep.shard.format import JOB_FILE, TOKENIZER_FILE, shard_name, sidecar_name
from shardprep.shard.sidecar import Sidecar, SidecarSummary

log = logging.getLogger(__name__)


def load_job(output: Path) -> Job:
    """Read ``<output>/job.json``; a clear error when there is none (nothing planned there) or the output
    is a file."""
    try:
        return read_record(Path(output) / JOB_FILE, Job.parse, hint="run `shardprep plan` or `submit` first")
    except NotADirectoryError:
        raise ConfigError(f"output directory {output} is a file, not a directory") from None


def read_frozen_tokenizer(output: Path, job: Job) -> str:
    """``<output>/tokenizer.json`` as planned: a missing or unreadable file, or one changed since planning,
    is one TokenizerError naming it (exit 6), whoever reads it (a task, ``submit --resume``)."""
    from shardprep.tokenizer.load import check_frozen_tokenizer

    path = Path(output) / TOKENIZER_FILE
    try:
        tok_json = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TokenizerError(f"{path} is not readable: {e.strerror}: the plan's frozen tokenizer is gone",
                             hint="restore it, or re-plan into a new output directory") from None
    check_frozen_tokenizer(tok_json, job.tokenizer, path)
    return tok_json


def check_task(output: Path, job: Job, task: int, *,
               listing: set[str] | None = None) -> tuple[Sidecar | None, str | None]:
    """``(sidecar, None)`` when task ``task`` counts as done, else ``(sidecar or None, why not)``.

    Done means: a sidecar that parses, names this plan's fingerprint, and a shard of the size it records.
    An unreadable or malformed sidecar is not an error here: the task is simply redone.  ``listing``
    (the output directory's names, listed once) spares a failing open per task that has no sidecar.
    """
    name = sidecar_name(task)
    if listing is not None and name not in listing:
        return None, "no sidecar"
    path = os.path.join(output, name)
    try:
        with open(path, "rb") as f:
            sidecar = Sidecar.parse(f.read(), path)
    except FileNotFoundError:
        return None, "no sidecar"
    except RecordError as e:
        return None, f"sidecar unreadable ({e})"
    if sidecar.plan_fingerprint != job.fingerprint:
        return sidecar, "sidecar belongs to another plan"
    try:
        size = os.stat(os.path.join(output, shard_name(task))).st_size
    except FileNotFoundError:
        return sidecar, "shard file missing"
    if size != sidecar.bytes:
        return sidecar, f"shard size {size} != sidecar's {sidecar.bytes}"
    return sidecar, None


@dataclass(frozen=True)
class JobTotals(Record):
    """What the done tasks hold, summed (``status``; finalize's index totals)."""

    documents: int
    tokens: int
    bytes: int
    samples: int
    skipped: int


@dataclass
class JobState:
    n_tasks: int
    done: dict[int, SidecarSummary] = field(default_factory=dict)   # task -> what its sidecar says
    problems: dict[int, str] = field(default_factory=dict)   # task -> why not done

    @property
    def missing(self) -> list[int]:
        return sorted(self.problems)

    @property
    def complete(self) -> bool:
        return not self.problems

    def totals(self) -> JobTotals:
        done = self.done.values()
        return JobTotals(documents=sum(s.documents for s in done), tokens=sum(s.tokens for s in done),
                         bytes=sum(s.bytes for s in done), samples=sum(s.samples for s in done),
                         skipped=sum(s.skipped_total for s in done))


def job_state(output: Path, job: Job | None = None, *,
              on_done: Callable[[Sidecar], None] | None = None) -> JobState:
    """Done and missing tasks from the sidecars: one directory listing, one read per existing sidecar,
    job.json read at most once (linear in the number of tasks).  ``on_done`` sees each finished task's
    whole sidecar (the state keeps a summary), for callers that need more than ``status`` does."""
    job = job if job is not None else load_job(output)
    state = JobState(job.n_tasks)
    listing = set(os.listdir(output))
    for t in range(state.n_tasks):
        sidecar, problem = check_task(output, job, t, listing=listing)
        if problem is None:
            state.done[t] = sidecar.summary()  # type: ignore[union-attr]
            if on_done is not None:
                on_done(sidecar)  # type: ignore[arg-type]
        else:
            state.problems[t] = problem
    return state


def format_array_ranges(ids: Iterable[int]) -> str:
    """``[3, 7, 8, 9]`` -> ``"3,7-9"`` (Slurm ``--array`` syntax)."""
    out: list[str] = []
    items = sorted(set(ids))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def describe_task_ids(ids: Iterable[int]) -> str:
    """``[0]`` -> ``"1 task (id 0)"``, ``[0, ..., 7]`` -> ``"8 tasks (ids 0-7)"``, ``[]`` -> ``"none"``.

    Why words: a bare ``to run: 0`` (array syntax for task 0) read as "nothing to run" right before the
    job ran; the count says how much, the ids say which.
    """
    items = sorted(set(ids))
    if not items:
        return "none"
    return (f"{len(items):,} task{'s' if len(items) > 1 else ''} "
            f"(id{'s' if len(items) > 1 else ''} {format_array_ranges(items)})")


def parse_array_ranges(text: str) -> list[int]:
    """Inverse of :func:`format_array_ranges` (accepts ``%N`` suffix and ``a-b:step``)."""
    text = text.split("%", 1)[0].strip()
    ids: set[int] = set()
    try:
        for part in filter(None, text.split(",")):
            rng, _, step = part.partition(":")
            a, _, b = rng.partition("-")
            ids.update(range(int(a), int(b or a) + 1, int(step or 1)))
    except ValueError:
        raise ConfigError(f"invalid task id list {text!r}: use Slurm array syntax such as 0,3,7-9") from None
    return sorted(ids)
