"""The loader on real shards written by the real pipeline: modes, exact coverage, pad == EOS labels,
validation errors, legacy token_ids.json tars, tiny datasets with many ranks x workers, resume."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest
import torch
from helpers import run_cli, shard_documents
from loader_helpers import documents_by_shard, make_dataset, reference_stream, write_legacy_tars
from remote_servers import REMOTE_BACKENDS, dataset_in

from shardprep.errors import EXIT_INCOMPLETE, ConfigError, IncompleteError, InputDataError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.shard.index import IndexContractError

UNEVEN = [3, 250, 40, 600, 12]          # documents per shard: very different shard sizes
# Where the exactness and resume tests read the dataset: locally and from every remote store's emulator.
STORES = ["local"] + [pytest.param(b, marks=(pytest.mark.slow, pytest.mark.live)) for b in REMOTE_BACKENDS]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("uneven"), sample_tokenizer, UNEVEN)


@pytest.fixture
def uneven_in(request, uneven) -> tuple[Path | str, dict]:
    """``(location, storage kwargs)`` of ``uneven`` in the store named by the test's parameter."""
    return dataset_in(request, request.param, uneven)


@pytest.fixture(scope="module")
def single(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("single"), sample_tokenizer, [30], seed=5)


def eos_of(output: Path) -> int:
    return orjson.loads((output / "index.json").read_bytes())["tokenizer"]["eos_id"]


def run_ranks(ds_kwargs: dict, path: Path, world: int, batch: int, workers: int, epoch: int = 0) -> list[list[dict]]:
    """Every rank's batches of one epoch, ranks simulated in this process with explicit rank/world_size."""
    out = []
    for rank in range(world):
        loader = make_dataloader(ShardDataset(path, **ds_kwargs), batch_size=batch, num_workers=workers, rank=rank,
                                 world_size=world)
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == len(loader)
        out.append(batches)
    return out


# -- modes and coverage -------------------------------------------------------------------------------


@pytest.mark.parametrize("uneven_in", STORES, indirect=True)
def test_doc_mode_unshuffled_is_index_order(uneven, uneven_in):
    where, storage = uneven_in
    docs = list(ShardDataset(where, mode="doc", shuffle=False, **storage))
    assert [d["input_ids"].tolist() for d in docs] == shard_documents(uneven)
    assert [d["doc_id"] for d in docs] == list(range(sum(UNEVEN)))
    assert docs[3]["shard"] == "shard-00001.tar" and docs[3]["doc"] == 0
    assert docs[0]["input_ids"].dtype == torch.int64


@pytest.mark.parametrize("uneven_in,world,workers,shuffle",
                         [("local", 1, 0, False), ("local", 3, 2, True), ("local", 2, 3, True)]
                         + [pytest.param(b, 3, 2, True, marks=(pytest.mark.slow, pytest.mark.live)) for b in REMOTE_BACKENDS],
                         indirect=["uneven_in"])
def test_pack_rows_are_the_stream_cut_into_rows(uneven, uneven_in, world, workers, shuffle):
    seq, batch = 64, 4
    kwargs = dict(mode="pack", seq_len=seq, seed=11, shuffle=shuffle, shuffle_block=37, return_doc_info=True,
                  return_position_ids=True)
    where, storage = uneven_in
    ranks = run_ranks({**kwargs, **storage}, where, world, batch, workers)
    ids, stream = reference_stream(uneven, seed=11, epoch=0, shuffle=shuffle)
    stream = np.array(stream)
    n_rows = len(stream) // seq
    assert len({len(r) for r in ranks}) == 1                          # equal steps on every rank
    seen = []
    for batches in ranks:
        for b in batches:
            assert b["input_ids"].shape == (batch, seq) and b["input_ids"].dtype == torch.int64
            assert torch.equal(b["labels"], b["input_ids"])
            for row, unit in zip(b["input_ids"], b["unit_ids"].tolist()):
                assert row.tolist() == stream[unit * seq:(unit + 1) * seq].tolist()
                seen.append(unit)
            check_segments(b, seq)
    assert len(seen) == len(set(seen))                                  # no row (token) twice
    dropped = n_rows - len(seen)
    assert 0 <= dropped < world * batch
    loader = make_dataloader(ShardDataset(uneven, **kwargs), batch_size=batch, rank=0, world_size=world)
    assert loader.dropped["units"] == dropped and loader.dropped["tail_tokens"] == len(stream) - n_rows * seq
    if not shuffle:
        assert seen == list(range(len(seen)))


def check_segments(b: dict, seq: int) -> None:
    """position_ids restart exactly where doc_ids change (and at row starts); cu_seqlens agree."""
    doc, pos = b["doc_ids"], b["position_ids"]
    starts = torch.ones_like(doc, dtype=torch.bool)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    assert torch.equal(pos == 0, starts)
    expected = torch.cat([torch.nonzero(starts.flatten()).flatten(), torch.tensor([doc.numel()])])
    assert torch.equal(b["cu_seqlens"].long(), expected) and b["cu_seqlens"].dtype == torch.int32


