"""The frozen plan: inputs -> tasks, written once to ``<output>/job.json`` and ``<output>/plan/``.

Every task reads it and never re-derives the plan, so an array task started days later, on any node,
does exactly the work it was given.  The fingerprint covers inputs (with size and mtime), the task
assignment, the tokenizer and every content option; a second ``plan``/``submit`` into the same directory
must match it or is refused (``--overwrite`` starts over).

Planning streams (issue 16): tasks are generated one at a time, written to ``plan/tasks.jsonl`` with
their offsets and digests (``job.plan_files``) and hashed into the fingerprint as they go, so memory
holds the discovered inputs and 24 bytes per task, never the task list itself.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import orjson

from shardprep.errors import InputDataError, PlanConflictError, RecordError
from shardprep.inputs.discover import InputFile, is_shardprep_plan
from shardprep.inputs.readers import WorkItem
from shardprep.job.cutting import iter_balanced, iter_tasks
from shardprep.job.fingerprint import BATCH, Fingerprint
from shardprep.job.options import TokenizeOptions
from shardprep.job.plan_files import TaskTable, TaskTableWriter
from shardprep.job.schema import Job, PlanFiles, PlanSummary, TaskItem
from shardprep.job.sizing import Sizing, balanced_tasks
from shardprep.records import is_json_text
from shardprep.shard.format import (
    CHAT_TEMPLATE_FILE,
    INDEX_FILE,
    JOB_FILE,
    PLAN_DIR,
    PLAN_RECORDS_FILE,
    PLAN_TABLE_FILE,
    REPAIR_DIR,
    TOKENIZER_FILE,
)
from shardprep.shard.provenance import PlanCheck
from shardprep.storage.atomic import atomic_writer, fsync_dir, temp_name_for, write_json_atomic
from shardprep.storage.locations import StorageOptions, is_url
from shardprep.storage.nofollow import refuse_link
from shardprep.tokenizer.load import ResolvedTokenizer

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.chat.template import ChatTemplate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What to freeze: the inputs, the tokenizer and the options; tasks are generated on demand."""

    inputs: list[InputFile]
    tokenizer: ResolvedTokenizer
    options: TokenizeOptions
    sizing: Sizing                       # the task size decided once (job.sizing), and why (job.json ``sizing``)
    backend_check: PlanCheck | None = None    # tokenizer.plan_check's record, stored in job.json
    storage: StorageOptions | None = None     # how tasks reach remote inputs (job.json ``storage``)
    chat_template: ChatTemplate | None = None  # a chat job's template, frozen beside the tokenizer

    def iter_tasks(self) -> Iterator[list[WorkItem]]:
        n = balanced_tasks(self.sizing, sum(i.size for i in self.inputs))
        if n is not None:
            return iter_balanced(self.inputs, n, self.options)
        return iter_tasks(self.inputs, self.sizing.target_task_bytes, self.options)


def recorded_storage(inputs: list[InputFile], storage: StorageOptions | None) -> StorageOptions | None:
    """The ``storage`` a plan records: the options in force when an input is remote; a plan of files has
    none."""
    return (storage or StorageOptions()) if any(is_url(i.path) for i in inputs) else None


# -- writing / conflicts ----------------------------------------------------------------------------------
def _common_root(inputs: list[InputFile]) -> str:
    """The deepest directory holding every input file (the common prefix of the smallest and largest path;
    remote objects are recorded by their whole URL)."""
    paths = [i.path for i in inputs if i.path.startswith("/")]
    if not paths:
        return "/"
    common = os.path.commonprefix([min(paths), max(paths)])
    root = common[:common.rfind("/")] or "/"
    while not is_json_text(root):       # job.json holds it as text: stop above a name that is not UTF-8
        root = os.path.dirname(root)
    return root


