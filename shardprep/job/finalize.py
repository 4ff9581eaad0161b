"""``finalize``: check every task's sidecar and write ``index.json`` (no data is copied).

It re-checks sidecars itself instead of trusting Slurm's job states: an array task can be "COMPLETED"
with a shard from another plan, or "FAILED" after its shard was already renamed in place.
"""

from __future__ import annotations

import logging
from pathlib import Path

from shardprep import __version__
from shardprep.errors import IncompleteError, InputDataError
from shardprep.storage.atomic import write_json_atomic
from shardprep.storage.lock import output_lock
from shardprep.job.state import format_array_ranges, job_state, load_job
from shardprep.shard.format import FORMAT_VERSION, INDEX_FILE

log = logging.getLogger(__name__)

LOCK_WAIT_S = 60.0


def build_index(output: Path) -> dict:
    """The index.json document for a complete job; IncompleteError naming the missing tasks otherwise."""
    job = load_job(output)
    state = job_state(output, job)
    if not state.complete:
        examples = "; ".join(f"task {t}: {why}" for t, why in list(state.problems.items())[:5])
        raise IncompleteError(
            f"{len(state.missing)} of {state.n_tasks} task(s) not done: {format_array_ranges(state.missing)} ({examples})",
            hint=f"run `shardprep submit --resume {output}`",
        )
    tok = job["tokenizer"]
    opts = job["options"]
    shards = []
    skipped: dict[str, int] = {}
    for t in range(state.n_tasks):
        sc = state.done[t]
        if sc["tokenizer_fingerprint"] != tok["fingerprint"] or sc.get("format_version") != FORMAT_VERSION:
            raise IncompleteError(f"{sc['shard']}: written with another tokenizer or format version")
        shards.append({k: sc[k] for k in ("shard", "bytes", "sha256", "samples", "documents", "tokens")})
        shards[-1]["name"] = shards[-1].pop("shard")
        shards[-1]["sidecar"] = shards[-1]["name"].removesuffix(".tar") + ".json"
        for reason, n in sc.get("skipped", {}).items():
            skipped[reason] = skipped.get(reason, 0) + n
    totals = state.totals()
    if totals["documents"] == 0:
        raise InputDataError(
            f"the job in {output} produced zero documents (skipped: {skipped})",
            hint="check --text-field / --txt-mode and the input files; see the shard sidecars' skipped_examples",
        )
    return {
        "format_version": FORMAT_VERSION,
        "created_by": f"shardprep {__version__}",
        "plan_fingerprint": job["fingerprint"],
        "tokenizer_fingerprint": tok["fingerprint"],
        "tokenizer": {
            "source": tok["source"], "vocab_size": tok["vocab_size"], "dtype": tok["dtype"],
            "eos_id": tok["eos_id"], "bos_id": tok["bos_id"], "pad_id": tok["pad_id"],
            "eos_token": tok["eos_token"], "bos_token": tok["bos_token"], "pad_token": tok["pad_token"],
            "add_eos": opts["add_eos"], "add_bos": opts["add_bos"],
        },
        "layout": opts["layout"],
        "dtype": tok["dtype"],
        "shards": shards,
        "totals": {"shards": len(shards), "samples": totals["samples"], "documents": totals["documents"],
                   "tokens": totals["tokens"], "bytes": totals["bytes"], "skipped": skipped},
    }


def finalize(output: Path) -> dict:
    """Write ``<output>/index.json`` atomically and return it.

    Holds the output directory's lock, waiting up to ``LOCK_WAIT_S`` for it: a Slurm finalize job whose
    tasks finished quickly may start while the ``submit`` that queued it is still recording job ids.
    """
    output = Path(output)
    with output_lock(output, wait_s=LOCK_WAIT_S):
        index = build_index(output)
        write_json_atomic(output / INDEX_FILE, index)
    t = index["totals"]
    log.info("finalized %s: %d shards, %d documents, %d tokens, %d bytes", output, t["shards"], t["documents"],
             t["tokens"], t["bytes"])
    return index
