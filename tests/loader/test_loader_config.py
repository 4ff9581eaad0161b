"""The loader's door (shardprep/loader/config.py, layout.py): keywords -> one typed LoaderConfig, the source,
the placement; conversions kept, and each wrong combination refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardprep.errors import ConfigError, InputDataError
from shardprep.loader.config import (
    Dataset,
    LegacyTars,
    LoaderConfig,
    config_from,
    from_keywords,
    source_from,
    storage_from,
)
from shardprep.loader.layout import Doc, Extras, Pack, Pad, layout_of
from shardprep.loader.mixture import MixSpec
from shardprep.loader.world import Placement
from shardprep.storage.locations import StorageOptions
from shardprep.storage.s3 import ClientOptions


def refusal(exc: type[Exception], match: str, fn, *args, **kwargs) -> str:
    """The error's message, checked to be one line."""
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# -- layouts -------------------------------------------------------------------------------------------
def test_mode_strings_become_typed_layouts_with_the_old_conversions():
    assert layout_of("pack", 2048) == Pack(2048)
    assert layout_of("pad", "16", 3.0) == Pad(16, 3)
    assert layout_of("pad", 16) == Pad(16, None)
    assert layout_of("doc") == Doc() and layout_of("doc", 7) == Doc(7)
    numpy_len = layout_of("pack", np.int64(64))
    assert numpy_len == Pack(64) and type(numpy_len.seq_len) is int          # states serialize plain ints
    assert type(Pack(np.int32(8)).seq_len) is int
    assert (Pack.name, Pad.name, Doc.name) == ("pack", "pad", "doc")
    assert (Pack.unit_name, Pad.unit_name, Doc.unit_name) == ("rows", "documents", "documents")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Pack(8).seq_len = 9  # type: ignore[misc]


def test_layout_refusals_are_one_line():
    refusal(ConfigError, r"seq_len=None is invalid: mode='pack' needs seq_len >= 1", layout_of, "pack")
    refusal(ConfigError, r"seq_len=None is invalid: mode='pad' needs seq_len >= 1", layout_of, "pad")
    refusal(ConfigError, r"seq_len=0 is invalid: mode='pack' needs seq_len >= 1", Pack, 0)
    refusal(ConfigError, r"seq_len=True is invalid", Pack, True)
    refusal(ConfigError, r"seq_len=-1 is invalid: mode='doc'", Doc, -1)
    refusal(ConfigError, r"seq_len='two' is invalid: must be a whole number", layout_of, "pack", "two")
    refusal(ConfigError, r"mode='packed' is invalid: one of \('pack', 'pad', 'doc'\)", layout_of, "packed", 8)
    refusal(ConfigError, r"pad_id=0 is invalid for mode='doc': only mode='pad' pads", layout_of, "doc", None, 0)
    refusal(ConfigError, r"pad_id=0 is invalid for mode='pack'", layout_of, "pack", 8, 0)
    refusal(ConfigError, r"pad_id='x' is invalid", Pad, 8, "x")


# -- storage -------------------------------------------------------------------------------------------
def test_the_older_storage_keywords_fold_into_the_one_storage_argument():
    assert storage_from() == StorageOptions()
    folded = storage_from(endpoint_url="http://127.0.0.1:9000", storage_options={"token": "anon"})
    assert folded == StorageOptions(s3=ClientOptions(endpoint_url="http://127.0.0.1:9000"), fsspec={"token": "anon"})
    s3 = ClientOptions(profile="p")
    assert storage_from(s3=s3).s3 == s3
    given = StorageOptions(s3=s3)
    assert storage_from(given) is given


def test_storage_given_twice_is_refused_in_one_line():
    storage = StorageOptions()
    refusal(ConfigError, r"storage=\.\.\. and endpoint_url=\.\.\. both given", storage_from, storage,
            endpoint_url="http://x")
    refusal(ConfigError, r"storage=\.\.\. and s3=\.\.\. both given", storage_from, storage, s3=ClientOptions())
    refusal(ConfigError, r"storage=\.\.\. and storage_options=\.\.\. both given", storage_from, storage,
            storage_options={})
    refusal(ConfigError, r"endpoint_url=.* and s3=.* both given", storage_from, endpoint_url="http://x",
            s3=ClientOptions())
    refusal(ConfigError, r"storage=.* is invalid: a StorageOptions", LoaderConfig, layout=Pack(8),
            storage={"endpoint_url": "x"})


# -- the config ----------------------------------------------------------------------------------------
def test_keywords_build_one_frozen_config_with_the_constructors_defaults():
    assert config_from({"seq_len": 8}) == LoaderConfig(layout=Pack(8))
    cfg = config_from({"mode": "pad", "seq_len": 32, "pad_id": 0, "seed": np.int64(3), "shuffle": 0,
                       "shuffle_block": 4, "return_position_ids": True, "return_doc_info": True, "verify": True,
                       "cache_bytes": 1 << 20, "endpoint_url": "http://e"})
    assert cfg == LoaderConfig(layout=Pad(32, 0), seed=3, shuffle=False, shuffle_block=4,
                               extras=Extras(position_ids=True, doc_info=True), verify=True, cache_bytes=1 << 20,
                               storage=StorageOptions(s3=ClientOptions(endpoint_url="http://e")))
    assert type(cfg.seed) is int and cfg.shuffle is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        LoaderConfig(Pack(8))  # type: ignore[misc]  # keyword-only: no option by position