def test_pad_mode_keeps_eos_labels_when_pad_equals_eos(uneven):
    eos = eos_of(uneven)
    seq = 48
    ds = ShardDataset(uneven, mode="pad", seq_len=seq, pad_id=eos, seed=2, return_doc_info=True)
    loader = make_dataloader(ds, batch_size=8)
    docs = [d for shard in documents_by_shard(uneven) for d in shard]
    truncated = real_eos = 0
    for b in loader:
        for ids, labels, mask, doc_id in zip(b["input_ids"], b["labels"], b["attention_mask"], b["doc_ids"]):
            doc = docs[int(doc_id)]
            n = min(len(doc), seq)
            assert ids[:n].tolist() == doc[:n] and ids[n:].eq(eos).all()
            assert labels[:n].tolist() == doc[:n] and labels[n:].eq(-100).all()
            assert mask.tolist() == [1] * n + [0] * (seq - n)
            if len(doc) <= seq:
                assert labels[n - 1] == eos                  # the real EOS keeps its label
                real_eos += 1
            else:
                truncated += 1
    assert real_eos > 100 and truncated > 10                  # both cases were exercised


def test_more_ranks_and_workers_than_shards(single):
    world, workers, batch = 3, 2, 2
    ranks = run_ranks(dict(mode="pad", seq_len=32, seed=4), single, world, batch, workers)
    steps = {len(r) for r in ranks}
    assert len(steps) == 1 and steps.pop() == 30 // (world * batch)
    ranks = run_ranks(dict(mode="pad", seq_len=32, seed=4, return_doc_info=True), single, world, batch, workers)
    ids = [i for r in ranks for b in r for i in b["doc_ids"].tolist()]
    assert len(ids) == len(set(ids)) == 30
    docs = [[d["doc_id"] for d in ShardDataset(single, mode="doc", rank=r, world_size=4)] for r in range(4)]
    assert sorted(i for d in docs for i in d) == list(range(30)) and {len(d) for d in docs} == {7, 8}


def test_epochs_reorder_every_rank_and_are_deterministic(uneven):
    kwargs = dict(mode="pad", seq_len=16, seed=9, return_doc_info=True)
    e0 = run_ranks(kwargs, uneven, 2, 4, 0, epoch=0)
    e1 = run_ranks(kwargs, uneven, 2, 4, 0, epoch=1)
    again = run_ranks(kwargs, uneven, 2, 4, 2, epoch=1)
    for r in range(2):
        a = [b["doc_ids"].tolist() for b in e0[r]]
        b_ = [b["doc_ids"].tolist() for b in e1[r]]
        assert a != b_ and set(map(tuple, a)) != set(map(tuple, b_))
        assert b_ == [b["doc_ids"].tolist() for b in again[r]]
    shard0 = {tuple(b["doc_ids"].tolist()) for b in e0[0]}
    assert shard0 != {tuple(b["doc_ids"].tolist()) for b in e1[0]}


# -- resume -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("uneven_in", STORES, indirect=True)
def test_resume_in_new_loader_is_identical_and_survives_set_epoch(uneven, uneven_in):
    kwargs = dict(mode="pack", seq_len=32, seed=5, shuffle_block=50)
    full = [b["input_ids"] for b in make_dataloader(ShardDataset(uneven, **kwargs), batch_size=4)]
    where, storage = uneven_in
    loader = make_dataloader(ShardDataset(where, **kwargs, **storage), batch_size=4, num_workers=2,
                             batches_per_transfer=3)
    it = iter(loader)
    first = [next(it)["input_ids"] for _ in range(7)]
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    fresh = make_dataloader(ShardDataset(where, **kwargs, **storage), batch_size=4, num_workers=1)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)                                    # the usual loop head must not undo the resume
    assert len(fresh) == len(full) - 7
    rest = [b["input_ids"] for b in fresh]
    assert all(torch.equal(a, b) for a, b in zip(first + rest, full)) and len(first + rest) == len(full)
    assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["remaining"] == [[0, fresh.dataset.num_units]]
    nxt = [b["input_ids"] for b in fresh]                 # no set_epoch: continues with epoch 1
    assert len(nxt) == len(full) and not torch.equal(nxt[0], full[0])


