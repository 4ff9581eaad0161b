"""Real DDP with skips: examples/train_ddp.py under ``torchrun`` (gloo, CPU), 2 ranks -> 3 ranks.

A run skips loader steps a..b and quarantines one document, stops after k steps and saves its loader
both plainly (torch.save of ``state_dict()``) and with torch.distributed.checkpoint; it is resumed on 3
ranks once from each.  The skipped steps' rows and the document never appear, every rank has the same
steps, no row is read twice, the two resumes are identical, and everything read is everything but the
skipped, the quarantined and the dropped remainder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from loader_helpers import equal_steps, make_dataset, records, run_torchrun, torchrun_summary

from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader.epoch import EpochReader
from shardprep.loader.locate import DocRef, positions_of

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
SEQ, BATCH, SEED = 32, 3, 5
A, B, K = 3, 5, 8          # skip loader steps 3..5, stop after 8 steps


@pytest.fixture(scope="module")
def data(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ddp-skips"), sample_tokenizer, [30, 50, 12], chunk_tokens=400)


def torchrun(nproc: int, data: Path, record: Path, *args: str) -> dict:
    return torchrun_summary(run_torchrun(EXAMPLE, nproc, "--data", data, "--seq-len", SEQ, "--batch-size", BATCH,
                                         "--seed", SEED, "--record", record, "--epochs", "1", *args, timeout=120))


def holding(data: Path, doc: DocRef) -> tuple[set[int], int, int]:
    """The stream units of epoch 0 that hold ``doc`` (what the records call units), its global id, all units."""
    ds = ShardDataset(data, mode="pack", seq_len=SEQ, seed=SEED)
    er = EpochReader(ds.index, ds.num_units, 0, ds._read_opts[0], ds._tables[0])
    pos = np.array([p for s, e in positions_of(ds, doc, 0) for p in range(s, e)], dtype=np.int64)
    return set(er.units(pos).tolist()), int(ds.index.shard_doc_start[doc.shard]) + doc.doc, ds.num_units


def test_skips_two_ranks_then_three_from_the_plain_and_the_dcp_state(data, tmp_path):
    doc = DocRef(0, 1, 4)
    held, gid, units = holding(data, doc)
    assert held
    (tmp_path / "bad.yaml").write_text(f"# a leaked item, by its global document id\ndocuments: [{gid}]\n")
    skipped = set()                 # what steps A..B read in the run without skips (in this process)
    for rank in range(2):
        ld = make_dataloader(ShardDataset(data, mode="pack", seq_len=SEQ, seed=SEED, return_doc_info=True),
                             batch_size=BATCH, rank=rank, world_size=2)
        for j, batch in zip(range(B + 1), ld):
            if j >= A:
                skipped.update(batch["unit_ids"].tolist())

    ckpt, dcp_dir = tmp_path / "ckpt.pt", tmp_path / "dcp"
    first = torchrun(2, data, tmp_path / "first", "--skip-steps", f"{A}:{B}", "--quarantine", str(tmp_path / "bad.yaml"),
                     "--max-steps", str(K), "--checkpoint", str(ckpt), "--dcp", str(dcp_dir))
    assert first["stopped"] and equal_steps(first) == {"0": K}
    plain = torchrun(3, data, tmp_path / "plain", "--resume", str(ckpt))
    viadcp = torchrun(3, data, tmp_path / "dcp-run", "--resume", str(ckpt), "--resume-dcp", str(dcp_dir))
    equal_steps(plain)
    assert equal_steps(viadcp) == equal_steps(plain)

    rec_first, rec_plain = records(tmp_path / "first", 2), records(tmp_path / "plain", 3)
    rec_dcp = records(tmp_path / "dcp-run", 3)
    key = lambda r: [(x["units"], x["digest"]) for x in r]                      # noqa: E731
    assert [key(r) for r in rec_plain] == [key(r) for r in rec_dcp]           # the two resumes are identical
    batches = [x for r in rec_first + rec_plain for x in r]
    seen = [u for x in batches for u in x["units"]]
    assert len(seen) == len(set(seen))                                          # no row read twice
    assert not set(seen) & skipped and not set(seen) & held                    # skipped steps, the document
    assert all(gid not in x["doc_ids"] for x in batches)
    dropped = plain["ranks"][0]["dropped"]["units"]
    assert set(seen) | skipped | held | set() <= set(range(units))
    assert len(set(seen)) + len(skipped | held) + dropped == units              # everything else was read