def test_config_refusals_are_one_line():
    refusal(ConfigError, r"seed=-1 is invalid: must be >= 0", LoaderConfig, layout=Pack(8), seed=-1)
    refusal(ConfigError, r"shuffle_block=0 is invalid: must be >= 1", LoaderConfig, layout=Doc(), shuffle_block=0)
    refusal(ConfigError, r"pad_id=3 is invalid for mode='doc'", config_from, {"mode": "doc", "pad_id": 3})
    refusal(ConfigError, r"seq_len=None is invalid: mode='pack'", config_from, {})


def test_the_door_splits_keywords_into_source_config_and_placement(tmp_path):
    url = "s3://bucket/data"
    source, cfg, placement = from_keywords(url, None, {"seq_len": 16, "rank": 1, "world_size": 4})
    assert source == Dataset(url) and cfg == LoaderConfig(layout=Pack(16)) and placement == Placement(1, 4)
    source, same, placement = from_keywords(url, cfg, {"world_size": 2, "total_tokens": 1000})
    assert same is cfg and placement == Placement(None, 2)
    assert isinstance(source, MixSpec) and source.total_tokens == 1000 and source.sources[0].location == url
    refusal(ConfigError, r"config=LoaderConfig\(\.\.\.\) and seq_len= both given", from_keywords, url, cfg,
            {"seq_len": 8})
    refusal(ConfigError, r"config=.* is invalid: a LoaderConfig", from_keywords, url, {"seq_len": 8}, {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'seqlen'"):
        from_keywords(url, None, {"seqlen": 8})  # type: ignore[typeddict-unknown-key]


def test_placement_keeps_each_given_value_over_the_default():
    assert Placement(None, 4).over(Placement(1, 2)) == Placement(1, 4)
    assert Placement().over(Placement(0, 1)) == Placement(0, 1)
    assert Placement(2, 3).resolve().source == "arguments"


# -- the source ----------------------------------------------------------------------------------------
@pytest.mark.requires("loader")
def test_the_source_is_decided_once_from_the_paths_shape(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.json").write_text("{}")
    assert source_from(out) == Dataset(str(out))
    assert source_from("gs://b/x") == Dataset("gs://b/x")
    assert source_from(Dataset("s3://b/x.json")) == Dataset("s3://b/x.json")     # typed: never re-guessed
    tars = [tmp_path / "a.tar", tmp_path / "b.tar"]
    for t in tars:
        t.write_bytes(b"")
    assert source_from([str(t) for t in tars]) == LegacyTars(tuple(str(t) for t in tars))
    assert source_from(str(tmp_path / "*.tar")) == LegacyTars(tuple(str(t) for t in tars))
    mix = source_from([("s3://b/web", 0.7), ("s3://b/code", 0.3)])
    assert isinstance(mix, MixSpec) and [s.weight for s in mix.sources] == [0.7, 0.3]
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"sources": [{"path": "web", "weight": 1}]}))
    assert isinstance(source_from(spec), MixSpec)
    one = source_from(Dataset("s3://b/x"), total_tokens=10)
    assert isinstance(one, MixSpec) and one.total_tokens == 10


def test_source_refusals_are_one_line(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.json").write_text("{}")
    refusal(InputDataError, r"without index.json: the job is not finalized", source_from, job)
    refusal(ConfigError, r"path=3: expected a dataset", source_from, 3)
    refusal(ConfigError, r"no index.json there and not a directory", source_from, str(tmp_path / "nothing"))
    refusal(ConfigError, r"total_tokens=5 needs finalized outputs", source_from, LegacyTars(("a.tar",)),
            total_tokens=5)
    refusal(ConfigError, r"path=\[\] is empty", source_from, [])


def test_wds_pack_takes_a_pack_or_its_seq_len():
    from shardprep.wds import pack

    assert pack(Pack(16)).layout == pack(16).layout == Pack(16)
    assert pack(np.int64(16)).seq_len == 16
    refusal(ConfigError, "seq_len=0 is invalid", pack, 0)


def test_shard_dataset_takes_a_config_and_matches_its_keywords(tmp_path, sample_tokenizer):
    pytest.importorskip("torch")
    from loader_helpers import make_dataset

    from shardprep.loader import ShardDataset, make_dataloader

    out = make_dataset(tmp_path / "d", sample_tokenizer, [40, 25])
    cfg = LoaderConfig(layout=Pad(24, 0), seed=5, extras=Extras(doc_info=True))
    by_config = ShardDataset(Dataset(str(out)), cfg)
    by_keywords = ShardDataset(out, mode="pad", seq_len=24, pad_id=0, seed=5, return_doc_info=True)
    assert by_config.config == by_keywords.config and (by_config.mode, by_config.seq_len) == ("pad", 24)
    a, b = (list(make_dataloader(ds, batch_size=4, rank=0, world_size=1)) for ds in (by_config, by_keywords))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all((x[k] == y[k]).all() for k in x)
    loader = make_dataloader(ShardDataset(out, seq_len=8, rank=0, world_size=3), batch_size=1, world_size=2)
    assert (loader.world().rank, loader.world().world_size) == (0, 2)     # the loader's value wins, per value
    refusal(ConfigError, r"storage=\.\.\. and endpoint_url=\.\.\. both given", ShardDataset, out, seq_len=8,
            storage=StorageOptions(), endpoint_url="http://x")
    refusal(ConfigError, r"pad_id=1 is invalid for mode='doc'", ShardDataset, out, mode="doc", pad_id=1)
