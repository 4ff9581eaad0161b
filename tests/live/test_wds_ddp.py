"""A stock webdataset pipeline (split_by_node, split_by_worker) over shardprep shards under real ``torchrun``:
examples/train_wds.py with 2 ranks x 2 DataLoader workers, two epochs, gloo on CPU.

Checked from the example's records: every document of index.json is decoded exactly once per epoch
across all ranks and workers; every token a rank's batches hold comes from documents its own workers
decoded, no document token is delivered twice, and a rank's batches miss at most one unfilled batch per
worker (each pack stage drops its own tail).  The steps trained are equal on every rank (the example
stops all ranks when one runs out), and the batches left over are reported, which is the recipe's cost.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers import shard_documents
from loader_helpers import check_step_lines, make_dataset, run_torchrun, torchrun_summary

pytestmark = [pytest.mark.ddp, pytest.mark.slow]
pytest.importorskip("webdataset")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_wds.py"
SEQ, BATCH, WORKERS, RANKS, EPOCHS = 32, 2, 2, 2, 2


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stock_pipeline_two_ranks_two_workers_reads_every_document_once_per_epoch(tmp_path, sample_tokenizer):
    data = make_dataset(tmp_path / "ds", sample_tokenizer, [40, 250, 12, 300, 90, 160, 25])
    index = orjson.loads((data / "index.json").read_bytes())
    doc_lengths = [len(d) for d in shard_documents(data)]
    record = tmp_path / "record"
    proc = run_torchrun(EXAMPLE, RANKS, "--data", data, "--seq-len", SEQ, "--batch-size", BATCH, "--num-workers",
                        WORKERS, "--epochs", EPOCHS, "--shardshuffle", 5, "--record", record, "--log-every", 4,
                        timeout=240)
    summary = torchrun_summary(proc)
    trained = sum(summary["ranks"][0]["steps"].values())       # steps count on across the epochs
    check_step_lines(proc.stdout, [1] + list(range(4, trained + 1, 4)))   # the progress line, rank 0 only
    decoded = {(r, w): _lines(record / f"decoded-rank{r}-worker{w}.jsonl") for r in range(RANKS) for w in range(WORKERS)}
    batches = {r: _lines(record / f"batches-rank{r}.jsonl") for r in range(RANKS)}

    for epoch in range(EPOCHS):
        # every document exactly once per epoch, over all ranks and workers
        seen = Counter(d for recs in decoded.values() for s in recs if s["epoch"] == epoch
                       for d in range(s["doc_start"], s["doc_start"] + s["docs"]))
        assert set(seen) == set(range(index["totals"]["documents"])) and set(seen.values()) == {1}
        for r in range(RANKS):
            mine = {d for w in range(WORKERS) for s in decoded[(r, w)] if s["epoch"] == epoch
                    for d in range(s["doc_start"], s["doc_start"] + s["docs"])}
            assert mine, f"rank {r} read nothing"
            got: Counter = Counter()
            for b in batches[r]:
                if b["epoch"] == epoch:
                    got.update({int(d): n for d, n in b["docs"].items()})
            assert set(got) <= mine                                  # only its own workers' documents
            assert all(n <= doc_lengths[d] for d, n in got.items())  # no token delivered twice
            decoded_tokens = sum(s["tokens"] for w in range(WORKERS) for s in decoded[(r, w)] if s["epoch"] == epoch)
            assert 0 <= decoded_tokens - sum(got.values()) < WORKERS * BATCH * SEQ   # one tail per worker
        steps = {r["rank"]: r["steps"][str(epoch)] for r in summary["ranks"]}
        assert len(set(steps.values())) == 1 and steps[0] > 0       # equal steps: nobody waited forever
        for r in summary["ranks"]:
            trained = sum(b["trained"] for b in batches[r["rank"]] if b["epoch"] == epoch)
            assert trained == r["steps"][str(epoch)]
            assert r["unused"][str(epoch)] == sum(not b["trained"] for b in batches[r["rank"]] if b["epoch"] == epoch)