@pytest.mark.parametrize("uneven_in", STORES, indirect=True)
def test_resume_with_other_world_size_repeats_and_skips_nothing(uneven_in):
    where, storage = uneven_in
    kwargs = dict(mode="pad", seq_len=16, seed=3, return_doc_info=True, **storage)
    seen: list[int] = []
    loaders = [make_dataloader(ShardDataset(where, **kwargs), batch_size=5, rank=r, world_size=2) for r in range(2)]
    for ld in loaders:
        it = iter(ld)
        for _ in range(10):
            seen.extend(next(it)["doc_ids"].tolist())
    state = loaders[0].state_dict()
    assert state == loaders[1].state_dict()               # a global position, the same on every rank
    dropped = 0
    for r in range(3):
        ld = make_dataloader(ShardDataset(where, **kwargs), batch_size=5, num_workers=2, rank=r, world_size=3)
        ld.load_state_dict(state)
        seen.extend(i for b in ld for i in b["doc_ids"].tolist())
        dropped = ld.dropped["units"]
    assert len(seen) == len(set(seen))
    assert len(seen) + dropped == sum(UNEVEN)


def test_state_mismatch_is_refused(uneven):
    a = make_dataloader(ShardDataset(uneven, mode="pack", seq_len=32, seed=1), batch_size=2)
    b = make_dataloader(ShardDataset(uneven, mode="pack", seq_len=32, seed=2), batch_size=2)
    with pytest.raises(ConfigError, match="seed=1"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ConfigError, match="format"):
        b.load_state_dict({"remaining": []})


# -- validation ---------------------------------------------------------------------------------------