def _write_records(plan: Plan, staging: Path, lustre: dict[str, Any] | None) -> Job:
    """Stream every task into ``staging`` (records + table) and return the job header that describes it."""
    root = _common_root(plan.inputs)
    fingerprint = Fingerprint(plan.inputs, plan.options, plan.tokenizer.info)
    writer = TaskTableWriter(staging, root)
    inputs = plan.inputs
    try:
        tasks = plan.iter_tasks()
        while batch := list(itertools.islice(tasks, BATCH)):
            fingerprint.add(batch)
            for items in batch:
                writer.add([TaskItem(inputs[w.input], w) for w in items])
        table_sha256 = writer.close()
    except BaseException:
        writer.abort()
        raise
    summary = PlanSummary(len(plan.inputs), sum(i.size for i in plan.inputs), writer.n_tasks)
    files = PlanFiles(PLAN_RECORDS_FILE, PLAN_TABLE_FILE, root, table_sha256, fingerprint.inputs_sha256,
                      fingerprint.paths_sha256)
    return Job(fingerprint.hexdigest(), summary, plan.tokenizer.info, plan.options, plan.sizing, files, lustre,
               backend_check=plan.backend_check, storage=plan.storage).sealed()


def _changed_inputs(output: Path, old: Job, plan: Plan) -> list[str]:
    """Paths whose size or mtime differ between the old plan's records and the new inputs (rare path:
    reads the old records once)."""
    new = {i.path: i for i in plan.inputs}
    changed: dict[str, None] = {}
    try:
        with TaskTable(output, old) as table:
            for task in table:
                changed.update((it.input.path, None) for it in task.items if new.get(it.input.path) != it.input)
                if len(changed) >= 3:
                    break
    except RecordError:
        return []
    return list(changed)


def _differences(output: Path, old: Job, new: Job, plan: Plan) -> list[str]:
    diffs = []
    if old.plan.paths_sha256 != new.plan.paths_sha256:
        diffs.append(f"the input files differ ({old.summary.inputs} before, {new.summary.inputs} now)")
    elif old.plan.inputs_sha256 != new.plan.inputs_sha256:
        changed = _changed_inputs(output, old, plan)
        diffs.append("input(s) changed since planning (size/mtime)" + (f": {', '.join(changed)}" if changed else ""))
    if old.tokenizer.fingerprint != new.tokenizer.fingerprint:
        diffs.append("the tokenizer differs")
    old_opts, new_opts = old.options.content_dict(), new.options.content_dict()
    changed_opts = [k for k, v in new_opts.items() if old_opts.get(k) != v]
    if changed_opts:
        diffs.append(f"options differ: {', '.join(changed_opts)}")
    if not diffs:
        diffs.append("the task assignment differs (e.g. --target-task-bytes)")
    return diffs


