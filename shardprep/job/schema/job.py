"""``job.json`` (the frozen plan's header) and one task's record in ``plan/tasks.jsonl``.

The record types inside are the ones the planner already uses, so there is one type per concept:
``InputFile`` (an input as stored: path, size, mtime, format...), ``WorkItem`` (a piece of one input),
``TokenizerInfo`` (the tokenizer record) and ``TokenizeOptions``/``PlanOptions`` (options as stored).
This module adds what the files need: parsing with errors naming the file and field, and serialising
back in a fixed key order (docs/format.md).

Since plan format 2 (issue 16) job.json holds only what every task needs plus a summary for people;
each task's work items are one line of ``plan/tasks.jsonl`` (``encode_task``), found and checked
through ``plan/tasks.idx`` (``job.plan_files``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import orjson

from shardprep import __version__
from shardprep.errors import RecordError
from shardprep.inputs.discover import COMPRESSIONS, FORMATS, TABULAR, InputFile
from shardprep.inputs.readers import WorkItem
from shardprep.inputs.remote import is_input_url
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.schema.sizing import RULES, Sizing
from shardprep.records import OMIT_NONE, Fields, Record, dump, json_path, load_json, path_from_json, printable, record
from shardprep.shard.format import PLAN_FORMAT_VERSION, PLAN_RECORDS_FILE, PLAN_TABLE_FILE
from shardprep.shard.provenance import PlanCheck
from shardprep.shard.sidecar import SidecarInput
from shardprep.storage.locations import StorageOptions
from shardprep.storage.s3.client import ClientOptions
from shardprep.tokenizer.load import TokenizerInfo

CREATED_BY = f"shardprep {__version__}"

# The names the format documentation uses for the stored records.
InputRecord = InputFile
TokenizerRecord = TokenizerInfo

_OLD_PLAN_HINT = ("format 1 plans keep every input and task inline in job.json (before issue 16): finish the "
                  "job with the shardprep release that planned it, or re-plan into a new output directory")


@dataclass(frozen=True)
class TaskItem:
    """One work item of a task with the input it reads (what a task streams, and its sidecar lists)."""

    input: InputFile
    work: WorkItem

    def describe(self) -> str:
        return f"{self.input.path}[{self.work.start}:{self.work.end}]"

    def sidecar_input(self) -> SidecarInput:
        """The item as a sidecar's ``inputs`` entry: the path, and the job's input number (what the sidecar's
        ``origins`` name)."""
        w = self.work
        return SidecarInput(printable(self.input.path), w.start, w.end, w.unit, w.first_line, w.input)

    @property
    def nbytes(self) -> int:
        """Input bytes this item covers (a row range counts its whole file: rows have no byte size)."""
        if self.work.unit != "bytes":
            return self.input.size
        end = self.input.size if self.work.end is None else self.work.end
        return max(0, end - self.work.start)


@dataclass(frozen=True)
class Task:
    """A task's work: its number in the plan and its items, in order."""

    index: int
    items: tuple[TaskItem, ...]

    @property
    def input_bytes(self) -> int:
        return sum(i.nbytes for i in self.items)


# -- one task's line in plan/tasks.jsonl ----------------------------------------------------------------
# An item is a JSON array [input, path, size, mtime_ns, format, compression, rows, start, end, first_line,
# identity] whose trailing elements are dropped while they equal these defaults; ``path`` is relative to the
# plan's root directory (job.json ``plan.root``) unless it is absolute or a URL (a remote object, whose
# ``identity`` comes last: a plan of files has none, and its records are what they were before it existed);
# ``unit`` is implied by the format.
_ITEM_KEYS = ("input", "path", "size", "mtime_ns", "format", "compression", "rows", "start", "end", "first_line",
              "identity")
_TAIL_DEFAULTS = (None, None, 0, None, 1, None)
_FORMATS = tuple(sorted(set(FORMATS.values())))
_COMPRESSIONS = tuple(sorted(set(COMPRESSIONS.values())))


def unit_for(inp: InputFile) -> str:
    return "rows" if inp.format in TABULAR else "bytes"


def _prefix(root: str) -> str:
    return root if root.endswith("/") else root + "/"


def _is_default(value: Any, default: int | None) -> bool:
    return value is None if default is None else (type(value) is int and value == default)


def encode_task(items: Sequence[TaskItem], root: str) -> bytes:
    """The task's line (ending in a newline): compact, and stable for the same plan."""
    prefix = _prefix(root)
    rows = []
    for it in items:
        inp, w = it.input, it.work
        if w.unit != unit_for(inp):
            raise ValueError(f"work item unit {w.unit!r} does not fit a {inp.format} input")
        path = inp.path[len(prefix):] if inp.path.startswith(prefix) else inp.path
        row = [w.input, path, inp.size, inp.mtime_ns, inp.format, inp.compression, inp.rows, w.start, w.end,
               w.first_line, inp.identity]
        while len(row) > 5 and _is_default(row[-1], _TAIL_DEFAULTS[len(row) - 6]):
            row.pop()
        rows.append(row)
    try:
        return orjson.dumps(rows) + b"\n"
    except TypeError:       # a path that is not valid UTF-8: its exact record (records.json_path)
        return orjson.dumps([[r[0], json_path(str(r[1])), *r[2:]] for r in rows]) + b"\n"


