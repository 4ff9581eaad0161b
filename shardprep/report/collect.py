"""Read an output's files into the typed values the report needs: the one place that knows their fields.

job.json, index.json, the sidecars and the frozen tokenizer are read here and nowhere else in
``shardprep.report``, through the typed records of ``job.schema`` and ``shard`` (errors name the file and the field).

Two kinds of location:

* a local directory, finished or still running: done/missing comes from ``job.state.job_state`` (the
  sidecars, the truth used by ``status`` and ``finalize``), progress and timing from the task logs;
* any location the loader reads (``s3://...``) once finalized: the shards index.json lists, whose
  sidecars are read in parallel through ``storage.locations`` (the same reads the loader makes).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from shardprep.errors import IncompleteError, InputDataError
from shardprep.executor.slurm.state import SlurmView
from shardprep.executor.slurm.state import collect as slurm_view
from shardprep.job.finalize import index_tokenizer
from shardprep.job.logs import LOG_NAME_RE, TaskLog, parse_task_log, read_task_logs
from shardprep.job.options import ChatOptions
from shardprep.job.progress import planned_input_bytes
from shardprep.job.schema import Job
from shardprep.job.state import job_state
from shardprep.shard.format import INDEX_FILE, JOB_FILE, LOG_DIR, TOKENIZER_FILE
from shardprep.shard.index import Index, IndexShard, IndexTokenizer
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.locations import StorageOptions, is_url, join, object_sizes, read_bytes

log = logging.getLogger(__name__)

_READ_THREADS = 16   # parallel small reads (sidecars, logs); what matters on S3 and Lustre
R = TypeVar("R")


@dataclass(frozen=True)
class Task:
    task: int
    planned_bytes: int               # input bytes the plan gave this task (progress weights)
    sidecar: Sidecar | None          # None while not done
    problem: str | None              # why not done ("no sidecar", ...), None when done


@dataclass
class Output:
    """Everything the report reads from one output location."""

    location: str
    finalized: bool
    layout: str
    dtype: str
    fingerprint: str
    tokenizer: IndexTokenizer            # index.json's tokenizer record (the plan's, before finalize)
    tokenizer_json: str | None           # the frozen tokenizer.json, when present
    chunk_tokens: int | None = None
    target_task_bytes: int | None = None
    sizing_rule: str | None = None       # how target_task_bytes was chosen: auto | target | one-file-per-task
    tasks: list[Task] = field(default_factory=list)
    logs: dict[int, TaskLog] = field(default_factory=dict)
    slurm: SlurmView | None = None       # ``status``'s Slurm view, for jobs submitted to Slurm
    storage: StorageOptions | None = None   # how to reach a remote location (None: the environment's)
    chat: bool = False                   # conversations with trained ranges (--chat; index format 2)
    chat_options: ChatOptions | None = None     # job.json's chat options (None without job.json)

    @property
    def done(self) -> list[Sidecar]:
        return [t.sidecar for t in self.tasks if t.sidecar is not None]


def _record(location: str, parse: Callable[[bytes, str], R], storage: StorageOptions | None) -> R | None:
    """A record file parsed (errors name the file and field); None when it does not exist."""
    try:
        return parse(read_bytes(location, storage=storage), location)
    except FileNotFoundError:
        return None


def _optional_text(location: str, storage: StorageOptions | None) -> str | None:
    try:
        return read_bytes(location, storage=storage).decode("utf-8")
    except FileNotFoundError:
        return None


def _read_logs(location: str, storage: StorageOptions | None) -> dict[int, TaskLog]:
    """Parse every ``logs/task-NNNNN.log`` whole (none is fine: a copied or uploaded output may have none)."""
    logs_dir = join(location, LOG_DIR)
    if not is_url(location):      # local reads are quicker one after the other than through a thread pool
        return read_task_logs(Path(logs_dir))
    try:
        logs = [(int(m.group(1)), n) for n in object_sizes(logs_dir, storage=storage)
                if (m := LOG_NAME_RE.match(n))]
    except FileNotFoundError:
        return {}

    def one(entry: tuple[int, str]) -> TaskLog | None:
        task, name = entry
        text = _optional_text(join(logs_dir, name), storage)
        return parse_task_log(task, text) if text else None

    with ThreadPoolExecutor(_READ_THREADS) as pool:
        return {t.task: t for t in pool.map(one, logs) if t is not None}


def _planned_bytes(location: str, job: Job | None) -> list[int]:
    """Input bytes of every planned task (progress weights), from the plan's records (local outputs)."""
    if job is None or is_url(location) or not Path(location, "plan").is_dir():
        return []
    return planned_input_bytes(Path(location), job)


