"""``finalize``: check every task's sidecar and write ``index.json`` (no data is copied).

It re-checks sidecars itself instead of trusting Slurm's job states: an array task can be "COMPLETED"
with a shard from another plan, or "FAILED" after its shard was already renamed in place.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from shardprep.errors import IncompleteError, InputDataError
from shardprep.job.advice import replan_advice
from shardprep.job.plan_files import check_task_count
from shardprep.job.schema import CREATED_BY, Job
from shardprep.job.state import format_array_ranges, job_state, load_job
from shardprep.shard.format import INDEX_FILE, JOB_FILE, format_version
from shardprep.shard.index import Index, IndexContractError, IndexShard, IndexTokenizer, IndexTotals
from shardprep.shard.sidecar import SidecarSummary
from shardprep.storage.atomic import write_json_atomic
from shardprep.storage.locations import join
from shardprep.storage.lock import output_lock

log = logging.getLogger(__name__)

LOCK_WAIT_S = 60.0


def build_index(output: Path) -> Index:
    """The index.json record for a complete job; IncompleteError naming the missing tasks otherwise."""
    job = load_job(output)
    check_task_count(output, job)       # publish every planned shard, not the count job.json claims
    state = job_state(output, job)
    if not state.complete:
        examples = "; ".join(f"task {t}: {why}" for t, why in list(state.problems.items())[:5])
        raise IncompleteError(
            f"{len(state.missing)} of {state.n_tasks} task(s) not done: {format_array_ranges(state.missing)} ({examples})",
            hint=f"run `shardprep submit --resume {output}`",
        )
    shards = []
    skipped: dict[str, int] = {}
    version = _shards_version(state.done, job.options.chat is not None)
    for t in range(state.n_tasks):
        sc = state.done[t]
        if sc.tokenizer_fingerprint != job.tokenizer.fingerprint or sc.format_version != version:
            raise IncompleteError(f"{sc.shard}: written with another tokenizer or format version")
        shards.append(IndexShard.holding(sc, name=sc.shard, sidecar=sc.shard.removesuffix(".tar") + ".json"))
        for reason, n in sc.skipped:
            skipped[reason] = skipped.get(reason, 0) + n
    totals = state.totals()
    if totals.documents == 0:
        raise InputDataError(
            f"the job in {output} produced zero documents (skipped: {skipped})",
            hint="check --text-field / --txt-mode and the input files (the sidecars' skipped_examples); "
                 + replan_advice(output),
        )
    trained = sum(state.done[t].trained_tokens or 0 for t in range(state.n_tasks)) if job.options.chat else None
    return Index(
        format_version=version, created_by=CREATED_BY, plan_fingerprint=job.fingerprint,
        tokenizer_fingerprint=job.tokenizer.fingerprint, tokenizer=index_tokenizer(job),
        layout=job.options.layout, dtype=job.tokenizer.dtype, shards=tuple(shards),
        totals=IndexTotals(len(shards), totals.samples, totals.documents, totals.tokens, totals.bytes, skipped,
                           trained),
    )


def _shards_version(done: dict[int, SidecarSummary], chat: bool) -> int:
    """The format version index.json records: the sidecars', which must all have one (a job finished by this
    release writes 3; one finished by an earlier release keeps its 1 or 2, and its shards stay finished)."""
    versions: dict[int, list[int]] = {}
    for t, sc in done.items():
        versions.setdefault(sc.format_version, []).append(t)
    if len(versions) > 1:
        old = sorted(t for v, tasks in versions.items() if v != max(versions) for t in tasks)
        raise IncompleteError(f"the shards are of format versions {sorted(versions)}: task(s) "
                              f"{format_array_ranges(old)} were written by an earlier release",
                              hint="remove those tasks' sidecars (shard-NNNNN.json) and `shardprep submit --resume` "
                                   "to write them again with each document's origin (format 3)")
    return next(iter(versions), format_version(chat))


def index_tokenizer(job: Job) -> IndexTokenizer:
    """The plan's tokenizer as index.json records it (also the report's, before there is an index)."""
    tok, opts = job.tokenizer, job.options
    return IndexTokenizer(tok.source, tok.vocab_size, tok.dtype, tok.eos_id, tok.bos_id, tok.pad_id, tok.eos_token,
                          tok.bos_token, tok.pad_token, opts.add_eos, opts.add_bos)


def plan_problems(index: Index, job: Job) -> list[str]:
    """How ``index`` disagrees with the frozen plan it says it publishes (empty: it does not).

    What finalize takes from the plan, compared field by field: the fingerprints, layout, dtype, the
    tokenizer record (vocab size, special ids, BOS/EOS policy; its ``source`` is only where it came from)
    and the number of shards, one per task (their names then follow from ``Index.contract_problems``).
    """
    want: dict[str, object] = {"plan_fingerprint": job.fingerprint, "tokenizer_fingerprint": job.tokenizer.fingerprint,
                               "layout": job.options.layout, "dtype": job.tokenizer.dtype,
                               "totals.shards": job.n_tasks}
    got: dict[str, object] = {"plan_fingerprint": index.plan_fingerprint, "layout": index.layout,
                              "tokenizer_fingerprint": index.tokenizer_fingerprint, "dtype": index.dtype,
                              "totals.shards": len(index.shards)}
    for key, value in index_tokenizer(job).to_dict().items():
        if key != "source":
            want[f"tokenizer.{key}"], got[f"tokenizer.{key}"] = value, getattr(index.tokenizer, key)
    return [f"field '{key}': is {got[key]!r} but {JOB_FILE} says {value!r}" for key, value in want.items()
            if got[key] != value]


def check_against_plan(index: Index, root: str, read: Callable[[str], bytes]) -> Job | None:
    """Hold ``root``'s index.json to the plan beside it, where one is reachable (``read``: the location's whole-
    file read; an output copied without job.json is held to its own contract only).  Returns the plan, or
    None where there is none; ``IndexContractError`` on any disagreement, a tampered plan as ``Job.parse``
    refuses it.  One check for every reader: verify, repair, upload and the loader."""
    where = join(root, JOB_FILE)
    try:
        data = read(where)
    except (FileNotFoundError, NotADirectoryError):
        return None
    job = Job.parse(data, where)
    problems = plan_problems(index, job)
    if problems:
        raise IndexContractError(join(root, INDEX_FILE), problems)
    return job


def finalize(output: Path) -> Index:
    """Write ``<output>/index.json`` atomically and return it.

    Holds the output directory's lock, waiting up to ``LOCK_WAIT_S`` for it: a Slurm finalize job whose
    tasks finished quickly may start while the ``submit`` that queued it is still recording job ids.
    """
    output = Path(output)
    with output_lock(output, wait_s=LOCK_WAIT_S):
        index = build_index(output)
        write_json_atomic(output / INDEX_FILE, index.to_dict())
    t = index.totals
    log.info("finalized %s: %d shards, %d documents, %d tokens, %d bytes", output, t.shards, t.documents,
             t.tokens, t.bytes)
    return index
