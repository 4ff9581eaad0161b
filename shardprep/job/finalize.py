"""``finalize``: check every task's sidecar and write ``index.json`` (no data is copied).

It re-checks sidecars itself instead of trusting Slurm's job states: an array task can be "COMPLETED"
with a shard from another plan, or "FAILED" after its shard was already renamed in place.
"""

from __future__ import annotations

import logging
from pathlib import Path

from shardprep.errors import IncompleteError, InputDataError
from shardprep.job.advice import replan_advice
from shardprep.job.plan_files import check_task_count
from shardprep.job.schema import CREATED_BY, Job
from shardprep.job.state import format_array_ranges, job_state, load_job
from shardprep.shard.format import FORMAT_VERSION, INDEX_FILE
from shardprep.shard.index import Index, IndexShard, IndexTokenizer, IndexTotals
from shardprep.storage.atomic import write_json_atomic
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
    for t in range(state.n_tasks):
        sc = state.done[t]
        if sc.tokenizer_fingerprint != job.tokenizer.fingerprint or sc.format_version != FORMAT_VERSION:
            raise IncompleteError(f"{sc.shard}: written with another tokenizer or format version")
        shards.append(IndexShard.holding(sc, name=sc.shard, sidecar=sc.shard.removesuffix(".tar") + ".json"))
        for reason, n in sc.skipped:
            skipped[reason] = skipped.get(reason, 0) + n
    totals = state.totals()
    if totals["documents"] == 0:
        raise InputDataError(
            f"the job in {output} produced zero documents (skipped: {skipped})",
            hint="check --text-field / --txt-mode and the input files (the sidecars' skipped_examples); "
                 + replan_advice(output),
        )
    return Index(
        format_version=FORMAT_VERSION, created_by=CREATED_BY, plan_fingerprint=job.fingerprint,
        tokenizer_fingerprint=job.tokenizer.fingerprint, tokenizer=_index_tokenizer(job),
        layout=job.options.layout, dtype=job.tokenizer.dtype, shards=tuple(shards),
        totals=IndexTotals(len(shards), totals["samples"], totals["documents"], totals["tokens"], totals["bytes"],
                           skipped),
    )


def _index_tokenizer(job: Job) -> IndexTokenizer:
    tok, opts = job.tokenizer, job.options
    return IndexTokenizer(tok.source, tok.vocab_size, tok.dtype, tok.eos_id, tok.bos_id, tok.pad_id, tok.eos_token,
                          tok.bos_token, tok.pad_token, opts.add_eos, opts.add_bos)


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
