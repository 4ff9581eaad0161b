"""Mixtures in the loader, on real shards in this process (ranks simulated with explicit rank/world_size):
every row is its source's own row in that source's own order, shares within the schedule's bound in every
window, small sources repeat, resume across world sizes and after a changed mixture, and the refusals."""

from __future__ import annotations

import json
import logging
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pytest
import torch
from loader_helpers import build_wide_tokenizer, make_dataset, mixture_sources

from shardprep.errors import ConfigError, InputDataError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader.schedule import prefix_bound, window_bound

SEQ, BATCH = 16, 4
WEIGHTS = {"big": 0.6, "mid": 0.3, "tiny": 0.1}


@pytest.fixture(scope="module")
def sources(tmp_path_factory, sample_tokenizer) -> dict[str, Path]:
    return mixture_sources(tmp_path_factory.mktemp("mix"), sample_tokenizer)


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wide")
    return make_dataset(root, build_wide_tokenizer(root / "wide.json"), [40], seed=9)


def mix(sources: dict[str, Path], weights: dict[str, float] = WEIGHTS) -> list[tuple[str, float]]:
    return [(str(sources[n]), w) for n, w in weights.items()]


def read(loader) -> dict[int, tuple[int, bytes]]:
    """Every row the loader yields: mixture position -> (source, row bytes)."""
    out = {}
    for b in loader:
        for r in range(b["input_ids"].shape[0]):
            out[int(b["unit_ids"][r])] = (int(b["source_ids"][r]), b["input_ids"][r].numpy().tobytes())
    return out


def single_rows(path: Path, epoch: int, **kwargs) -> list[bytes]:
    ds = ShardDataset(path, mode="pack", seq_len=SEQ, **kwargs)
    ds.set_epoch(epoch)
    return [r["input_ids"].numpy().tobytes() for r in ds]


def check_windows(source_ids: list[int], shares: list[Fraction], widths=(1, 4, 10, 37, 100)) -> None:
    """Every window of every width in ``widths``: each source's count within the window bound."""
    k = len(shares)
    ids = np.array(source_ids)
    for i, w in enumerate(shares):
        c = np.concatenate([[0], np.cumsum(ids == i)])
        n = np.arange(len(c))
        assert all(abs(Fraction(int(x)) - Fraction(int(m)) * w) <= prefix_bound(k) for x, m in zip(c, n))
        for width in widths:
            counts = c[width:] - c[:-width]
            assert max(abs(Fraction(int(x)) - width * w) for x in counts) <= window_bound(k), (i, width)


def test_rows_are_each_sources_own_rows_and_shares_hold_in_every_window(sources):
    ds = ShardDataset(mix(sources), mode="pack", seq_len=SEQ, seed=3, return_doc_info=True)
    assert ds.num_units == sum(int(orjson.loads((p / "index.json").read_bytes())["totals"]["tokens"]) // SEQ
                               for p in sources.values())      # the natural length: every source's rows once
    rows = read(make_dataloader(ds, batch_size=BATCH, num_workers=2, rank=0, world_size=1))
    order = sorted(rows)
    assert order == list(range(len(order))) and len(order) > ds.num_units - BATCH
    check_windows([rows[p][0] for p in order], ds.mixture.schedule.weights)
    draws = [0, 0, 0]
    refs: dict[tuple[int, int], list[bytes]] = {}
    paths = list(sources.values())
    for p in order:                       # the k-th row from source i is that source's own k-th row
        i, got = rows[p]
        n = ds.mixture.units[i]
        epoch, k = divmod(draws[i], int(n))
        if (i, epoch) not in refs:
            refs[(i, epoch)] = single_rows(paths[i], epoch, seed=3)
        assert got == refs[(i, epoch)][k]
        draws[i] += 1
    nxt = ds.open_pass(1)                      # the next pass continues every source's sequence
    first: dict[int, int] = {}
    for s, q in zip(*(a.tolist() for a in nxt.locate(np.arange(40)))):
        first.setdefault(s, q)
    assert first == {i: int(n) for i, n in enumerate(ds.mixture.schedule.draws(ds.num_units))}
    table = {r["name"]: r for r in ds.mixture.table()}
    assert table["tiny/out"]["epochs"] > 10 and table["big/out"]["epochs"] < 1   # small repeats, large subsampled
    assert [table[n]["taken_units"] for n in ("big/out", "mid/out", "tiny/out")] == \
        ds.mixture.schedule.draws(ds.num_units).tolist()


