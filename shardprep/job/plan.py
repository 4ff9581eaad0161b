"""The frozen plan: inputs -> tasks, written once to ``<output>/job.json``.

Every task reads this file and never re-derives the plan, so an array task started days later, on any
node, does exactly the work it was given.  The fingerprint covers inputs (with size and mtime), the task
assignment, the tokenizer and every content option; a second ``plan``/``submit`` into the same directory
must match it or is refused (``--overwrite`` starts over).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from shardprep import __version__
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.errors import InputDataError, PlanConflictError
from shardprep.storage.atomic import atomic_writer, write_json_atomic
from shardprep.inputs.discover import InputFile
from shardprep.inputs.readers import WorkItem
from shardprep.shard.format import FORMAT_VERSION, INDEX_FILE, JOB_FILE, TOKENIZER_FILE
from shardprep.tokenizer.load import ResolvedTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    inputs: list[InputFile]
    tasks: list[list[WorkItem]]
    tokenizer: ResolvedTokenizer
    options: TokenizeOptions
    plan_options: PlanOptions

    def body(self) -> dict:
        """The fingerprinted part of job.json."""
        return {
            "format_version": FORMAT_VERSION,
            "inputs": [i.to_dict() for i in self.inputs],
            "tasks": [[w.to_dict() for w in t] for t in self.tasks],
            "tokenizer": self.tokenizer.info.to_dict(),
            "options": self.options.content_dict(),
        }

    @property
    def fingerprint(self) -> str:
        body = self.body()
        body["tokenizer"] = {k: v for k, v in body["tokenizer"].items() if k != "source"}
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def to_job(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "created_by": f"shardprep {__version__}",
            "fingerprint": self.fingerprint,
            **{k: v for k, v in self.body().items() if k != "format_version"},
            "options": self.options.to_dict(),
            "plan_options": {"target_task_bytes": self.plan_options.target_task_bytes},
        }


# -- splitting ------------------------------------------------------------------------------------------
def _line_length(f) -> tuple[int, bool]:
    """Consume one line (in bounded pieces); return its length and whether it was blank."""
    n, blank = 0, True
    while True:
        piece = f.readline(1 << 20)
        n += len(piece)
        blank = blank and not piece.strip()
        if not piece or piece.endswith(b"\n"):
            return n, blank


def _aligned_boundary(path: str, offset: int, paragraph: bool) -> int:
    """First document boundary at or after ``offset``: the start of the next line (in paragraph mode,
    the line after the next blank line).  Reads only around the boundary, never the whole file."""
    if offset <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(offset - 1)
        pos = offset - 1 + _line_length(f)[0]   # finish the line that contains byte offset-1
        while paragraph:
            n, blank = _line_length(f)
            pos += n
            if n == 0 or blank:
                break
        return pos


def _split_text(idx: int, inp: InputFile, parts: int, paragraph: bool) -> list[WorkItem]:
    step = inp.size / parts
    cuts = sorted({_aligned_boundary(inp.path, round(k * step), paragraph) for k in range(1, parts)})
    bounds = [0] + [c for c in cuts if 0 < c < inp.size] + [inp.size]
    return [WorkItem(idx, s, e, "bytes", 1 if s == 0 else None) for s, e in zip(bounds, bounds[1:]) if e > s]


def _split_parquet(idx: int, inp: InputFile, parts: int) -> list[WorkItem]:
    """Row ranges on row-group boundaries, balanced by compressed bytes."""
    import pyarrow.parquet as pq

    md = pq.ParquetFile(inp.path).metadata
    groups = [(md.row_group(g).num_rows, md.row_group(g).total_byte_size) for g in range(md.num_row_groups)]
    total = sum(b for _, b in groups) or 1
    items, start, row, acc = [], 0, 0, 0
    for rows, nbytes in groups:
        row += rows
        acc += nbytes
        if acc >= total / parts * (len(items) + 1) and row < md.num_rows:
            items.append(WorkItem(idx, start, row, "rows", start + 1))
            start = row
    items.append(WorkItem(idx, start, md.num_rows, "rows", start + 1))
    return items


def _split_arrow(idx: int, inp: InputFile, parts: int, text_field: str) -> list[WorkItem]:
    """Row ranges balanced by the bytes of the text column (cuts may fall inside a record batch)."""
    from shardprep.inputs.arrow import split_rows

    return [WorkItem(idx, s, e, "rows", s + 1) for s, e in split_rows(inp.path, parts, text_field)]


def split_into_tasks(inputs: list[InputFile], popts: PlanOptions, opts: TokenizeOptions) -> list[list[WorkItem]]:
    """Assign work items to tasks.

    Default: one input file per task.  With ``target_task_bytes``: files larger than the target are split
    (text on line/paragraph boundaries, parquet on row groups, arrow on rows; compressed files cannot be
    split), and smaller files are packed together, in order, until a task reaches the target.
    """
    whole = lambda i, inp: WorkItem(i, 0, None, "rows" if inp.tabular else "bytes", 1)  # noqa: E731
    target = popts.target_task_bytes
    if target is None:
        return [[whole(i, inp)] for i, inp in enumerate(inputs)]
    tasks: list[list[WorkItem]] = []
    current: list[WorkItem] = []
    current_bytes = 0
    for i, inp in enumerate(inputs):
        parts = math.ceil(inp.size / target) if inp.size > target else 1
        if parts > 1 and (inp.splittable or inp.tabular):
            if current:
                tasks.append(current)
                current, current_bytes = [], 0
            if inp.format == "arrow":
                pieces = _split_arrow(i, inp, parts, opts.text_field)
            else:
                pieces = (_split_parquet(i, inp, parts) if inp.format == "parquet"
                          else _split_text(i, inp, parts, opts.txt_mode == "paragraph"))
            tasks.extend([p] for p in pieces)
            continue
        if current and current_bytes + inp.size > target:
            tasks.append(current)
            current, current_bytes = [], 0
        current.append(whole(i, inp))
        current_bytes += inp.size
    if current:
        tasks.append(current)
    return tasks


def make_plan(inputs: list[InputFile], tokenizer: ResolvedTokenizer, options: TokenizeOptions,
              plan_options: PlanOptions) -> Plan:
    return Plan(inputs, split_into_tasks(inputs, plan_options, options), tokenizer, options, plan_options)


# -- writing / conflicts ----------------------------------------------------------------------------------
def _differences(old: dict, new: dict) -> list[str]:
    diffs = []
    if [i["path"] for i in old.get("inputs", [])] != [i["path"] for i in new["inputs"]]:
        diffs.append("the input files differ")
    elif old.get("inputs") != new["inputs"]:
        changed = [n["path"] for o, n in zip(old["inputs"], new["inputs"]) if o != n]
        diffs.append(f"input(s) changed since planning (size/mtime): {', '.join(changed[:3])}")
    if old.get("tokenizer", {}).get("fingerprint") != new["tokenizer"]["fingerprint"]:
        diffs.append("the tokenizer differs")
    old_opts = old.get("options", {})
    changed = [k for k, v in new["options"].items() if k != "backend" and old_opts.get(k) != v]
    if changed:
        diffs.append(f"options differ: {', '.join(changed)}")
    if old.get("tasks") != new["tasks"] and not diffs:
        diffs.append("the task assignment differs (e.g. --target-task-bytes)")
    return diffs or ["the plan differs"]


# Everything shardprep writes into an output directory, as paths relative to it: --overwrite deletes these
# and nothing else.  A new kind of file written there must be added here (test_overwrite checks the files
# of a local and a Slurm run against it).
OWNED_DIRS = ("logs", "slurm", "slurm/submitit")
OWNED_FILES = re.compile("|".join((
    r"shard-\d{5,}\.(tar|json)",                        # shards and sidecars
    rf"{re.escape(JOB_FILE)}|{re.escape(INDEX_FILE)}|{re.escape(TOKENIZER_FILE)}",
    r"logs/task-\d{5,}\.log",                           # local executor / run-task logs
    r"logs/\d+_\d+\.out|logs/finalize-\d+\.out",         # sbatch array task and finalize logs
    r"slurm/jobs\.json|slurm/\d{3,}-(tokenize-\d+|finalize)\.sbatch",
    r"slurm/submitit/[^/]+_(submitted\.pkl|submission\.sh|result\.pkl|log\.out|log\.err)",
    r"slurm/submitit/\.submission_file_[^/]+\.sh",
    r"report\.html|report-[a-z0-9-]+\.png",                 # `shardprep report` (its default place)
)))
_TEMP = re.compile(r"(?P<dir>(?:[^/]+/)*)\.(?P<name>[^/]+)\.[^./]+\.\d+\.tmp")   # storage.atomic.temp_name_for


def written_by_shardprep(relative: str) -> bool:
    """Whether the file at ``relative`` (POSIX, inside an output directory) is one shardprep writes,
    including the temporary name of one (an interrupted atomic write)."""
    m = _TEMP.fullmatch(relative)
    if m:
        relative = m.group("dir") + m.group("name")
    return OWNED_FILES.fullmatch(relative) is not None


def _require_shardprep_plan(job_path: Path) -> None:
    """--overwrite starts over only a shardprep plan: a job.json another tool wrote is not ours to delete."""
    try:
        old = orjson.loads(job_path.read_bytes())
    except FileNotFoundError:
        return
    except orjson.JSONDecodeError:
        old = None
    ours = isinstance(old, dict) and (str(old.get("created_by", "")).startswith("shardprep")
                                      or {"fingerprint", "inputs", "tasks"} <= old.keys())
    if not ours:
        raise PlanConflictError(f"{job_path} is not a shardprep plan: --overwrite deletes only files shardprep "
                                "wrote, and will not delete it",
                                hint="move or remove it yourself, or use a new --output")


def _sort_output(output: Path) -> tuple[list[Path], list[str]]:
    """(files shardprep wrote, what else is there) in ``output``; only shardprep's own subdirectories
    are entered, and the output lock (held by this process) is neither."""
    from shardprep.storage.lock import LOCK_FILE

    ours: list[Path] = []
    kept: list[str] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        with os.scandir(output / rel_dir) as it:
            for entry in sorted(it, key=lambda e: e.name):
                rel = rel_dir + entry.name
                if rel.startswith(LOCK_FILE):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if rel in OWNED_DIRS:
                        pending.append(rel + "/")
                    else:
                        kept.append(rel + "/")
                elif written_by_shardprep(rel):
                    ours.append(output / rel)
                else:
                    kept.append(rel)
    return ours, kept


def clear_output(output: Path) -> list[str]:
    """Remove what shardprep wrote into ``output`` (shards, sidecars, plan, index, logs, Slurm records);
    keep everything else, and return what was kept (relative paths, directories with a trailing /).

    Why keep: a user's notes or scripts in the output directory (or in its logs/) are theirs; only the
    names shardprep writes (:data:`OWNED_FILES`) are deleted.  A job.json that is not a shardprep plan is
    refused (PlanConflictError, exit 4) before anything is deleted.
    """
    _require_shardprep_plan(output / JOB_FILE)
    ours, kept = _sort_output(output)
    for p in ours:
        p.unlink(missing_ok=True)
    for d in sorted(OWNED_DIRS, reverse=True):      # subdirectories first
        with contextlib.suppress(OSError):          # not there, or holds a kept file
            (output / d).rmdir()
    if kept:
        log.warning("--overwrite kept %d entr%s shardprep did not write in %s: %s", len(kept),
                    "y" if len(kept) == 1 else "ies", output, ", ".join(kept[:10]) + (" ..." if len(kept) > 10 else ""))
    return kept


def write_plan(output: Path, plan: Plan, *, overwrite: bool = False, extra: dict | None = None) -> dict:
    """Freeze ``plan`` into ``output`` (creating it), or accept an identical existing plan.

    ``extra`` adds unfingerprinted records (e.g. the Lustre layout applied).  Returns the job dict.
    Raises PlanConflictError when a different plan is already there.
    """
    output.mkdir(parents=True, exist_ok=True)
    job = {**plan.to_job(), **(extra or {})}
    job_path = output / JOB_FILE
    if job_path.exists():
        try:
            old = orjson.loads(job_path.read_bytes())
        except orjson.JSONDecodeError:
            old = {}
        if old.get("fingerprint") == job["fingerprint"]:
            log.info("%s already holds this plan (%s); finished tasks will be skipped", output, job["fingerprint"][:12])
            return old
        if not overwrite:
            raise PlanConflictError(
                f"{output} already holds a different plan: {'; '.join(_differences(old, job))}",
                hint="use a new --output, `submit --resume` to continue the existing plan, or --overwrite to start over",
            )
        log.warning("--overwrite: removing the previous plan and its shards from %s", output)
        clear_output(output)
    with atomic_writer(output / TOKENIZER_FILE) as f:
        f.write(plan.tokenizer.json.encode("utf-8"))
    write_json_atomic(job_path, job)
    return job


def require_documents_possible(inputs: list[InputFile]) -> None:
    """A job whose inputs are all empty files can only produce zero documents: refuse it up front."""
    if all(i.size == 0 for i in inputs):
        raise InputDataError(f"all {len(inputs)} input file(s) are empty: nothing to tokenize")
