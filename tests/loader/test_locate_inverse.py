"""The inverse locate (loader/locate.py) against the forward direction on real shards.

For every position of a pass, the loader itself says which documents its unit holds (``return_doc_info``);
``positions_of`` of every document must be exactly the positions that hold it: all of them, no other.
Pack, pad and doc modes, shuffled with small blocks and unshuffled, and a mixture whose small source
repeats several times per pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from loader_helpers import every_doc, forward, make_dataset

from shardprep.errors import ConfigError
from shardprep.loader import ShardDataset
from shardprep.loader import distribute as D
from shardprep.loader.locate import DocRef, positions_of


@pytest.fixture(scope="module")
def data(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("locate"), sample_tokenizer, [14, 30, 6], chunk_tokens=300, seed=3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("locate-tiny"), sample_tokenizer, [5], chunk_tokens=200, seed=5)


def check(ds: ShardDataset, epochs=(0, 1)) -> None:
    for epoch in epochs:
        seen = forward(ds, epoch)
        for ref in every_doc(ds):
            got = positions_of(ds, ref, epoch)
            assert set(D.positions(got).tolist()) == seen.get(ref, set()), (epoch, ref)


@pytest.mark.parametrize("mode,seq_len", [("pack", 32), ("pad", 48), ("doc", None)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_positions_of_match_what_the_loader_reads(data, mode, seq_len, shuffle):
    ds = ShardDataset(data, mode=mode, seq_len=seq_len, seed=11, shuffle=shuffle, shuffle_block=7,
                      return_doc_info=True)
    check(ds)


def test_mixture_with_a_repeating_small_source(data, tiny):
    ds = ShardDataset([(str(data), 0.5), (str(tiny), 0.5)], mode="pack", seq_len=32, seed=2, shuffle_block=5,
                      return_doc_info=True)
    assert ds.mixture is not None and ds.mixture.table()[1]["epochs"] > 2       # the tiny source repeats
    check(ds, epochs=(0, 2))


def test_mixture_in_pad_mode(data, tiny):
    ds = ShardDataset([(str(data), 0.7), (str(tiny), 0.3)], mode="pad", seq_len=40, seed=6, shuffle_block=3,
                      return_doc_info=True)
    check(ds, epochs=(1,))


def test_documents_that_do_not_exist_are_refused_in_one_line(data):
    ds = ShardDataset(data, mode="pack", seq_len=32)
    for ref, words in [(DocRef(1, 0, 0), "source 1"), (DocRef(0, 3, 0), "shard 3"), (DocRef(0, 0, 10**6), "has")]:
        with pytest.raises(ConfigError, match=words) as e:
            positions_of(ds, ref, 0)
        assert "\n" not in str(e.value)
