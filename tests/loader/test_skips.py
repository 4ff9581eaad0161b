"""Skips in the loader (loader/skips.py, ShardLoader.skip) and the state /2, on real shards in this process
(ranks simulated with explicit rank/world_size): skipped steps and quarantined documents never appear,
every rank keeps equal steps, a removed step range is cut out of every rank alike, resume on another world
size reads the rest exactly once, the timeline of a saved state says what every step read, and the
refusals are one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from loader_helpers import make_dataset

from shardprep.errors import ConfigError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader.locate import DocRef
from shardprep.loader.skips import DocumentPositions, Skips
from shardprep.loader.timeline import Timeline

SEQ, BATCH = 32, 3


@pytest.fixture(scope="module")
def data(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("skips"), sample_tokenizer, [20, 35, 9], chunk_tokens=300, seed=4)


def dataset(data: Path, mode: str = "pack") -> ShardDataset:
    return ShardDataset(data, mode=mode, seq_len=SEQ if mode == "pack" else 48, seed=3, shuffle_block=6,
                        return_doc_info=True)


def run(data, world, *, epochs=(0,), steps=None, state=None, skip=None, mode="pack"):
    """Every rank's batches as (epoch, units, documents); the state after (the same on every rank)."""
    out, states = [], []
    for rank in range(world):
        ld = make_dataloader(dataset(data, mode), batch_size=BATCH, rank=rank, world_size=world, skip=skip)
        if state is not None:
            ld.load_state_dict(json.loads(json.dumps(state)))
        got: list = []
        for epoch in epochs:
            ld.set_epoch(epoch)
            for b in ld:
                got.append((epoch, tuple(b["unit_ids"].tolist()), frozenset(np.unique(b["doc_ids"]).tolist())))
                if steps is not None and len(got) == steps:
                    break
            if steps is not None and len(got) == steps:
                break
        out.append(got)
        states.append(ld.state_dict())
    assert all(s == states[0] for s in states)
    assert len({len(r) for r in out}) == 1, "equal steps on every rank"
    return out, states[0]


def test_a_step_range_is_cut_out_of_every_rank_alike_across_an_epoch_boundary(data):
    ref, _ = run(data, 2, epochs=(0, 1, 2))
    per_epoch = sum(1 for e, *_ in ref[0] if e == 0)
    a, b = per_epoch - 2, per_epoch + 1             # the last two steps of epoch 0, the first two of epoch 1
    got, state = run(data, 2, epochs=(0, 1, 2), skip=Skips(steps=((a, b),)))
    for r in range(2):
        assert got[r] == ref[r][:a] + ref[r][b + 1:]     # step a reads what step b+1 would have
    assert state["step"] == len(ref[0]) - (b - a + 1)
    assert [s for s in state["skips"]["steps"]] == [[a, b]]
    assert {e for e, _ in state["skips"]["removed"]} == {0, 1}


def test_quarantined_document_never_appears_and_resume_on_three_ranks_is_exact(data):
    ds = dataset(data)
    doc = DocRef(0, 1, 7)
    gid = int(ds.index.shard_doc_start[1]) + 7
    skip = Skips(steps=((2, 4),), documents=frozenset({doc}))
    ref, _ = run(data, 2)
    first, state = run(data, 2, steps=6, skip=skip)
    rest, end = run(data, 3, state=state)
    seen = [u for r in first + rest for _, units, _ in r for u in units]
    assert len(seen) == len(set(seen))                              # nothing read twice
    assert all(gid not in docs for r in first + rest for *_, docs in r)
    skipped = {u for r in ref for _, units, _ in r[2:5] for u in units}
    assert not skipped & set(seen)
    # everything else was read, but what keeps ranks equal (dropped) and the rows holding the document
    holding = DocumentPositions(ds, [doc])(0)
    assert len(seen) + len(skipped) + sum(e - s for s, e in holding) + 0 <= ds.num_units
    assert ds.num_units - len(seen) - len(skipped | set(_units(ds, holding))) < 3 * BATCH + 2 * BATCH
    assert end["step"] == 6 + len(rest[0]) and len(end["legs"]) >= 2


