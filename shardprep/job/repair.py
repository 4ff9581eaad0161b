"""``repair``: rebuild shards that ``verify`` finds bad, byte for byte, from the frozen plan.

A finalized job's index.json records every shard's sha256, and the plan is deterministic (the same plan
gives the same bytes), so a shard damaged after the fact (a flipped bit, a truncated copy, a deleted file)
can be rebuilt instead of re-running the job.  The rebuilt shard replaces the bad one only when its sha256
is the one index.json records: index.json itself never changes, so the loader's order (which depends only
on index.json and the shards) is what it was.

Each task runs unchanged (``job.task.run_task``, with its own checks: the inputs' size and mtime against
the plan, the frozen tokenizer) in a hidden scratch directory beside the shards, which links to the
plan's job.json, tokenizer.json and plan/; nothing under a final name is touched until the rebuilt bytes
are proven equal.  The output directory's lock is held throughout (one writer per directory).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from shardprep.errors import ConfigError, IncompleteError, RecordError
from shardprep.job.state import load_job
from shardprep.job.task import run_task
from shardprep.job.verify import check_shard, open_output
from shardprep.shard.format import JOB_FILE, PLAN_DIR, REPAIR_DIR, SHARD_RE, TOKENIZER_FILE, shard_name
from shardprep.shard.index import Index, IndexShard
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.atomic import fsync_dir, temp_name_for
from shardprep.storage.lock import output_lock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repaired:
    shard: str
    problems: list[str]          # what verify found
    sidecar_replaced: bool       # the sidecar was bad too, and was rebuilt with the shard


def _bad_entries(output: Path, index: Index, only: int | None) -> list[tuple[IndexShard, list[str]]]:
    entries = list(index.shards)
    if only is not None:
        entries = [e for e in entries if e.name == shard_name(only)]
        if not entries:
            raise ConfigError(f"--shard {only}: {output / 'index.json'} lists no {shard_name(only)} "
                              f"(it lists {len(index.shards)} shards)")
    out = open_output(output)
    checks = [(e, check_shard(out, e).problems) for e in entries]
    return [(e, problems) for e, problems in checks if problems]


def _scratch(output: Path) -> Path:
    """A hidden directory where tasks run as in ``output`` (links to its plan), writing only there."""
    scratch = temp_name_for(output / REPAIR_DIR)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    for name in (JOB_FILE, TOKENIZER_FILE, PLAN_DIR):
        os.symlink(os.path.abspath(output / name), scratch / name)
    return scratch


def _sidecar_ok(output: Path, entry: IndexShard, fingerprint: str) -> bool:
    try:
        sidecar = Sidecar.parse((output / entry.sidecar).read_bytes(), output / entry.sidecar)
    except (OSError, RecordError):
        return False
    return (sidecar.plan_fingerprint, sidecar.sha256, sidecar.bytes) == (fingerprint, entry.sha256, entry.bytes)


def _rebuild(output: Path, scratch: Path, entry: IndexShard, fingerprint: str) -> bool:
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
    keep_sidecar = _sidecar_ok(output, entry, fingerprint)
    os.replace(scratch / entry.name, output / entry.name)
    if not keep_sidecar:
        os.replace(scratch / entry.sidecar, output / entry.sidecar)
    fsync_dir(output)
    return not keep_sidecar


def repair(output: Path, *, shard: int | None = None) -> list[Repaired]:
    """Rebuild every shard of ``output`` that does not verify (or just shard ``shard``); return what was
    repaired (empty: nothing needed it).  Refuses, naming the cause: no index.json (exit 5), an index of
    another plan (exit 5), inputs changed since planning (exit 3, from the task), a rebuilt sha256 that is
    not index.json's (exit 5), another shardprep run holding the output (exit 4)."""
    output = Path(output)
    with output_lock(output):
        index = open_output(output).index
        job = load_job(output)
        if index.plan_fingerprint != job.fingerprint:
            raise IncompleteError(f"{output / 'index.json'} was written for plan {index.plan_fingerprint[:12]}, "
                                  f"{output / JOB_FILE} holds plan {job.fingerprint[:12]}: nothing to rebuild from",
                                  hint=f"rewrite the index with `shardprep finalize {output}` if the shards are "
                                       f"this plan's")
        bad = _bad_entries(output, index, shard)
        if not bad:
            return []
        scratch = _scratch(output)
        repaired = []
        try:
            for entry, problems in bad:
                log.info("rebuilding %s (%s)", entry.name, "; ".join(problems))
                replaced = _rebuild(output, scratch, entry, job.fingerprint)
                left = check_shard(open_output(output), entry).problems
                if left:
                    raise IncompleteError(f"{output / entry.name} still does not verify after its rebuild: "
                                          f"{'; '.join(left)}")
                repaired.append(Repaired(entry.name, problems, replaced))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return repaired