def decode_task(line: bytes, index: int, root: str, where: str | Path) -> Task:
    """Parse task ``index``'s line; errors name the file, the task and the field."""
    try:
        rows = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"{where}: task {index}: not valid JSON ({e})") from None
    if not isinstance(rows, list) or not rows:
        raise RecordError(f"{where}: task {index}: expected a non-empty list of work items")
    prefix = _prefix(root)
    items = []
    for i, row in enumerate(rows):
        name = f"tasks[{index}][{i}]"
        if not isinstance(row, list) or not 5 <= len(row) <= len(_ITEM_KEYS):
            raise RecordError(f"{where}: {name}: expected a list of 5 to {len(_ITEM_KEYS)} values")
        d = dict(zip(_ITEM_KEYS, row + list(_TAIL_DEFAULTS[len(row) - 5:])))
        d["path"] = path_from_json(d["path"])
        f = Fields(d, str(where), name)
        f.str("format", choices=_FORMATS)
        f.str("compression", optional=True, choices=_COMPRESSIONS)
        if isinstance(d["path"], str) and not d["path"].startswith("/") and not is_input_url(d["path"]):
            d["path"] = prefix + d["path"]
        inp = record(InputFile, f)
        d["unit"] = unit_for(inp)
        items.append(TaskItem(inp, record(WorkItem, f)))
    return Task(index, tuple(items))


# -- job.json -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanSummary:
    """What a person reads in job.json about the plan's size (the records themselves are in plan/)."""

    inputs: int
    input_bytes: int
    tasks: int


@dataclass(frozen=True)
class PlanFiles:
    """Where the per-task records are, and the digests that chain them to job.json."""

    records: str          # plan/tasks.jsonl
    table: str            # plan/tasks.idx
    root: str             # directory every relative input path in the records is under
    table_sha256: str     # sha256 of the table's header, end and block digests (job.plan_files)
    inputs_sha256: str    # sha256 of the inputs part of the fingerprint body (tells changed inputs apart)
    paths_sha256: str     # sha256 of the input paths, one per line (tells other input files apart)


def _storage(f: Fields) -> StorageOptions:
    return StorageOptions(s3=record(ClientOptions, f.obj_at("s3"), defaults=True))


def _storage_record(storage: StorageOptions) -> dict[str, Any]:
    """job.json's ``storage``: the S3 connection options, the one store a plan's remote inputs name today."""
    return {"s3": dump(storage.s3)}


def _sizing(f: Fields) -> Sizing:
    f.str("rule", choices=RULES)
    return record(Sizing, f)


def _sizing_of_old(f: Fields) -> Sizing:
    """The sizing of a plan written before job.json kept one: its ``plan_options`` number."""
    target = record(PlanOptions, f, defaults=True).target_task_bytes
    if target is None:
        return Sizing("one-file-per-task", None, "planned before the sizing record: one input file per task")
    return Sizing("target", target, "planned before the sizing record")


# -- the seal: job.json's header, tamper-evident ----------------------------------------------------------
# The fingerprint covers inputs, tasks, tokenizer and options, but it is computed while planning and never
# again (issue 16: a task must not re-read the whole plan), so an edited job.json header would be obeyed
# under the unchanged fingerprint (issue 23).  The planner records a digest of each section that decides
# what tasks write or what finalize publishes; every reader of job.json recomputes them (a few KB hashed,
# whatever the job's size) and refuses a header that no longer matches, naming the sections.
# Not sealed: ``created_by`` (the release string), ``lustre`` (what was done to the directory, for people),
# ``backend_check`` (library versions: a task trusts it only when they match its own, and still checks
# its own first batch) and ``storage`` (how to reach remote inputs: the bytes read are held to each object's
# planned identity whatever the endpoint).
_REPLAN_HINT = ("job.json is written once, by `plan`/`submit`: re-plan with the options you want (a new --output, "
                "or --overwrite to start over)")
SEALED = ("format_version", "fingerprint", "summary", "tokenizer", "options", "plan_options", "plan", "sizing")
_SEAL_HEX = 16      # 64 bits of sha256 per section: an accidental edit is never missed


def seal_of(header: dict[str, Any]) -> dict[str, str]:
    """The digest of each sealed section present in ``header`` (canonical JSON: sorted keys, compact)."""
    return {k: hashlib.sha256(orjson.dumps(header[k], option=orjson.OPT_SORT_KEYS)).hexdigest()[:_SEAL_HEX]
            for k in SEALED if k in header}


