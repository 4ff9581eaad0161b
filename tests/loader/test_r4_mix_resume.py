"""A mixture source re-tokenized at the same path (issue 31, item 12f) is not a new source: resuming the
saved state is refused in one line naming it, where it used to be logged as "added" and "no longer read"
and started over.  Renaming it in the spec adopts the new data as an added source."""

from __future__ import annotations

import logging

import pytest
from loader_helpers import make_dataset, write_uneven_corpus

from shardprep.api import tokenize_directory
from shardprep.errors import ConfigError
from shardprep.loader import ShardDataset, make_dataloader

SEQ, BATCH = 16, 4


def test_a_retokenized_source_is_refused_naming_it(tmp_path, sample_tokenizer, caplog):
    a = make_dataset(tmp_path / "a", sample_tokenizer, [20], seed=1)
    b = make_dataset(tmp_path / "b", sample_tokenizer, [10], seed=2)
    kwargs = dict(mode="pack", seq_len=SEQ, seed=2)
    loader = make_dataloader(ShardDataset([(str(a), 0.7), (str(b), 0.3)], **kwargs), batch_size=BATCH)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    del it
    # the same path, tokenized again from other documents
    tokenize_directory(write_uneven_corpus(tmp_path / "b2", [12], seed=7), b, sample_tokenizer, workers=1,
                       chunk_tokens=1500, one_file_per_task=True, overwrite=True)
    again = make_dataloader(ShardDataset([(str(a), 0.7), (str(b), 0.3)], **kwargs), batch_size=BATCH)
    with caplog.at_level(logging.WARNING, logger="shardprep.loader.mixstate"), \
            pytest.raises(ConfigError) as caught:
        again.load_state_dict(state)
    message = str(caught.value)
    assert "mixture source 'b/out' holds other data than when the state was saved" in message
    assert "re-tokenized or replaced at the same path" in message and "new 'name'" in message
    assert "added" not in caplog.text
    # the way out the hint names: the new data under a new name is an added source
    renamed = [{"path": str(a), "weight": 0.7}, {"path": str(b), "weight": 0.3, "name": "b-v2"}]
    adopted = make_dataloader(ShardDataset({"sources": renamed}, **kwargs), batch_size=BATCH)
    with caplog.at_level(logging.WARNING, logger="shardprep.loader.mixstate"):
        adopted.load_state_dict(state)
    assert "added b-v2" in caplog.text and "no longer read (position kept): b/out" in caplog.text
