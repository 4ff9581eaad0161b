"""Read an output's files into the typed values the report needs: the one place that knows their fields.

job.json, index.json, the sidecars and the frozen tokenizer are read here and nowhere else in
``shardprep.report`` (when the typed records of ``job/schema.py`` land, only this module changes).

Two kinds of location:

* a local directory, finished or still running: done/missing comes from ``job.state.job_state`` (the
  sidecars, the truth used by ``status`` and ``finalize``), progress and timing from the task logs;
* any location the loader reads (``s3://...``) once finalized: the shards index.json lists, whose
  sidecars are read in parallel through ``loader.sources`` (the same reads the loader makes).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from shardprep.errors import IncompleteError, InputDataError
from shardprep.executor.slurm.state import _task_input_bytes, slurm_status_json
from shardprep.job.state import JobState, job_state
from shardprep.loader.index import ChunkTable
from shardprep.loader.sources import is_s3, join, object_sizes, read_bytes
from shardprep.report.logs import LOG_NAME_RE, TaskLog, parse_task_log
from shardprep.shard.format import INDEX_FILE, JOB_FILE, LOG_DIR, TOKENIZER_FILE

log = logging.getLogger(__name__)

_READ_THREADS = 16   # parallel small reads (sidecars, logs); what matters on S3 and Lustre
_TABLE = ("tokens_offset", "tokens", "docs", "doclens_offset", "doclens_itemsize")


@dataclass(frozen=True)
class SkipExample:
    reason: str
    file: str
    line: int | None
    byte: int | None
    task: int


@dataclass(frozen=True)
class Backend:
    """Which backend a task ran and, for ``auto``, why (a fallback names its reason)."""

    name: str | None
    version: str | None
    requested: str | None
    fallback_reason: str | None


@dataclass(frozen=True)
class Sidecar:
    """The fields of one finished task's sidecar that the report shows."""

    task: int
    shard: str
    tokens: int
    documents: int
    samples: int
    bytes: int
    elapsed_s: float | None
    tokens_per_s: float | None
    backend: Backend
    skipped: dict[str, int]
    skip_examples: tuple[SkipExample, ...]
    chunks: ChunkTable


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
    tokenizer: dict                      # job.json/index.json tokenizer record (+ add_eos/add_bos)
    tokenizer_json: str | None           # the frozen tokenizer.json, when present
    chunk_tokens: int | None = None
    target_task_bytes: int | None = None
    tasks: list[Task] = field(default_factory=list)
    logs: dict[int, TaskLog] = field(default_factory=dict)
    job_state: JobState | None = None    # local outputs: the sidecar truth (``status`` reads the same)
    slurm: dict | None = None            # ``status --json``'s Slurm view, for jobs submitted to Slurm

    @property
    def done(self) -> list[Sidecar]:
        return [t.sidecar for t in self.tasks if t.sidecar is not None]


def _json(location: str, what: str) -> dict:
    try:
        return orjson.loads(read_bytes(location))
    except orjson.JSONDecodeError as e:
        raise InputDataError(f"{location}: {what} is not valid JSON ({e})") from None


def _optional_text(location: str) -> str | None:
    try:
        return read_bytes(location).decode("utf-8")
    except FileNotFoundError:
        return None


def parse_sidecar(side: dict, where: str) -> Sidecar:
    """The report's view of one sidecar; InputDataError naming the file and the field when malformed."""
    try:
        stats = side.get("stats") or {}
        b = side.get("backend") or {}
        examples = tuple(SkipExample(e["reason"], e["file"], e.get("line"), e.get("byte"), int(side["task"]))
                         for e in side.get("skipped_examples", []))
        t = side["chunks"]
        table = ChunkTable(list(t["key"]), **{k: _int_column(t[k]) for k in _TABLE})
        return Sidecar(
            task=int(side["task"]), shard=side["shard"], tokens=int(side["tokens"]),
            documents=int(side["documents"]), samples=int(side["samples"]), bytes=int(side["bytes"]),
            elapsed_s=stats.get("elapsed_s"), tokens_per_s=stats.get("tokens_per_s"),
            backend=Backend(b.get("name"), b.get("version"), b.get("requested"), b.get("fallback_reason")),
            skipped={k: int(v) for k, v in side.get("skipped", {}).items()}, skip_examples=examples,
            chunks=table)
    except KeyError as e:
        raise InputDataError(f"{where}: sidecar field {e} is missing") from None
    except (TypeError, ValueError) as e:
        raise InputDataError(f"{where}: malformed sidecar ({e})") from None


