"""``repair``: rebuild shards that ``verify`` finds bad, byte for byte, from the frozen plan.

A finalized job's index.json records every shard's sha256, and the plan is deterministic (the same plan
gives the same bytes), so a shard damaged after the fact (a flipped bit, a truncated copy, a deleted file)
can be rebuilt instead of re-running the job.  The rebuilt shard replaces the bad one only when its sha256
is the one index.json records: index.json itself does not change, so the loader's order (which depends only
on index.json and the shards) is what it was.  Only an index.json whose entries are what is broken (one
removed, repeated or renamed, totals or tokenizer not those of the plan: ``IndexContractError``) is
rewritten, with what ``finalize`` writes from the frozen plan and the checked sidecars, once every shard
verifies against it.  A sidecar is kept only when it agrees with index.json and the rebuilt chunk table;
otherwise the rebuilt one replaces it.

Each task runs unchanged (``job.task.run_task``, with its own checks: the inputs' size and mtime against
the plan, the frozen tokenizer) in a hidden scratch directory beside the shards, which links to the
plan's job.json, tokenizer.json and plan/; nothing under a final name is touched until the rebuilt bytes
are proven equal.  The output directory's lock is held throughout (one writer per directory), so a scratch
directory found under it was left by a repair that died: it is removed first.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from shardprep.errors import ConfigError, IncompleteError, RecordError
from shardprep.job.finalize import build_index
from shardprep.job.schema import Job
from shardprep.job.state import load_job
from shardprep.job.task import run_task
from shardprep.job.verify import Output, check_shard, open_output
from shardprep.shard.format import (
    CHAT_TEMPLATE_FILE,
    INDEX_FILE,
    JOB_FILE,
    PLAN_DIR,
    REPAIR_DIR,
    SHARD_RE,
    TOKENIZER_FILE,
    has_origins,
    shard_name,
)
from shardprep.shard.index import Index, IndexContractError, IndexShard, sidecar_mismatches
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.atomic import fsync_dir, is_temp_name, temp_name_for, write_json_atomic
from shardprep.storage.locations import is_url
from shardprep.storage.lock import output_lock
from shardprep.storage.nofollow import fresh_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repaired:
    shard: str                   # a shard's name, or index.json
    problems: list[str]          # what verify found
    sidecar_replaced: bool       # the sidecar was bad too, and was rebuilt with the shard
    result: str = "sha256 matches index.json"


def _bad_entries(out: Output, only: int | None) -> list[tuple[IndexShard, list[str]]]:
    entries = list(out.index.shards)
    if only is not None:
        entries = [e for e in entries if e.name == shard_name(only)]
        if not entries:
            raise ConfigError(f"--shard {only}: {out.location(INDEX_FILE)} lists no {shard_name(only)} "
                              f"(it lists {len(out.index.shards)} shards)")
    checks = [(e, check_shard(out, e).problems) for e in entries]
    return [(e, problems) for e, problems in checks if problems]


def _same_plan(output: Path, index: Index, job: Job) -> None:
    if index.plan_fingerprint != job.fingerprint:
        raise IncompleteError(f"{output / INDEX_FILE} was written for plan {index.plan_fingerprint[:12]}, "
                              f"{output / JOB_FILE} holds plan {job.fingerprint[:12]}: nothing to rebuild from",
                              hint=f"rewrite the index with `shardprep finalize {output}` if the shards are "
                                   f"this plan's")


def _open(output: Path, job: Job) -> tuple[Output, Repaired | None]:
    """The output with its index.json as checked, or, when its entries are what is broken, with the index
    ``finalize`` builds from the frozen plan and the checked sidecars (written once every shard verifies)."""
    try:
        out = open_output(output)
    except IndexContractError as e:
        _same_plan(output, Index.parse((output / INDEX_FILE).read_bytes(), output / INDEX_FILE, check=False), job)
        try:
            index = build_index(output)
        except IncompleteError as why:
            raise IncompleteError(f"{e.args[0]}; it cannot be rebuilt from the plan: {why.args[0]}",
                                  hint=why.hint) from None
        log.info("rebuilding %s (%s)", output / INDEX_FILE, "; ".join(e.problems))
        return open_output(output, index=index), Repaired(INDEX_FILE, e.problems, False,
                                                          "rebuilt from the plan and the checked sidecars")
    _same_plan(output, out.index, job)
    return out, None


def _clear_dead_scratch(output: Path) -> None:
    """Remove the scratch directories of repairs that died (killed, node lost): called under the output's
    lock, which every repair holds while its scratch exists, so none of them belongs to a live one.  A
    link at such a name is not ours to follow or remove (``storage.nofollow``)."""
    prefix = f".{REPAIR_DIR}."
    with os.scandir(output) as entries:
        dead = [e.path for e in entries if e.name.startswith(prefix) and is_temp_name(e.name)
                and e.is_dir(follow_symlinks=False)]
    for path in dead:
        log.info("removing %s, left by a repair that did not finish", path)
        shutil.rmtree(path, ignore_errors=True)


def _scratch(output: Path) -> Path:
    """A hidden directory where tasks run as in ``output`` (links to its plan), writing only there."""
    scratch = fresh_dir(temp_name_for(output / REPAIR_DIR))     # a planted link there: refused (exit 4)
    for name in (JOB_FILE, TOKENIZER_FILE, PLAN_DIR, CHAT_TEMPLATE_FILE):
        if name != CHAT_TEMPLATE_FILE or (output / name).exists():      # a chat job's frozen template
            os.symlink(os.path.abspath(output / name), scratch / name)
    return scratch


def _sidecar_ok(output: Path, index: Index, entry: IndexShard, rebuilt: Sidecar) -> bool:
    """Keep the sidecar there (its stats are the original run's) only when it says everything the rebuilt
    one says that anything checks: this plan, index.json's fields and totals, the same chunk table."""
    try:
        sidecar = Sidecar.parse((output / entry.sidecar).read_bytes(), output / entry.sidecar)
    except (OSError, RecordError):
        return False
    return (sidecar.plan_fingerprint == rebuilt.plan_fingerprint and sidecar.chunks == rebuilt.chunks
            and (sidecar.origins_record is None or sidecar.origins_record == rebuilt.origins_record)
            and not sidecar_mismatches(index, entry, sidecar))


def _as_published(scratch: Path, index: Index, entry: IndexShard, rebuilt: Sidecar) -> None:
    """The rebuilt sidecar in the format index.json publishes: a job finalized before format 3 keeps its
    version (the loader holds every sidecar to index.json's), without the origins it cannot declare."""
    if rebuilt.format_version != index.format_version and not has_origins(index.format_version):
        old = replace(rebuilt, format_version=index.format_version, origins_record=None)
        write_json_atomic(scratch / entry.sidecar, old.to_dict())


def _rebuild(output: Path, scratch: Path, index: Index, entry: IndexShard) -> bool:
    """Rebuild one shard in ``scratch`` and move it into place if, and only if, its sha256 is index.json's;
    True when the sidecar was replaced too."""
    m = SHARD_RE.match(entry.name)
    if m is None:
        raise IncompleteError(f"{entry.name}: not a shard name shardprep writes; cannot tell which task wrote it")
    result = run_task(scratch, int(m.group(1)))
    got = result.sidecar
    if (got.sha256, got.bytes) != (entry.sha256, entry.bytes):
        raise IncompleteError(f"rebuilt {entry.name} has sha256 {got.sha256[:16]}... ({got.bytes:,} bytes) but "
                              f"{output / 'index.json'} records {entry.sha256[:16]}... ({entry.bytes:,} bytes): "
                              f"not replaced, never a different shard under a published index",
                              hint="the plan no longer reproduces it (a different tokenizer library?): re-run the "
                                   "job into a new output directory")
    keep_sidecar = _sidecar_ok(output, index, entry, got)
    os.replace(scratch / entry.name, output / entry.name)
    if not keep_sidecar:
        _as_published(scratch, index, entry, got)
        os.replace(scratch / entry.sidecar, output / entry.sidecar)
    fsync_dir(output)
    return not keep_sidecar


def repair(output: str | Path, *, shard: int | None = None) -> list[Repaired]:
    """Rebuild every shard of ``output`` that does not verify (or just shard ``shard``), and index.json when
    its entries are broken; return what was repaired (empty: nothing needed it).  Refuses, naming the
    cause: a URL (exit 2: the plan's inputs and scratch space are where the job ran), no index.json (exit
    5), an index of another plan (exit 5), inputs changed since planning (exit 3, from the task), a rebuilt
    sha256 that is not index.json's (exit 5), another shardprep run holding the output (exit 4)."""
    if is_url(output):      # before Path(): Path("s3://b/x") is the local "s3:/b/x"
        raise ConfigError(f"{output} is a URL: repair rebuilds shards in the output directory where the job ran "
                          f"(its frozen plan, inputs and tokenizer)",
                          hint=f"repair that directory, then upload it again; `shardprep verify {output}` checks "
                               f"the copy")
    output = Path(output)
    load_job(output)        # before the lock: a path that holds no plan is refused, and not created by the lock
    with output_lock(output):
        out, index_repair = _open(output, load_job(output))
        _clear_dead_scratch(output)
        repaired = _rebuild_bad(out, _bad_entries(out, shard))
        if index_repair is not None:
            write_json_atomic(output / INDEX_FILE, out.index.to_dict())
            repaired.insert(0, index_repair)
        return repaired


def _rebuild_bad(out: Output, bad: list[tuple[IndexShard, list[str]]]) -> list[Repaired]:
    """Rebuild each bad shard in one scratch directory, each checked again in place afterwards."""
    if not bad:
        return []
    output = Path(out.root)
    scratch = _scratch(output)
    repaired = []
    try:
        for entry, problems in bad:
            log.info("rebuilding %s (%s)", entry.name, "; ".join(problems))
            replaced = _rebuild(output, scratch, out.index, entry)
            out.sizes = out.store.sizes(out.root)
            left = check_shard(out, entry).problems
            if left:
                raise IncompleteError(f"{output / entry.name} still does not verify after its rebuild: "
                                      f"{'; '.join(left)}")
            repaired.append(Repaired(entry.name, problems, replaced))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return repaired
