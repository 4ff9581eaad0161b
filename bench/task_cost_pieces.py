"""Child of bench/task_cost.py: one array task's fixed cost, piece by piece, in CPU seconds of this process.

Runs the steps ``run-task`` runs, in its order, with the shardprep on ``PYTHONPATH`` (the "before" or the
"after" checkout), timing each with ``time.process_time``.  It calls the same library functions the task
calls, so the pieces follow whatever that checkout does: a piece the checkout skips (the hard cases when
the plan's check applies, awkward when gigatoken encodes per document) measures as zero.

Usage: python bench/task_cost_pieces.py OUTPUT   (a planned one-task job; its shard is written to a
temporary name and removed).  Prints one JSON line: {piece: cpu seconds}.
"""

from __future__ import annotations

import json
import sys
import time

T = time.process_time


def main(output: str) -> dict:
    pieces: dict[str, float] = {}
    t = T()
    from shardprep.cli.main import build_parser

    build_parser("run_task")          # what `python -m shardprep run-task` imports
    pieces["imports"] = T() - t

    from pathlib import Path

    from shardprep.inputs.readers import SkipLog
    from shardprep.job import task as task_mod
    from shardprep.job.state import check_task, load_job
    from shardprep.shard.writer import ShardWriter
    from shardprep.storage.atomic import write_json_atomic
    from shardprep.tokenizer import backend as backend_mod
    from shardprep.tokenizer import verify_backend as vb

    out = Path(output)
    t = T()
    job = load_job(out)
    check_task(out, job, 0)
    ctx = task_mod._load(out, job, 0, 1)
    pieces["plan, inputs, tokenizer.json + fingerprint"] = T() - t

    opts = job.options
    skips = SkipLog(strict=opts.strict)
    t = T()
    if hasattr(task_mod, "_batches"):            # before issue 20: lists of strings
        batches = task_mod._batches(ctx.work, opts, skips, task_mod.BatchLimits())
        first = next(batches)
    else:                                        # blocks read whole (inputs.fastpath.DocBatch)
        from shardprep.job.encode import task_batches

        blocks = task_batches(ctx.work, opts, skips, 8 << 20)
        first = next(blocks).texts()
        batches = (b.texts() for b in blocks)
    pieces["read + parse the first batch"] = T() - t

    allow = opts.allow_special_tokens
    t = T()
    reference = backend_mod.BACKENDS["hf"](ctx.tok_json, allow)
    pieces["hf tokenizer load"] = T() - t
    t = T()
    try:
        candidate = backend_mod.BACKENDS["gigatoken"](ctx.tok_json, allow, ctx.work.input_bytes)
    except TypeError:                 # before: factories took no size hint
        candidate = backend_mod.BACKENDS["gigatoken"](ctx.tok_json, allow)
    pieces["gigatoken import + load"] = T() - t

    t = T()
    flat = getattr(sys.modules.get("shardprep.tokenizer.gigatoken_backend"), "_FlatResult", None)
    if not getattr(candidate, "per_document", False) and not (flat and flat.usable(candidate.describe()["version"])):
        import awkward  # noqa: F401  (what gigatoken's encode_batch imports on its first call)
    pieces["awkward import (gigatoken encode_batch)"] = T() - t

    planned = None
    t = T()
    if getattr(job, "backend_check", None) is not None:
        from shardprep.tokenizer.plan_check import usable_plan_check

        planned, _ = usable_plan_check(job.backend_check, candidate, reference, fingerprint=job.tokenizer.fingerprint,
                                       allow_special_tokens=allow)
    if planned is None:
        assert vb.compare_ids(candidate, reference, vb.hard_cases(ctx.tok_json)) is None
    pieces["auto check: hard cases"] = T() - t

    t = T()
    picked = vb.sample_of(first)
    assert vb.compare_ids(candidate, reference, [("doc", first[i]) for i in picked]) is None
    pieces["auto check: own sample"] = T() - t

    tok = job.tokenizer
    bos = tok.bos_id if opts.add_bos else None
    eos = tok.eos_id if opts.add_eos else None
    tmp = out / "bench-pieces.tar"
    t = T()
    with ShardWriter(tmp, task=0, layout=opts.layout, dtype=tok.dtype, chunk_tokens=opts.chunk_tokens) as writer:
        for batch in [first, *batches]:
            flat, lengths = backend_mod.add_boundary_tokens(*candidate.encode_batch(batch), bos, eos)
            writer.add(flat, lengths)
        result = writer.close()
    pieces["tokenize + write shard (fsync)"] = T() - t

    t = T()
    try:
        from shardprep.shard.provenance import BackendRecord
        backend: object = BackendRecord("gigatoken")
    except ImportError:                          # before the sidecar's backend was a typed record
        backend = {"name": "gigatoken"}
    cost = getattr(task_mod, "TaskCost", None)         # before: elapsed and threads as arguments of their own
    sidecar = task_mod.build_sidecar(job, 0, result, skips, backend, ctx.work.items,
                                     *((cost(1.0, 1),) if cost else (1.0, 1)))
    write_json_atomic(out / "bench-pieces.json", sidecar.to_dict())
    pieces["sidecar"] = T() - t
    tmp.unlink()
    (out / "bench-pieces.json").unlink()
    return pieces


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