@pytest.fixture()
def copy_of(uneven, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(uneven, dst, ignore=shutil.ignore_patterns("logs"))
    return dst


def edit_json(path: Path, **changes) -> None:
    d = orjson.loads(path.read_bytes())
    d.update(changes)
    path.write_bytes(orjson.dumps(d))


def drain(path: Path, **kwargs) -> None:
    for _ in make_dataloader(ShardDataset(path, mode="pack", seq_len=16, **kwargs), batch_size=2):
        pass


def test_refuses_shard_from_other_tokenizer_or_format(copy_of):
    edit_json(copy_of / "shard-00003.json", tokenizer_fingerprint="0" * 64)
    with pytest.raises(InputDataError, match="shard-00003.json.*tokenizer_fingerprint.*different tokenizer"):
        drain(copy_of)
    with pytest.raises(InputDataError, match="shard-00003"):
        ShardDataset(copy_of, mode="doc", verify=True)
    edit_json(copy_of / "index.json", format_version=4)          # a later release's format
    with pytest.raises(InputDataError, match="format_version 4 is not supported"):
        ShardDataset(copy_of, mode="doc")
    edit_json(copy_of / "index.json", format_version=2)          # chat data's format, but no trained tokens
    with pytest.raises(IndexContractError, match="totals.trained_tokens"):
        ShardDataset(copy_of, mode="doc")


def test_refuses_index_that_does_not_match_files(copy_of):
    with open(copy_of / "shard-00001.tar", "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(IncompleteError, match=r"shard-00001.tar: \d+ bytes but index.json says"):
        ShardDataset(copy_of, mode="doc")
    (copy_of / "shard-00001.tar").unlink()
    with pytest.raises(IncompleteError, match="shard-00001.tar: listed in index.json but missing"):
        ShardDataset(copy_of, mode="doc")
    (copy_of / "index.json").unlink()
    with pytest.raises(InputDataError, match="without index.json: the job is not finalized"):
        ShardDataset(copy_of, mode="doc")


def test_refuses_truncated_and_corrupt_shards(copy_of):
    # truncated, with index and sidecar edited to agree with the short file: only reading can tell
    name = "shard-00003.tar"
    size = (copy_of / name).stat().st_size // 2
    with open(copy_of / name, "r+b") as f:
        f.truncate(size)
    index = orjson.loads((copy_of / "index.json").read_bytes())
    index["totals"]["bytes"] -= index["shards"][3]["bytes"] - size      # the index kept self-consistent
    index["shards"][3]["bytes"] = size
    (copy_of / "index.json").write_bytes(orjson.dumps(index))
    edit_json(copy_of / "shard-00003.json", bytes=size)
    with pytest.raises(InputDataError, match=f"corrupt or truncated shard .*{name}.*truncated"):
        drain(copy_of, shuffle=False)
    # garbage document lengths in another shard
    side = orjson.loads((copy_of / "shard-00001.json").read_bytes())
    with open(copy_of / "shard-00001.tar", "r+b") as f:
        f.seek(side["chunks"]["doclens_offset"][0])
        f.write(b"\xff\xff")
    ds = ShardDataset(copy_of, mode="doc", shuffle=False)
    with pytest.raises(InputDataError, match="corrupt shard .*shard-00001.tar.*document lengths"):
        list(ds)
    with pytest.raises(IncompleteError, match="shard-00001.tar: sha256"):
        ShardDataset(copy_of, mode="doc", verify=True)


def test_refuses_token_ids_beyond_the_vocabulary_without_verify(copy_of):
    """A flipped byte in a token payload (sizes and sidecar intact) must not reach training as an id the
    embedding table does not have; `verify` names it too."""
    index = orjson.loads((copy_of / "index.json").read_bytes())
    vocab = index["tokenizer"]["vocab_size"]
    side = orjson.loads((copy_of / "shard-00003.json").read_bytes())
    chunk = len(side["chunks"]["key"]) - 1
    with open(copy_of / "shard-00003.tar", "r+b") as f:
        f.seek(side["chunks"]["tokens_offset"][chunk] + 2)         # the chunk's second token
        f.write(b"\xff\xff")                                        # id 65535 (uint16)
    assert vocab <= 0xFFFF
    key = side["chunks"]["key"][chunk]
    for mode in ("pack", "doc"):
        with pytest.raises(InputDataError, match=rf"corrupt shard .*shard-00003.tar: sample {key} \(chunk {chunk}\) "
                                                 rf"holds token id 65535 >= vocab size {vocab}"):
            for _ in ShardDataset(copy_of, mode=mode, seq_len=16, shuffle=False):
                pass
    verify = run_cli("verify", copy_of, check=EXIT_INCOMPLETE)
    assert f"sample {key}: token id 65535 >= vocab size {vocab}" in verify.stdout + verify.stderr


def test_refuses_settings_that_cannot_make_one_batch(uneven):
    tokens = orjson.loads((uneven / "index.json").read_bytes())["totals"]["tokens"]
    ds = ShardDataset(uneven, mode="pack", seq_len=tokens // 10)
    with pytest.raises(ConfigError, match=rf"seq_len={tokens // 10} batch_size=4 world_size=3: the dataset has "
                                          rf"{tokens} tokens = 10 rows.*4 x 3 = 12 rows"):
        make_dataloader(ds, batch_size=4, world_size=3, rank=0)
    with pytest.raises(ConfigError, match="seq_len=None"):
        ShardDataset(uneven, mode="pad")
    with pytest.raises(ConfigError, match="mode='packed'"):
        ShardDataset(uneven, mode="packed", seq_len=8)
    with pytest.raises(ConfigError, match="batch_size=4 is invalid for mode='doc'"):
        make_dataloader(ShardDataset(uneven, mode="doc"), batch_size=4)


# -- legacy -------------------------------------------------------------------------------------------


def test_legacy_token_ids_json_tars(uneven, tmp_path):
    docs = shard_documents(uneven)[:300]
    paths = write_legacy_tars(tmp_path / "legacy", docs, per_tar=70)
    got = [d["input_ids"].tolist() for d in ShardDataset(tmp_path / "legacy", mode="doc", shuffle=False)]
    assert got == docs
    brace = str(tmp_path / "legacy" / "legacy-{000..001}.tar")
    assert len(list(ShardDataset(brace, mode="doc", shuffle=False))) == 140
    assert len(list(ShardDataset(str(tmp_path / "legacy" / "*.tar"), mode="doc"))) == 300
    flat = [t for d in docs for t in d]
    n_rows = len(flat) // 40
    ds = ShardDataset([str(p) for p in paths], mode="pack", seq_len=40, shuffle=False)
    rows = torch.cat([b["input_ids"] for b in make_dataloader(ds, batch_size=1, num_workers=2)])
    assert rows.flatten().tolist() == flat[:n_rows * 40]
    ds = ShardDataset([str(p) for p in paths], mode="pack", seq_len=40, seed=1)
    loader = make_dataloader(ds, batch_size=3, num_workers=2)
    rows = torch.cat([b["input_ids"] for b in loader])
    assert rows.shape[0] == len(loader) * 3 == n_rows - n_rows % 3
    counts = np.bincount(rows.flatten().numpy(), minlength=max(flat) + 1)
    assert (counts <= np.bincount(flat, minlength=max(flat) + 1)).all()   # no token used twice
    pad = next(iter(make_dataloader(ShardDataset(paths[0], mode="pad", seq_len=8, pad_id=0), batch_size=2)))
    assert pad["labels"].shape == (2, 8)
    bad = tmp_path / "bad.tar"
    write_legacy_tars(tmp_path / "badsrc", [[1, 2]], per_tar=1, extra_member=False)[0].rename(bad)
    with open(bad, "r+b") as f:                            # break the JSON payload
        f.seek(512)
        f.write(b"{")
    with pytest.raises(InputDataError, match="bad.tar"):
        ShardDataset(bad, mode="doc")


def test_dropped_is_logged(uneven, caplog):
    caplog.set_level(logging.INFO, logger="shardprep.loader")
    loader = make_dataloader(ShardDataset(uneven, mode="pad", seq_len=8), batch_size=7, rank=0, world_size=2)
    next(iter(loader))
    assert f"dropping {sum(UNEVEN) % 14} documents" in caplog.text