def _int_column(values: list) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _read_logs(location: str) -> dict[int, TaskLog]:
    """Parse every ``logs/task-NNNNN.log`` (none is fine: a copied or uploaded output may have none)."""
    logs_dir = join(location, LOG_DIR)
    try:
        names = [n for n in object_sizes(logs_dir) if LOG_NAME_RE.match(n)]
    except FileNotFoundError:
        return {}

    def one(name: str) -> TaskLog | None:
        task = int(LOG_NAME_RE.match(name).group(1))  # type: ignore[union-attr]
        text = _optional_text(join(logs_dir, name))
        return parse_task_log(task, text) if text else None

    if not is_s3(location):   # local reads are quicker one after the other than through a thread pool
        return {t.task: t for t in map(one, names) if t is not None}
    with ThreadPoolExecutor(_READ_THREADS) as pool:
        return {t.task: t for t in pool.map(one, names) if t is not None}


def _tokenizer_record(job: dict | None, index: dict | None) -> dict:
    if job is not None:
        opts = job["options"]
        return {**job["tokenizer"], "add_eos": opts["add_eos"], "add_bos": opts["add_bos"]}
    return dict(index["tokenizer"])  # type: ignore[index]


def _local_tasks(out: Output, job: dict) -> list[Task]:
    """Every planned task of a local output, done or not (``job_state``: the sidecars decide), plus the
    Slurm view of the ones not done when the job went through a Slurm executor (squeue, like ``status``)."""
    output = Path(out.location)
    out.job_state = state = job_state(output, job)
    out.slurm = slurm_status_json(output, state)
    tasks = []
    for t in range(state.n_tasks):
        side = state.done.get(t)
        parsed = parse_sidecar(side, str(output / side["shard"])) if side is not None else None
        tasks.append(Task(t, _task_input_bytes(job, t), parsed, state.problems.get(t)))
    return tasks


def _indexed_tasks(location: str, index: dict, job: dict | None) -> list[Task]:
    """Tasks of a finalized output at any location: the shards index.json lists, all done."""
    n_planned = len(job["tasks"]) if job is not None else 0

    def one(entry: dict) -> Sidecar:
        where = join(location, entry["sidecar"])
        try:
            return parse_sidecar(_json(where, "sidecar"), where)
        except FileNotFoundError:
            raise IncompleteError(f"{where}: sidecar of {entry['name']} is missing") from None

    with ThreadPoolExecutor(_READ_THREADS) as pool:
        sidecars = list(pool.map(one, index["shards"]))
    return [Task(s.task, _task_input_bytes(job, s.task) if s.task < n_planned else 0, s, None)  # type: ignore
            for s in sidecars]


def collect(location: str | Path) -> Output:
    """Read ``location`` (a local output directory, or a finalized output anywhere the loader reads)."""
    location = str(location)
    remote = is_s3(location)
    if not remote and not Path(location).is_dir():
        raise InputDataError(f"{location} is not a directory", hint="give the job's OUTPUT directory")
    try:
        index: dict | None = _json(join(location, INDEX_FILE), "index")
    except FileNotFoundError:
        index = None
    try:
        job: dict | None = _json(join(location, JOB_FILE), "job plan")
    except FileNotFoundError:
        job = None
    if job is None and index is None:
        raise IncompleteError(f"{location} holds neither {JOB_FILE} nor {INDEX_FILE}",
                              hint="give the OUTPUT directory of a job (`shardprep submit --output`)")
    if remote and index is None:
        raise IncompleteError(f"{location} holds no {INDEX_FILE}: a report on a remote output needs a "
                              f"finalized job", hint="run `shardprep report` on the job's local directory")
    try:
        src = job if job is not None else index
        opts = (job or {}).get("options", {})
        out = Output(
            location=location, finalized=index is not None,
            layout=opts.get("layout") or index["layout"], dtype=src["tokenizer"]["dtype"],  # type: ignore
            fingerprint=job["fingerprint"] if job is not None else index["plan_fingerprint"],  # type: ignore
            tokenizer=_tokenizer_record(job, index),
            tokenizer_json=_optional_text(join(location, TOKENIZER_FILE)),
            chunk_tokens=opts.get("chunk_tokens"),
            target_task_bytes=((job or {}).get("plan_options") or {}).get("target_task_bytes"))
        out.tasks = _local_tasks(out, job) if job is not None and not remote \
            else _indexed_tasks(location, index, job)  # type: ignore[arg-type]
    except KeyError as e:
        raise InputDataError(f"{location}: {JOB_FILE if job is not None else INDEX_FILE} has no field {e}") \
            from None
    out.logs = _read_logs(location)
    return out