def _local_tasks(out: Output, job: Job) -> list[Task]:
    """Every planned task of a local output, done or not (``job_state``: the sidecars decide), plus the
    Slurm view of the ones not done when the job went through a Slurm executor (squeue, like ``status``)."""
    output = Path(out.location)
    sidecars: dict[int, Sidecar] = {}
    state = job_state(output, job, on_done=lambda s: sidecars.__setitem__(s.task, s))
    out.slurm = slurm_view(output, state)
    planned = _planned_bytes(out.location, job)
    return [Task(t, planned[t] if t < len(planned) else 0, sidecars.get(t), state.problems.get(t))
            for t in range(state.n_tasks)]


def _indexed_tasks(location: str, index: Index, job: Job | None, storage: StorageOptions | None) -> list[Task]:
    """Tasks of a finalized output at any location: the shards index.json lists, all done."""
    planned = _planned_bytes(location, job)

    def one(entry: IndexShard) -> Sidecar:
        where = join(location, entry.sidecar)
        side = _record(where, Sidecar.parse, storage)
        if side is None:
            raise IncompleteError(f"{where}: sidecar of {entry.name} is missing")
        return side

    with ThreadPoolExecutor(_READ_THREADS) as pool:
        sidecars = list(pool.map(one, index.shards))
    return [Task(s.task, planned[s.task] if s.task < len(planned) else 0, s, None) for s in sidecars]


def collect(location: str | Path, *, storage: StorageOptions | None = None) -> Output:
    """Read ``location`` (a local output directory, or a finalized output anywhere the loader reads;
    ``storage``: how to reach it, default the environment's)."""
    location = str(location)
    remote = is_url(location)
    if not remote and not Path(location).is_dir():
        raise InputDataError(f"{location} is not a directory", hint="give the job's OUTPUT directory")
    index = _record(join(location, INDEX_FILE), Index.parse, storage)
    job = _record(join(location, JOB_FILE), Job.parse, storage)
    out = _describe(location, job, index, storage)
    out.storage = storage
    if job is not None and not remote:
        out.tasks = _local_tasks(out, job)
    elif index is not None:
        out.tasks = _indexed_tasks(location, index, job, storage)
    else:
        raise IncompleteError(f"{location} holds no {INDEX_FILE}: a report on a remote output needs a "
                              f"finalized job", hint="run `shardprep report` on the job's local directory")
    out.logs = _read_logs(location, storage)
    return out


def _describe(location: str, job: Job | None, index: Index | None, storage: StorageOptions | None) -> Output:
    """The output's header: from job.json when there is one (it alone knows the options), else index.json."""
    tokenizer_json = _optional_text(join(location, TOKENIZER_FILE), storage)
    if job is not None:
        return Output(location=location, finalized=index is not None, layout=job.options.layout,
                      dtype=job.tokenizer.dtype, fingerprint=job.fingerprint,
                      tokenizer=index_tokenizer(job),
                      tokenizer_json=tokenizer_json, chunk_tokens=job.options.chunk_tokens,
                      target_task_bytes=job.target_task_bytes, sizing_rule=job.sizing.rule,
                      chat=job.options.chat is not None, chat_options=job.options.chat)
    if index is not None:
        return Output(location=location, finalized=True, layout=index.layout, dtype=index.dtype,
                      fingerprint=index.plan_fingerprint, tokenizer=index.tokenizer,
                      tokenizer_json=tokenizer_json, chat=index.chat)
    raise IncompleteError(f"{location} holds neither {JOB_FILE} nor {INDEX_FILE}",
                          hint="give the OUTPUT directory of a job (`shardprep submit --output`)")
