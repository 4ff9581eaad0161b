"""``row_documents`` (the forward half of ``shardprep trace``) against what the loader really yields.

Property: for random world sizes, batch sizes, ranks, epochs and steps, concatenating each row's
``DocSpan`` token slices, read from the shards as written, gives exactly the ids of that row of the
loader's batch (pack: the whole row; pad: the real tokens before padding; doc: the item), in pack, pad and
doc mode, in a two-source mixture (pack and pad) and for chat data packed into rows of whole conversations.
"""

from __future__ import annotations

import numpy as np
import pytest
from chat_data import chat_corpus, lognormal_lengths
from loader_helpers import documents_by_shard, make_dataset

from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader import distribute as D
from shardprep.loader.rowdocs import row_documents


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, sample_tokenizer) -> dict:
    root = tmp_path_factory.mktemp("rowdocs")
    paths = {"a": make_dataset(root / "a", sample_tokenizer, [30, 12, 25], chunk_tokens=300, seed=5),
             "b": make_dataset(root / "b", sample_tokenizer, [18, 22], chunk_tokens=200, seed=6)}
    docs = {name: documents_by_shard(p) for name, p in paths.items()}
    return {"paths": paths, "docs": docs}


def loader_rows(batch: dict, mode: str) -> list[list[int]]:
    """The ids of each row as the training loop got them (padding left out)."""
    ids = batch["input_ids"]
    if mode == "doc":
        return [ids.tolist()]
    if "attention_mask" in batch:
        return [row[mask.bool()].tolist() for row, mask in zip(ids, batch["attention_mask"])]
    return [row.tolist() for row in ids]


def traced_rows(spans: list, docs: list) -> list[list[int]]:
    """Each row rebuilt from its spans: ``docs[source][shard][doc][lo:hi]`` concatenated."""
    return [[t for s in row for t in docs[s.source][s.shard][s.doc][s.token_lo:s.token_hi]] for row in spans]


def check_epoch(ds: ShardDataset, docs: list, *, world: int, batch: int | None, rank: int, epoch: int) -> int:
    """Every batch of ``rank`` in ``epoch``: the loader's rows == the traced rows; also the global doc ids."""
    loader = make_dataloader(ds, batch_size=batch, rank=rank, world_size=world)
    loader.set_epoch(epoch)
    split = ds.reading.split(((0, ds.num_units),), world, batch)
    seen = 0
    for j, got in enumerate(loader):
        positions = D.positions(split.batch_ranges(rank, j))
        spans = row_documents(ds.reading, epoch, positions)
        assert traced_rows(spans, docs) == loader_rows(got, ds.mode), (rank, j)
        bases = [np.concatenate([[0], np.cumsum([len(s) for s in src])]) for src in docs]
        assert all(s.doc_id == bases[s.source][s.shard] + s.doc for row in spans for s in row)
        seen += 1
    assert seen == split.rank_steps(rank)
    return seen


CASES = [(mode, seed) for mode in ("pack", "pad", "doc") for seed in range(3)]


@pytest.mark.parametrize("mode,seed", CASES)
def test_one_dataset_rows_are_the_traced_documents(outputs, mode, seed):
    rng = np.random.default_rng(seed)
    world = int(rng.integers(1, 4))
    batch = None if mode == "doc" else int(rng.integers(1, 5))
    kw = {"seq_len": int(rng.choice([7, 16, 40]))} if mode != "doc" else {}
    ds = ShardDataset(str(outputs["paths"]["a"]), mode=mode, seed=int(rng.integers(0, 100)),
                      shuffle_block=int(rng.choice([1, 5, 64])), **kw)
    docs = [outputs["docs"]["a"]]
    assert check_epoch(ds, docs, world=world, batch=batch, rank=int(rng.integers(0, world)),
                       epoch=int(rng.integers(0, 3))) > 0


def test_unshuffled_and_truncated_doc_mode(outputs):
    ds = ShardDataset(str(outputs["paths"]["b"]), mode="doc", seq_len=5, shuffle=False)
    assert check_epoch(ds, [outputs["docs"]["b"]], world=2, batch=None, rank=1, epoch=0) > 0


@pytest.mark.parametrize("mode,seed", [("pack", 0), ("pack", 1), ("pad", 2)])
def test_two_source_mixture_rows_are_the_traced_documents(outputs, mode, seed, tmp_path):
    rng = np.random.default_rng(seed)
    paths = outputs["paths"]
    spec = [(str(paths["a"]), 0.7), (str(paths["b"]), 0.3)]
    total = int(rng.integers(3_000, 12_000))        # a budget beyond one source: its epochs advance
    ds = ShardDataset(spec, mode=mode, seq_len=int(rng.choice([9, 24])), seed=seed, total_tokens=total,
                      shuffle_block=int(rng.choice([1, 8])))
    world = int(rng.integers(1, 4))
    assert check_epoch(ds, [outputs["docs"]["a"], outputs["docs"]["b"]], world=world, batch=int(rng.integers(1, 4)),
                       rank=int(rng.integers(0, world)), epoch=int(rng.integers(0, 2))) > 0


def test_chat_rows_of_whole_conversations_are_the_traced_documents(tmp_path):
    rng = np.random.default_rng(7)
    corpus = chat_corpus(tmp_path / "chat", [lognormal_lengths(rng, 60, median=40, hi=300) for _ in range(2)],
                         chunk_tokens=600)
    docs = [[[int(t) for t in c.ids] for c in shard] for shard in corpus.shards]
    ds = ShardDataset(str(corpus.root), mode="pack", seq_len=128, seed=3, pack_window=16)
    assert check_epoch(ds, [docs], world=2, batch=3, rank=1, epoch=1) > 0