# Everything shardprep writes into an output directory, as paths relative to it: --overwrite deletes these
# and nothing else.  A new kind of file written there must be added here (test_overwrite checks the files
# of a local and a Slurm run against it).
OWNED_DIRS = ("logs", "slurm", "slurm/submitit", PLAN_DIR)
OWNED_FILES = re.compile("|".join((
    r"shard-\d{5,}\.(tar|json)",                        # shards and sidecars
    rf"{re.escape(JOB_FILE)}|{re.escape(INDEX_FILE)}|{re.escape(TOKENIZER_FILE)}|{re.escape(CHAT_TEMPLATE_FILE)}",
    rf"{re.escape(PLAN_RECORDS_FILE)}|{re.escape(PLAN_TABLE_FILE)}",   # the plan's per-task records
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
    if not is_shardprep_plan(old):
        raise PlanConflictError(f"{job_path} is not a shardprep plan: --overwrite deletes only files shardprep "
                                "wrote, and will not delete it",
                                hint="move or remove it yourself, or use a new --output")


def _sort_output(output: Path) -> tuple[list[Path], list[Path], list[str]]:
    """(files shardprep wrote, planners' staging directories, what else is there) in ``output``; only
    shardprep's own subdirectories are entered, and the output lock (held by this process) is neither."""
    from shardprep.storage.lock import LOCK_FILE

    ours: list[Path] = []
    staging: list[Path] = []
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
                    elif (m := _TEMP.fullmatch(rel)) and m.group("dir") + m.group("name") in (PLAN_DIR, REPAIR_DIR):
                        staging.append(output / rel)      # .plan.<host>.<pid>.tmp/ (write_plan), .repair...
                    else:
                        kept.append(rel + "/")
                elif written_by_shardprep(rel):
                    ours.append(output / rel)
                else:
                    kept.append(rel)
    return ours, staging, kept


def clear_output(output: Path, *, keep: Path | None = None) -> list[str]:
    """Remove what shardprep wrote into ``output`` (shards, sidecars, plan, index, logs, Slurm records);
    keep everything else, and return what was kept (relative paths, directories with a trailing /).

    Why keep: a user's notes or scripts in the output directory (or in its logs/) are theirs; only the
    names shardprep writes (:data:`OWNED_FILES`) are deleted.  A job.json that is not a shardprep plan is
    refused (PlanConflictError, exit 4) before anything is deleted.  ``keep``: the caller's own plan
    staging directory.
    """
    _require_shardprep_plan(output / JOB_FILE)
    ours, staging, kept = _sort_output(output)
    for p in ours:
        p.unlink(missing_ok=True)
    for d in staging:                               # other (dead) planners'; ``keep`` is the caller's own
        if d != keep:
            shutil.rmtree(d, ignore_errors=True)
    for sub in sorted(OWNED_DIRS, reverse=True):    # subdirectories first
        with contextlib.suppress(OSError):          # not there, or holds a kept file
            (output / sub).rmdir()
    if kept:
        log.warning("--overwrite kept %d entr%s shardprep did not write in %s: %s", len(kept),
                    "y" if len(kept) == 1 else "ies", output, ", ".join(kept[:10]) + (" ..." if len(kept) > 10 else ""))
    return kept


def existing_plan(job_path: Path) -> Job | str | None:
    """The plan already in the output directory; None when there is none, why not when it cannot be read."""
    try:
        return Job.parse(job_path.read_bytes(), job_path)
    except FileNotFoundError:
        return None
    except RecordError as e:
        return f"its {JOB_FILE} cannot be read ({e})"


def _commit(output: Path, staging: Path, plan: Plan, job: Job) -> None:
    """Move the staged records into place, then tokenizer.json, then job.json (which names them) last."""
    target = output / PLAN_DIR
    refuse_link(target)     # a planted link is neither emptied nor renamed onto (storage/nofollow.py)
    if target.exists():     # no job.json names it (a run that died between the two renames): stale
        shutil.rmtree(target)
    os.replace(staging, target)
    fsync_dir(output)
    with atomic_writer(output / TOKENIZER_FILE) as f:
        f.write(plan.tokenizer.json.encode("utf-8"))
    if plan.chat_template is not None:
        from shardprep.job.chat_plan import freeze_template

        freeze_template(output, plan.chat_template)
    write_json_atomic(output / JOB_FILE, job.to_dict())


def write_plan(output: Path, plan: Plan, *, previous: Job | str | None, overwrite: bool = False,
               lustre: dict[str, Any] | None = None) -> Job:
    """Freeze ``plan`` into ``output`` (creating it), or accept an identical existing plan.

    ``previous`` is the plan already there (``existing_plan``, read once by the caller; None: none); ``lustre``
    records the Lustre layout applied (not fingerprinted).  Returns the job as stored.
    Raises PlanConflictError when a different plan is already there.  The records are written to a
    hidden staging directory first (the fingerprint is known only once every task was generated).
    """
    output.mkdir(parents=True, exist_ok=True)
    staging = temp_name_for(output / PLAN_DIR)
    try:
        job = _write_records(plan, staging, lustre)
        if isinstance(previous, Job) and previous.fingerprint == job.fingerprint:
            log.info("%s already holds this plan (%s); finished tasks will be skipped", output, job.fingerprint[:12])
            return previous
        if previous is not None and not overwrite:
            why = _differences(output, previous, job, plan) if isinstance(previous, Job) else [previous]
            raise PlanConflictError(
                f"{output} already holds a different plan: {'; '.join(why)}",
                hint="use a new --output, `submit --resume` to continue the existing plan, or --overwrite to start over",
            )
        if previous is not None:
            log.warning("--overwrite: removing the previous plan and its shards from %s", output)
            clear_output(output, keep=staging)
        _commit(output, staging, plan, job)
        return job
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def require_documents_possible(inputs: list[InputFile]) -> None:
    """A job whose inputs are all empty files can only produce zero documents: refuse it up front."""
    if all(i.size == 0 for i in inputs):
        raise InputDataError(f"all {len(inputs)} input file(s) are empty: nothing to tokenize")