def test_total_tokens_sets_the_length_and_a_single_dataset_can_be_read_to_a_budget(sources):
    ds = ShardDataset(mix(sources), mode="pack", seq_len=SEQ, total_tokens=SEQ * 1000 + 7)
    assert ds.num_units == 1000 and len(make_dataloader(ds, batch_size=BATCH, rank=0, world_size=3)) == 1000 // 12
    tiny = ShardDataset(sources["tiny"], mode="pack", seq_len=SEQ, total_tokens=SEQ * 100)
    got = [b["input_ids"][0].numpy().tobytes() for b in make_dataloader(tiny, batch_size=1, rank=0, world_size=1)]
    ref = single_rows(sources["tiny"], 0) + single_rows(sources["tiny"], 1) + \
        single_rows(sources["tiny"], 2) + single_rows(sources["tiny"], 3)
    assert len(got) == 100 and got == ref[:100]          # repeated, each epoch in its own order


def test_pad_and_doc_modes_schedule_documents(sources):
    pad = ShardDataset(mix(sources), mode="pad", seq_len=64, seed=1, return_doc_info=True)
    batches = list(make_dataloader(pad, batch_size=BATCH, num_workers=2, rank=1, world_size=2))
    src = torch.cat([b["source_ids"] for b in batches]).tolist()
    assert set(src) == {0, 1, 2} and all(b["labels"].shape == (BATCH, 64) for b in batches)
    mean = pad.mixture.mean_tokens
    shares = [float(w) * m for w, m in zip(pad.mixture.schedule.weights, mean.tolist())]
    assert [round(s / sum(shares), 2) for s in shares] == [0.6, 0.3, 0.1]   # document rates give token weights
    doc = ShardDataset(mix(sources), mode="doc", seed=1, total_tokens=4000)
    items = [d for r in range(3) for d in make_dataloader(doc, batch_size=None, rank=r, world_size=3)]
    assert sorted(d["unit"] for d in items) == list(range(doc.num_units))    # exactly once, nothing dropped
    assert {d["source"] for d in items} == {"big/out", "mid/out", "tiny/out"}


def test_resume_on_another_world_size_repeats_and_skips_nothing(sources):
    kwargs = dict(mode="pack", seq_len=SEQ, seed=4, return_doc_info=True)
    full = {}
    for r in range(3):
        full.update(read(make_dataloader(ShardDataset(mix(sources), **kwargs), batch_size=BATCH, rank=r, world_size=3)))
    loaders = [make_dataloader(ShardDataset(mix(sources), **kwargs), batch_size=BATCH, num_workers=2, rank=r,
                               world_size=3) for r in range(3)]
    before: dict[int, tuple[int, bytes]] = {}
    for ld in loaders:
        it = iter(ld)
        for _ in range(9):
            b = next(it)
            before.update({int(u): (int(s), ids.numpy().tobytes())
                           for u, s, ids in zip(b["unit_ids"], b["source_ids"], b["input_ids"])})
        del it
    state = json.loads(json.dumps(loaders[0].state_dict()))
    assert state == loaders[2].state_dict() and state["mixture"]["segment"]["origin"] == 0
    after: dict[int, tuple[int, bytes]] = {}
    for r in range(2):
        ld = make_dataloader(ShardDataset(mix(sources), **kwargs), batch_size=BATCH, num_workers=1, rank=r,
                             world_size=2)
        ld.load_state_dict(state)
        got = read(ld)
        assert not set(got) & set(after) and not set(got) & set(before)
        after.update(got)
        dropped = ld.dropped["units"]
    seen = {**before, **after}
    n = ShardDataset(mix(sources), **kwargs).num_units
    assert len(seen) + dropped == n and len(before) == 3 * 9 * BATCH
    assert all(seen[p] == full[p] for p in set(seen) & set(full))    # the same global schedule continued


def seqs_of(ds: ShardDataset, epoch: int, positions: list[int]) -> list[tuple[str, int]]:
    """(source name, the source's own unit sequence number) at mixture positions, from the dataset itself."""
    src, seq = ds.open_pass(epoch).locate(np.array(sorted(positions), dtype=np.int64))
    return [(ds.mixture.names[s], q) for s, q in zip(src.tolist(), seq.tolist())]


