"""The loader as a torch.distributed.checkpoint Stateful, for real: examples/train_ddp.py under ``torchrun``
(gloo, CPU) reads a two-source mixture whose small source repeats, saves its loader with ``dcp.save`` on 2
ranks after k steps, and 3 ranks ``dcp.load`` it and go on: the same global order as an uninterrupted run
(every mixture position holds the row the schedule puts there), nothing read twice, nothing left out but
the dropped remainder, equal steps.  (tests/live/test_skips_ddp.py resumes a DCP state with skips.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from loader_helpers import equal_steps, make_dataset, records, run_torchrun, torchrun_summary

from shardprep.loader import ShardDataset

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
SEQ, BATCH, SEED, K = 32, 3, 2, 6


@pytest.fixture(scope="module")
def spec(tmp_path_factory, sample_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("ddp-dcp")
    big = make_dataset(root / "big", sample_tokenizer, [30, 40], chunk_tokens=400, seed=1)
    tiny = make_dataset(root / "tiny", sample_tokenizer, [5], chunk_tokens=200, seed=2)
    path = root / "mix.json"
    path.write_text(json.dumps({"sources": [{"path": str(big), "weight": 0.7}, {"path": str(tiny), "weight": 0.3}]}))
    return path


def torchrun(nproc: int, spec: Path, record: Path, *args: str) -> dict:
    return torchrun_summary(run_torchrun(EXAMPLE, nproc, "--data", spec, "--seq-len", SEQ, "--batch-size", BATCH,
                                         "--seed", SEED, "--record", record, "--epochs", "1", *args, timeout=120))


def expected_rows(spec: Path) -> tuple[dict[int, str], int]:
    """Mixture position -> the digest of its row, read in this process (the uninterrupted order)."""
    ds = ShardDataset(str(spec), mode="pack", seq_len=SEQ, seed=SEED)
    rows = ds.open_pass(0)
    try:
        out = {}
        for p in range(ds.num_units):
            ids = ds.tensors(rows.batch(np.array([p], dtype=np.int64)))["input_ids"][0]
            out[p] = hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]
    finally:
        rows.close()
    assert ds.mixture is not None and ds.mixture.table()[1]["epochs"] > 1.5      # the small source repeats
    return out, ds.num_units


def test_dcp_save_on_two_ranks_load_on_three_continues_the_global_order(spec, tmp_path):
    rows, units = expected_rows(spec)
    ckpt, dcp_dir = tmp_path / "ckpt.pt", tmp_path / "dcp"
    first = torchrun(2, spec, tmp_path / "a", "--max-steps", str(K), "--checkpoint", str(ckpt), "--dcp", str(dcp_dir))
    assert first["stopped"] and equal_steps(first) == {"0": K}
    assert (dcp_dir / ".metadata").is_file()
    rest = torchrun(3, spec, tmp_path / "b", "--resume", str(ckpt), "--resume-dcp", str(dcp_dir))
    equal_steps(rest)
    read = [(u, d) for world, rec in ((2, tmp_path / "a"), (3, tmp_path / "b")) for r in records(rec, world)
            for x in r for u, d in zip(x["units"], x["rows"])]
    positions = [u for u, _ in read]
    assert len(positions) == len(set(positions))                     # nothing read twice
    assert all(rows[u] == d for u, d in read)                        # the same global order, row for row
    assert len(positions) + rest["ranks"][0]["dropped"]["units"] == units