# Plan format 3 says "written by a release that seals": its seal is required, so deleting it is refused like
# any other edit (issue 31).  Format 2 was written both before and after the seal existed: a format-2 plan
# without one reads as before (the digest chain and finalize's task count still hold it to plan/).
READABLE_PLAN_VERSIONS = (2, PLAN_FORMAT_VERSION)
SEALED_SINCE = 3


def _check_seal(f: Fields, version: int) -> dict[str, str] | None:
    """job.json's ``seal`` when its sections still match it; None in format-2 plans written before it existed."""
    if not f.has("seal"):
        if version >= SEALED_SINCE:
            raise RecordError(f"{f.where}: 'seal' is missing, but a plan of format {version} is always sealed: a "
                              f"hand-edited plan is not obeyed", hint=_REPLAN_HINT)
        return None
    seal = f.dict("seal")
    now = seal_of(f.obj)
    changed = [k for k in SEALED if seal.get(k) != now.get(k)]
    if changed:
        raise RecordError(f"{f.where}: {', '.join(repr(k) for k in changed)} changed since planning (no longer "
                          f"what job.json's 'seal' records): a hand-edited plan is not obeyed", hint=_REPLAN_HINT)
    return {k: str(v) for k, v in seal.items()}


@dataclass(frozen=True)
class Job(Record):
    """job.json: fingerprint, summary, tokenizer, options, and where the per-task records are."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("format_version", "created_by", "fingerprint", "summary", "tokenizer",
                                            "options", "plan", "lustre", "sizing", "backend_check", "storage", "seal")

    fingerprint: str
    summary: PlanSummary
    tokenizer: TokenizerInfo
    options: TokenizeOptions
    sizing: Sizing                            # the task size, decided once at plan time, and why (job.sizing)
    plan: PlanFiles
    # the Lustre layout applied to the output (not fingerprinted)
    lustre: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # the backend check's hard cases, run once at plan time (tokenizer.plan_check; not fingerprinted)
    backend_check: PlanCheck | None = field(default=None, metadata=OMIT_NONE)
    # how a task reaches the remote inputs (issue 22: the S3 connection options, no credentials); None: none
    storage: StorageOptions | None = field(default=None, metadata={**OMIT_NONE, "encode": _storage_record})
    format_version: int = PLAN_FORMAT_VERSION
    created_by: str = CREATED_BY
    # digests of the SEALED sections (None: planned before the seal)
    seal: dict[str, str] | None = field(default=None, metadata=OMIT_NONE)

    @property
    def n_tasks(self) -> int:
        return self.summary.tasks

    @property
    def target_task_bytes(self) -> int | None:
        """The tasks' input bytes as decided (None: one file per task)."""
        return self.sizing.target_task_bytes

    def sealed(self) -> "Job":
        """This header with its seal (what the planner writes)."""
        return dataclasses.replace(self, seal=seal_of(dataclasses.replace(self, seal=None).to_dict()))

    def to_dict(self) -> dict[str, Any]:
        """``dump`` in ``JSON_KEYS`` order, with ``plan_options`` after ``options``: the sizing's number again,
        as plans have held it since before ``sizing`` existed (old readers)."""
        items = list(dump(self).items())
        at = [k for k, _ in items].index("options") + 1
        plan_options = {"target_task_bytes": self.sizing.target_task_bytes}
        return dict([*items[:at], ("plan_options", plan_options), *items[at:]])

    @classmethod
    def parse(cls, data: bytes, where: str | Path) -> "Job":
        f = load_json(data, str(where), "job plan")
        version = f.version("format_version", READABLE_PLAN_VERSIONS, hint=_OLD_PLAN_HINT)
        p = f.obj_at("plan")
        p.str("records", choices=(PLAN_RECORDS_FILE,))
        p.str("table", choices=(PLAN_TABLE_FILE,))
        job = cls(
            fingerprint=f.str("fingerprint"),
            summary=record(PlanSummary, f.obj_at("summary")),
            tokenizer=record(TokenizerInfo, f.obj_at("tokenizer")),
            options=record(TokenizeOptions, f.obj_at("options"), defaults=True),
            sizing=_sizing(f.obj_at("sizing")) if f.has("sizing") else _sizing_of_old(f.obj_at("plan_options")),
            plan=record(PlanFiles, p),
            lustre=f.dict("lustre") if f.has("lustre") else None,
            backend_check=PlanCheck.parse(f.obj_at("backend_check")) if f.has("backend_check") else None,
            storage=_storage(f.obj_at("storage")) if f.has("storage") else None,
            format_version=version,
            created_by=f.str("created_by"),
        )
        # after the fields: a malformed one is named exactly; a well-formed edit is caught here
        return dataclasses.replace(job, seal=_check_seal(f, version))