def test_resume_with_changed_weights_and_an_added_source_keeps_what_was_read(sources, sample_tokenizer, tmp_path,
                                                                            caplog):
    kwargs = dict(mode="pack", seq_len=SEQ, seed=2, return_doc_info=True)
    old = [make_dataloader(ShardDataset(mix(sources), **kwargs), batch_size=BATCH, rank=r, world_size=2)
           for r in range(2)]
    first: list[int] = []
    for ld in old:
        it = iter(ld)
        first.extend(int(u) for _ in range(25) for u in next(it)["unit_ids"])
        del it
    state = old[0].state_dict()
    read_before = seqs_of(old[0].dataset, 0, first)
    shutil.copytree(sources["tiny"], tmp_path / "again")
    with pytest.raises(ConfigError, match="'tiny/out' and 'again' are the same data"):
        ShardDataset([*mix(sources), (str(tmp_path / "again"), 0.5)], **kwargs)
    added = make_dataset(tmp_path / "added", sample_tokenizer, [30], seed=11)
    changed = [*mix(sources, {"big": 0.5, "mid": 0.2, "tiny": 0.1}), (str(added), 0.2)]
    new = ShardDataset(changed, **kwargs)
    ld = make_dataloader(new, batch_size=BATCH, rank=0, world_size=1)
    with caplog.at_level(logging.WARNING, logger="shardprep.loader.mixstate"):
        ld.load_state_dict(state)
    assert "the mixture changed" in caplog.text and f"{len(first)} rows" in caplog.text
    assert "added added/out" in caplog.text
    assert ld.state_dict()["remaining"] == [[len(first), new.num_units]]
    rest = [p for b in ld for p in b["unit_ids"].tolist()]
    read_after = seqs_of(new, 0, rest)
    for name in new.mixture.names:         # every source: nothing twice, and nothing it had left unread skipped
        seqs = sorted(q for n, q in read_before + read_after if n == name)
        assert seqs == list(range(len(seqs))), name
    shares = new.mixture.schedule.weights      # the new weights hold from the resume point on
    check_windows([new.mixture.names.index(n) for n, _ in read_after], shares, widths=(10, 50))
    again = make_dataloader(ShardDataset(changed, **kwargs), batch_size=BATCH, rank=0, world_size=1)
    again.load_state_dict(json.loads(json.dumps(ld.state_dict())))   # a resume of the resumed run: same mixture
    assert again.state_dict() == ld.state_dict()
    fewer = make_dataloader(ShardDataset(mix(sources, {"big": 0.5, "mid": 0.5}), **kwargs), batch_size=BATCH)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardprep.loader.mixstate"):
        fewer.load_state_dict(state)
    assert "no longer read (position kept): tiny/out" in caplog.text


def test_different_dtypes_mix_and_ids_are_widened(sources, wide):
    with pytest.raises(InputDataError, match="was tokenized differently from 'big/out'") as e:
        ShardDataset([(str(sources["big"]), 0.5), (str(wide), 0.5)], mode="pack", seq_len=SEQ)
    assert "\n" not in str(e.value) and "vocab_size 66" in str(e.value)
    ds = ShardDataset([(str(sources["big"]), 0.5), (str(wide), 0.5)], mode="pack", seq_len=SEQ,
                      allow_tokenizer_mismatch=True, return_doc_info=True)
    assert ds.wire_dtype == np.dtype("<u4") and ds.vocab_size > 66000
    batches = list(make_dataloader(ds, batch_size=BATCH, num_workers=2, rank=0, world_size=1))
    ids = torch.cat([b["input_ids"] for b in batches])
    src = torch.cat([b["source_ids"] for b in batches])
    assert ids.dtype == torch.int64 and int(ids[src == 1].max()) > 65535 and int(ids[src == 0].max()) < 1000


def test_spec_files_json_and_yaml_mean_the_same_as_python(sources, tmp_path):
    spec = {"sources": [{"name": n, "path": str(sources[n]), "weight": w} for n, w in WEIGHTS.items()],
            "total_tokens": 3000}
    (tmp_path / "mix.json").write_text(json.dumps(spec))
    yaml_text = "sources:\n" + "".join(f"  - name: {n}\n    path: {sources[n]}\n    weight: {w}\n"
                                        for n, w in WEIGHTS.items()) + "total_tokens: 3000\n"
    (tmp_path / "mix.yaml").write_text(yaml_text)
    kwargs = dict(mode="pack", seq_len=SEQ, seed=6, return_doc_info=True)
    want = read(make_dataloader(ShardDataset(mix(sources), total_tokens=3000, **kwargs), batch_size=BATCH))
    for name in ("mix.json", "mix.yaml"):
        ds = ShardDataset(tmp_path / name, **kwargs)
        assert ds.mixture.names == ["big", "mid", "tiny"] and ds.num_units == 3000 // SEQ
        assert read(make_dataloader(ds, batch_size=BATCH)) == want


