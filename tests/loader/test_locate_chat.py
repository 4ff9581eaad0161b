"""The inverse locate (loader/locate.py) for chat data in pack mode: rows of whole conversations.

A packed row's conversations come from its window's bin packing in that epoch, so the only ground truth
is the loader itself: for every position of a pass its batch (``return_doc_info``) names the conversations
it holds, and ``positions_of`` of every conversation must be exactly the positions that hold it.  Shuffled
and not, several windows and epochs, ``overflow="drop"`` (a conversation longer than ``seq_len`` is in no
row, so it has no position) and a 2-source mixture whose small chat source repeats within a pass.  A skip of
a conversation through ``ShardLoader.skip`` then never yields it while every rank keeps equal steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from chat_data import ChatCorpus, chat_corpus
from loader_helpers import every_doc, forward

from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader import distribute as D
from shardprep.loader.locate import DocRef, positions_of
from shardprep.loader.skips import Skips

SEQ, BATCH = 200, 2
LENGTHS = [[30, 80, 150, 20, 60, 260, 45] * 4, [100, 45, 12, 230, 7] * 5, [90, 10, 180]]


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> ChatCorpus:
    """Three shards, several chunks each (so windows hold several chunks), some conversations over SEQ."""
    return chat_corpus(tmp_path_factory.mktemp("locate-chat"), LENGTHS, seed=7, chunk_tokens=300)


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> ChatCorpus:
    return chat_corpus(tmp_path_factory.mktemp("locate-text"), [[200, 300, 90] * 12, [150, 40] * 10], seed=8,
                       chunk_tokens=500, chat=False, plan="text-plan")


def check(ds: ShardDataset, epochs) -> dict[DocRef, set[int]]:
    """positions_of == what the loader reads, for every document and epoch; the epochs' forward maps."""
    seen: dict[DocRef, set[int]] = {}
    for epoch in epochs:
        seen = forward(ds, epoch)
        for ref in every_doc(ds):
            got = positions_of(ds, ref, epoch)
            assert set(D.positions(got).tolist()) == seen.get(ref, set()), (epoch, ref)
    return seen


def chat_dataset(root, **kw) -> ShardDataset:
    kw = {"seed": 5, "shuffle_block": 4, **kw}
    return ShardDataset(str(root), mode="pack", seq_len=SEQ, return_doc_info=True, **kw)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("window", [3, 9, 1024])
def test_every_conversation_is_found_in_exactly_the_rows_that_hold_it(chat, shuffle, window):
    ds = chat_dataset(chat.root, shuffle=shuffle, pack_window=window)
    assert ds.chat_rows[0] is not None and len(ds.chat_rows[0].bounds[0]) > 2 or window == 1024
    seen = check(ds, epochs=(0, 1, 2))
    assert all(len(p) == 1 for p in seen.values())        # truncate: every conversation in exactly one row
    assert len(seen) == sum(len(s) for s in LENGTHS)


def test_a_dropped_conversation_has_no_position(chat):
    ds = chat_dataset(chat.root, pack_window=6, overflow="drop")
    long = [DocRef(0, s, d) for s, lens in enumerate(LENGTHS) for d, n in enumerate(lens) if n > SEQ]
    assert long and ds.packing_stats()["dropped"] == len(long)
    for epoch in (0, 3):
        seen = check(ds, epochs=(epoch,))
        for ref in long:
            assert positions_of(ds, ref, epoch) == () and ref not in seen


def test_a_mixture_with_a_repeating_chat_source(chat, text):
    small = chat_corpus(chat.root.parent / "small", [[40, 120, 70, 15, 90, 30]], seed=9, chunk_tokens=150)
    ds = ShardDataset([(str(small.root), 0.4), (str(text.root), 0.6)], mode="pack", seq_len=SEQ, seed=2,
                      shuffle_block=3, pack_window=2, return_doc_info=True)
    assert ds.mixture is not None and ds.mixture.table()[0]["epochs"] > 2       # the chat source repeats
    check(ds, epochs=(0, 1))


def test_a_mixture_of_chat_and_pretraining_sources(chat, text):
    ds = ShardDataset([(str(chat.root), 0.5), (str(text.root), 0.5)], mode="pack", seq_len=SEQ, seed=4,
                      shuffle_block=5, pack_window=8, overflow="drop", return_doc_info=True)
    check(ds, epochs=(0, 2))


def run(root, world: int, skip: Skips | None, epochs=(0, 1)) -> list[list[tuple[int, list[int], set[int]]]]:
    """Per rank, each batch as (epoch, unit ids, conversations' global ids) over ``epochs``, with ``skip``
    given by ``ShardLoader.skip`` before the first pass."""
    out = []
    for rank in range(world):
        ld = make_dataloader(chat_dataset(root, pack_window=5), batch_size=BATCH, rank=rank, world_size=world)
        if skip is not None:
            ld.skip(skip)
        got = []
        for epoch in epochs:
            ld.set_epoch(epoch)
            got += [(epoch, b["unit_ids"].tolist(), set(np.unique(b["doc_ids"]).tolist()) - {-1}) for b in ld]
        out.append(got)
    return out


def test_a_skipped_conversation_is_never_yielded_and_every_rank_keeps_equal_steps(chat):
    ds = chat_dataset(chat.root, pack_window=5)
    docs = frozenset({DocRef(0, 0, 3), DocRef(0, 1, 6), DocRef(0, 2, 1)})
    gids = {int(ds.index.shard_doc_start[d.shard]) + d.doc for d in docs}
    world = 3
    ref = run(chat.root, world, None)
    assert gids <= {g for r in ref for *_, convs in r for g in convs}        # read when nothing is skipped
    got = run(chat.root, world, Skips(documents=docs))
    assert len({len(r) for r in got}) == 1                                    # equal steps on every rank
    assert not gids & {g for r in got for *_, convs in r for g in convs}
    for epoch in (0, 1):
        er = ds.reading.epoch_reader(0, epoch)
        held = np.array([p for d in docs for p in D.positions(positions_of(ds, d, epoch)).tolist()], dtype=np.int64)
        holding = set(er.units(held).tolist())
        er.close()
        read = [u for r in got for e, units, _ in r if e == epoch for u in units]
        assert len(read) == len(set(read)) and not holding & set(read)      # nothing twice, no row holding them
        # everything else is read, but for the few rows the split leaves out to keep every rank equal
        assert 0 <= ds.num_units - len(holding) - len(read) < world * BATCH