def _units(ds, positions):
    from shardprep.loader.epoch import EpochReader
    er = EpochReader(ds.index, ds.num_units, 0, ds._read_opts[0], ds._tables[0])
    pos = np.array([p for s, e in positions for p in range(s, e)], dtype=np.int64)
    return er.units(pos).tolist()


@pytest.mark.parametrize("mode", ["pack", "pad"])
def test_the_timeline_of_a_saved_state_says_what_every_step_read(data, mode):
    ds = dataset(data, mode)
    skip = Skips(steps=((3, 3),), documents=frozenset({DocRef(0, 0, 2), DocRef(0, 2, 0)}))
    first, state = run(data, 2, steps=5, skip=skip, mode=mode)
    rest, end = run(data, 3, epochs=(0, 1), state=state, mode=mode)
    tl = Timeline.from_state(end, removed=DocumentPositions(ds, [DocRef(0, 0, 2), DocRef(0, 2, 0)]))
    for world, runs, offset in ((2, first, 0), (3, rest, 5)):
        for rank in range(world):
            for j, (epoch, units, _) in enumerate(runs[rank]):
                e, positions = tl.batch(offset + j, rank)
                assert e == epoch and _units_of(ds, e, positions) == list(units)
                p = positions[0][0]
                assert tl.find(e, p) == (offset + j, rank)


def _units_of(ds, epoch, positions):
    from shardprep.loader.epoch import EpochReader
    er = EpochReader(ds.index, ds.num_units, epoch, ds._read_opts[0], ds._tables[0])
    return er.units(np.array([p for s, e in positions for p in range(s, e)], dtype=np.int64)).tolist()


def test_a_skip_given_with_a_state_comes_after_it_and_the_same_skip_again_is_no_error(data):
    skip = Skips(steps=((2, 3),))
    _, state = run(data, 2, steps=5, skip=skip)
    again, st2 = run(data, 2, steps=1, state=state, skip=skip)           # declared already: not refused
    assert st2["skips"]["steps"] == [[2, 3]]
    _, st3 = run(data, 2, steps=1, state=state, skip=Skips(steps=((8, 9),)))
    assert st3["skips"]["steps"] == [[2, 3], [8, 9]]


def test_refusals_are_one_line(data):
    ld = make_dataloader(dataset(data), batch_size=BATCH, rank=0, world_size=2)
    it = iter(ld)
    for _ in range(3):
        next(it)
    with pytest.raises(ConfigError, match="between passes"):
        ld.skip(Skips(steps=((5, 6),)))
    del it
    for skips, words in [(lambda: Skips(steps=((1, 4),)), "delivered steps 0..2"),
                         (lambda: Skips(steps=((9, 4),)), "first <= last"),
                         (lambda: Skips(documents=frozenset({DocRef(0, 9, 0)})), "shard 9 does not exist"),
                         (lambda: Skips(documents=frozenset({DocRef(0, 0, 10**5)})), "documents")]:
        with pytest.raises(ConfigError, match=words) as e:
            ld.skip(skips())
        assert "\n" not in str(e.value)


def test_a_state_of_format_1_still_loads_and_counts_from_step_0(data):
    _, state = run(data, 2, steps=4)
    old = {k: v for k, v in state.items() if k not in ("step", "legs", "skips")} | {"format": "shardprep.loader.state/1"}
    rest, end = run(data, 2, state=old)
    full, _ = run(data, 2)
    assert rest[0] == full[0][4:]
    assert end["step"] == len(rest[0]) and end["legs"][0][0] == 0


def test_dcp_shape_every_variable_part_is_one_value(data):
    """torch.distributed.checkpoint flattens dicts and lists holding dicts: none of the state's lists may
    hold one, so a fresh loader's state has exactly the keys of a saved one (tests/live for the real save)."""
    from torch.distributed.checkpoint._traverse import traverse_state_dict

    def keys(state):
        found = []
        traverse_state_dict(state, lambda path, value: found.append(path))
        return sorted(found)

    _, saved = run(data, 2, steps=5, skip=Skips(steps=((1 + 5, 7),), documents=frozenset({DocRef(0, 0, 1)})))
    fresh = make_dataloader(dataset(data), batch_size=BATCH, rank=0, world_size=3).state_dict()
    assert keys({"loader": saved}) == keys({"loader": fresh})