def test_relative_paths_in_a_spec_are_relative_to_the_spec(sources, tmp_path):
    base = sources["big"].parent.parent
    (base / "mix.json").write_text(json.dumps({"sources": [
        {"path": str(sources[n].relative_to(base)), "weight": w} for n, w in WEIGHTS.items()]}))
    assert ShardDataset(base / "mix.json", mode="pack", seq_len=SEQ).mixture.names == ["big/out", "mid/out",
                                                                                       "tiny/out"]


@pytest.mark.parametrize("spec, message", [
    ({"sources": [{"path": "X", "weight": 0}]}, r"source 'X' \(.*X\): weight=0 is invalid: must be a number > 0"),
    ({"sources": [{"path": "X", "weight": -1.5}]}, "weight=-1.5 is invalid"),
    ({"sources": [{"path": "X", "weight": "0.5"}]}, "weight='0.5' is invalid"),
    ({"sources": [{"path": "X"}]}, "weight=None is invalid"),
    ({"sources": [{"path": "X", "weigth": 1}]}, "unknown key 'weigth'"),
    ({"sources": []}, "non-empty list"),
    ({"sources": [{"path": "X", "weight": 1}], "seed": 3}, "unknown key 'seed'"),
    ({"sources": [{"path": "X", "weight": 1}], "total_tokens": 0}, "total_tokens=0 is invalid"),
    ({"sources": [{"name": "a", "path": "X", "weight": 1}, {"name": "a", "path": "Y", "weight": 1}]},
     "two sources are named 'a'"),
])
def test_bad_specs_are_refused_in_one_line(spec, message, tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=message) as e:
        ShardDataset(tmp_path / "bad.json", mode="pack", seq_len=SEQ)
    assert "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path / "bad.json"))


def test_sources_that_are_not_finalized_outputs_are_refused_by_name(sources, tmp_path):
    (tmp_path / "raw").mkdir()
    with pytest.raises(InputDataError, match=r"mixture source 'raw': .*index.json does not exist") as e:
        ShardDataset([(str(sources["big"]), 0.9), (str(tmp_path / "raw"), 0.1)], mode="pack", seq_len=SEQ)
    assert "finalized output" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="spec file does not exist"):
        ShardDataset(tmp_path / "nope.yaml", mode="pack", seq_len=SEQ)
    with pytest.raises(ConfigError, match="total_tokens=100 needs finalized outputs"):
        ShardDataset([str(tmp_path / "a.tar"), str(tmp_path / "b.tar")], mode="pack", seq_len=SEQ, total_tokens=100)


def test_states_of_a_single_dataset_and_a_mixture_do_not_mix(sources):
    single = make_dataloader(ShardDataset(sources["big"], mode="pack", seq_len=SEQ), batch_size=BATCH)
    mixed = make_dataloader(ShardDataset(mix(sources), mode="pack", seq_len=SEQ), batch_size=BATCH)
    with pytest.raises(ConfigError, match="single-dataset loader"):
        mixed.load_state_dict(single.state_dict())
    with pytest.raises(ConfigError, match="saved by a mixture"):
        single.load_state_dict(mixed.state_dict())


def test_python_sources_take_any_real_weight_and_bad_entries_are_named(sources):
    ds = ShardDataset([(str(sources["big"]), np.float32(3)), (sources["mid"], np.int64(1))], mode="pack", seq_len=SEQ)
    assert ds.mixture.schedule.quotas == (3, 1)
    with pytest.raises(ConfigError, match=r"source 1: .* is neither \(path, weight\)"):
        ShardDataset([(str(sources["big"]), 0.5), (str(sources["mid"]), "0.5", "x")], mode="pack", seq_len=SEQ)
    with pytest.raises(ConfigError, match=r"source 'out' .*weight='0.5' is invalid"):
        ShardDataset([(str(sources["big"]), 0.5), {"path": str(sources["mid"]), "weight": "0.5"}], mode="pack",
                     seq_len=SEQ)
