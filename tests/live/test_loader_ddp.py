"""Real DDP: examples/train_ddp.py under ``torchrun`` (gloo, CPU) on uneven and one-shard datasets.

Every run has a timeout: a rank with fewer batches than the others would block in the gradient
all-reduce, so "finished in time with equal step counts" is the no-hang check.  Records written by the
example give every rank's units/documents and a digest of every batch, for coverage and resume checks.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from loader_helpers import check_step_lines, equal_steps, make_dataset, records, run_torchrun, torchrun_summary

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
SEQ, BATCH = 64, 4


@pytest.fixture(scope="module")
def uneven(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ddp-uneven"), sample_tokenizer, [3, 250, 40, 600, 12])


@pytest.fixture(scope="module")
def single(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ddp-single"), sample_tokenizer, [40], seed=7)


def launch(nproc: int, data: Path, record: Path, *args: object, timeout: float = 150):
    """examples/train_ddp.py under torchrun on ``data``; the finished process (its output)."""
    return run_torchrun(EXAMPLE, nproc, "--data", data, "--seq-len", SEQ, "--batch-size", BATCH, "--record", record,
                        *args, timeout=timeout)


def torchrun(nproc: int, data: Path, record: Path, *args: object, timeout: float = 150) -> dict:
    return torchrun_summary(launch(nproc, data, record, *args, timeout=timeout))


def totals(data: Path) -> dict:
    return orjson.loads((data / "index.json").read_bytes())["totals"]


def test_uneven_two_ranks_two_epochs_then_resume_bit_identical_and_on_three_ranks(uneven, tmp_path):
    rows = totals(uneven)["tokens"] // SEQ
    # A: the uninterrupted run, 2 ranks, in-process loading
    a = torchrun(2, uneven, tmp_path / "a", "--epochs", "2", "--num-workers", "0")
    steps = equal_steps(a)
    assert steps == {"0": rows // (2 * BATCH), "1": rows // (2 * BATCH)}
    rec_a = records(tmp_path / "a", 2)
    for epoch in (0, 1):
        units = [u for r in rec_a for b in r if b["epoch"] == epoch for u in b["units"]]
        assert len(units) == len(set(units)) == rows - a["ranks"][0]["dropped"]["units"]
    for r in rec_a:   # a new epoch gives every rank a different order (and different rows)
        e0 = {u for b in r if b["epoch"] == 0 for u in b["units"]}
        e1 = {u for b in r if b["epoch"] == 1 for u in b["units"]}
        assert e0 != e1

    # B: stop after k steps (2 workers per rank), save, new processes resume: identical batches to A
    k = 7
    ckpt = tmp_path / "ckpt.pt"
    b1_proc = launch(2, uneven, tmp_path / "b", "--epochs", "2", "--num-workers", "2", "--max-steps", str(k),
                     "--checkpoint", str(ckpt), "--log-every", "3")
    b1 = torchrun_summary(b1_proc)
    assert b1["stopped"] and equal_steps(b1) == {"0": k}
    check_step_lines(b1_proc.stdout, [1, 3, 6])      # the progress line: after step 1 and every 3rd, rank 0 only
    torchrun(2, uneven, tmp_path / "b", "--epochs", "2", "--num-workers", "2", "--resume", str(ckpt))
    rec_b = records(tmp_path / "b", 2)
    for ra, rb in zip(rec_a, rec_b):
        assert [(x["epoch"], x["units"], x["digest"]) for x in rb] == [(x["epoch"], x["units"], x["digest"]) for x in ra]

    # C: the same checkpoint resumed on 3 ranks: nothing repeated, nothing skipped
    c = torchrun(3, uneven, tmp_path / "c", "--epochs", "1", "--num-workers", "2", "--resume", str(ckpt))
    equal_steps(c)
    first = [u for r in records(tmp_path / "b", 2) for x in r[:k] for u in x["units"]]
    rest = [u for r in records(tmp_path / "c", 3) for x in r for u in x["units"]]
    assert len(first) == 2 * k * BATCH
    assert len(first + rest) == len(set(first + rest)) == rows - c["ranks"][0]["dropped"]["units"]


def test_one_shard_three_ranks_two_workers_pad_documents_disjoint_and_complete(single, tmp_path):
    docs = totals(single)["documents"]
    s = torchrun(3, single, tmp_path / "d", "--mode", "pad", "--num-workers", "2")
    steps = equal_steps(s)
    assert steps == {"0": docs // (3 * BATCH)} and steps["0"] > 0
    seen = [d for r in records(tmp_path / "d", 3) for b in r for d in b["docs"]]
    dropped = s["ranks"][0]["dropped"]["units"]
    assert dropped == docs - 3 * BATCH * steps["0"]
    assert len(seen) == len(set(seen)) == docs - dropped and set(seen) <= set(range(docs))
