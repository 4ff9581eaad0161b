"""The loader over chat shards: packed rows of whole conversations with their labels, exact and resumable.

Every row is checked against the conversations as written (``tests/chat_data.py``): each segment of a row
is one whole conversation (or its first ``seq_len`` tokens, truncated), its labels are its ids where
trained and -100 elsewhere, on its first token and on padding; position ids restart per conversation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from chat_data import ChatCorpus, chat_corpus, lognormal_lengths
from conftest import examples
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardprep.errors import ConfigError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader.binpack import pack

IGNORE = -100


def check_row(corpus: ChatCorpus, batch: dict, i: int, seq_len: int) -> list[tuple[int, int]]:
    """Row ``i`` of a batch is whole conversations then padding, with the right labels; returns (doc, tokens)."""
    ids, labels, pos = batch["input_ids"][i], batch["labels"][i], batch["position_ids"][i]
    doc_ids, attn = batch["doc_ids"][i], batch["attention_mask"][i]
    real = int(attn.sum())
    assert bool((attn[:real] == 1).all()) and bool((attn[real:] == 0).all())
    assert bool((labels[real:] == IGNORE).all()) and bool((doc_ids[real:] == -1).all())
    found, col = [], 0
    while col < real:
        d = int(doc_ids[col])
        conv = corpus.all[d]
        take = min(conv.length, seq_len)
        assert col + take <= real and bool((doc_ids[col:col + take] == d).all())
        assert ids[col:col + take].tolist() == conv.ids[:take].tolist()             # whole, from its start
        want = np.where(conv.trained[:take], conv.ids[:take], IGNORE)
        want[0] = IGNORE                                                            # never predicted across
        assert labels[col:col + take].tolist() == want.tolist()
        assert pos[col:col + take].tolist() == list(range(take))
        found.append((d, take))
        col += take
    return found


def rows_of(loader) -> list[dict]:
    return [b for b in loader]


def epoch_rows(path, seq_len: int, epoch: int = 0, **kw) -> tuple[ShardDataset, dict[int, list[tuple[int, int]]]]:
    """Every unit of one epoch (one rank, batch 1): unit id -> its conversations, each row checked."""
    ds = ShardDataset(str(path), mode="pack", seq_len=seq_len, return_position_ids=True, return_doc_info=True, **kw)
    loader = make_dataloader(ds, batch_size=1, rank=0, world_size=1)
    loader.set_epoch(epoch)
    corpus = CORPORA[str(path)]
    out = {}
    for b in loader:
        out[int(b["unit_ids"][0])] = check_row(corpus, b, 0, seq_len)
    assert len(out) == ds.num_units
    return ds, out


CORPORA: dict[str, ChatCorpus] = {}


def make(tmp_path_factory, shards, *, chunk_tokens=400, seed=0, chat=True, plan="chat-plan") -> ChatCorpus:
    corpus = chat_corpus(tmp_path_factory.mktemp("chat"), shards, seed=seed, chunk_tokens=chunk_tokens, chat=chat,
                         plan=plan)
    CORPORA[str(corpus.root)] = corpus
    return corpus


shard_lengths = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=25), min_size=1, max_size=3)


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=shard_lengths, seq_len=st.integers(64, 400), window=st.integers(1, 30),
       overflow=st.sampled_from(["truncate", "drop"]), seed=st.integers(0, 5), epoch=st.integers(0, 2),
       chunk_tokens=st.integers(50, 800))
def test_every_conversation_once_whole_with_its_labels(tmp_path_factory, shards, seq_len, window, overflow, seed,
                                                       epoch, chunk_tokens):
    longest = max(n for s in shards for n in s)
    if overflow == "drop" and all(n > seq_len for s in shards for n in s):
        seq_len = longest                       # at least one row
    corpus = make(tmp_path_factory, shards, chunk_tokens=chunk_tokens, seed=seed)
    ds, rows = epoch_rows(corpus.root, seq_len, epoch, seed=seed, pack_window=window, overflow=overflow)
    seen = sorted(d for convs in rows.values() for d, _ in convs)
    lengths = [c.length for c in corpus.all]
    kept = [d for d, n in enumerate(lengths) if n <= seq_len or overflow == "truncate"]
    assert seen == kept                                                       # each exactly once
    stats = ds.packing_stats()
    assert stats["rows"] == ds.num_units == len(rows)
    assert stats["tokens"] == sum(t for convs in rows.values() for _, t in convs)
    long = [n for n in lengths if n > seq_len]
    if overflow == "truncate":
        assert (stats["truncated"], stats["truncated_tokens"]) == (len(long), sum(n - seq_len for n in long))
    else:
        assert (stats["dropped"], stats["dropped_tokens"]) == (len(long), sum(long))


def test_rows_are_a_pure_function_of_seed_and_epoch_and_change_order_with_the_epoch(tmp_path_factory):
    corpus = make(tmp_path_factory, [[40, 90, 10, 200, 33, 70] * 6, [120, 5, 60] * 8])
    _, a = epoch_rows(corpus.root, 256, 0, seed=3, pack_window=10)
    _, again = epoch_rows(corpus.root, 256, 0, seed=3, pack_window=10)
    _, b = epoch_rows(corpus.root, 256, 1, seed=3, pack_window=10)
    assert a == again
    assert len(a) == len(b) and a != b                          # same row count, another order


def run_rank(path, seq_len, *, rank, world, batch, epoch=0, state=None, steps=None, workers=0, **kw):
    ds = ShardDataset(str(path), mode="pack", seq_len=seq_len, return_position_ids=True, return_doc_info=True, **kw)
    loader = make_dataloader(ds, batch_size=batch, rank=rank, world_size=world, num_workers=workers)
    if state is not None:
        loader.load_state_dict(state)
    loader.set_epoch(epoch)
    n = len(loader)
    out: list[dict] = []
    if steps == 0:
        return loader, n, out
    for b in loader:
        out.append(b)
        if steps is not None and len(out) == steps:
            break
    return loader, n, out


def units_and_rows(batches: list[dict]) -> list[tuple[int, list[int]]]:
    return [(int(u), b["input_ids"][i].tolist()) for b in batches for i, u in enumerate(b["unit_ids"].tolist())]


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w1=st.integers(1, 3), w2=st.integers(1, 3), batch=st.integers(1, 3), k=st.integers(0, 3),
       seed=st.integers(0, 3))
def test_equal_steps_and_exact_resume_on_another_world_size(tmp_path_factory, w1, w2, batch, k, seed):
    corpus = CORPORA.get("resume") or make(tmp_path_factory, [[30, 80, 150, 20, 60] * 8, [100, 45, 12] * 10,
                                                              [250, 70] * 5])
    CORPORA["resume"] = corpus
    _, reference = epoch_rows(corpus.root, 200, 1, seed=seed, pack_window=12)
    full = {u: r for u, r in units_and_rows(run_rank(corpus.root, 200, rank=0, world=1, batch=1, epoch=1, seed=seed,
                                                     pack_window=12)[2])}
    assert set(full) == set(reference)
    assume(k < len(full) // (w1 * batch))          # stopped inside the epoch
    first, state = [], None
    for rank in range(w1):
        loader, n, got = run_rank(corpus.root, 200, rank=rank, world=w1, batch=batch, epoch=1, steps=k, seed=seed,
                                  pack_window=12)
        assert n == len(make_dataloader(loader.dataset, batch_size=batch, rank=0, world_size=w1))   # equal steps
        first += units_and_rows(got)
        state = state or loader.state_dict()
        assert loader.state_dict() == state                       # the same dict on every rank
    second = []
    lens = set()
    for rank in range(w2):
        _, n, got = run_rank(corpus.root, 200, rank=rank, world=w2, batch=batch, epoch=1, state=state, seed=seed,
                             pack_window=12)
        assert len(got) == n
        lens.add(n)
        second += units_and_rows(got)
    assert len(lens) == 1
    units = [u for u, _ in first + second]
    assert len(units) == len(set(units))                          # nothing twice
    assert all(full[u] == row for u, row in first + second)       # the same rows whatever the world
    assert len(full) - len(units) < w2 * batch                  # only the resumed pass's remainder is left out


def test_resume_with_workers_gives_the_uninterrupted_rows(tmp_path_factory):
    corpus = make(tmp_path_factory, [[30, 80, 150, 20, 60] * 8, [100, 45, 12] * 10])
    _, _, whole = run_rank(corpus.root, 200, rank=0, world=1, batch=2, seed=1)
    loader, _, part = run_rank(corpus.root, 200, rank=0, world=1, batch=2, steps=3, seed=1)
    _, _, rest = run_rank(corpus.root, 200, rank=0, world=1, batch=2, state=loader.state_dict(), workers=2, seed=1)
    assert units_and_rows(part + rest) == units_and_rows(whole)
    for b in rest:
        for i in range(len(b["unit_ids"])):
            check_row(corpus, b, i, 200)


def test_packing_efficiency_on_a_realistic_mix(tmp_path_factory):
    """Lognormal conversation lengths (median 500, 50..4000 tokens), seq_len 4096, default window and chunks."""
    rng = np.random.default_rng(7)
    corpus = make(tmp_path_factory, [lognormal_lengths(rng, 1500) for _ in range(3)], chunk_tokens=1 << 18)
    ds = ShardDataset(str(corpus.root), mode="pack", seq_len=4096)
    stats = ds.packing_stats()
    assert stats["efficiency"] >= 0.97, stats
    # the rows yielded hold exactly those tokens
    real = sum(int(b["attention_mask"].sum()) for b in make_dataloader(ds, batch_size=16, rank=0, world_size=1))
    dropped = make_dataloader(ds, batch_size=16, rank=0, world_size=1).dropped["units"]
    assert real <= stats["tokens"] and (dropped or real == stats["tokens"])
    assert real / ((ds.num_units - dropped) * 4096) >= 0.97


def test_the_same_shards_serve_any_seq_len(tmp_path_factory):
    corpus = make(tmp_path_factory, [[30, 80, 150, 20, 60, 300] * 5])
    for seq_len in (128, 300, 1000):
        ds, rows = epoch_rows(corpus.root, seq_len)
        assert ds.seq_len == seq_len and len(rows) == ds.packing_stats()["rows"]


def test_pad_and_doc_modes_carry_the_labels(tmp_path_factory):
    corpus = make(tmp_path_factory, [[30, 80, 150, 20], [100, 5]])
    ds = ShardDataset(str(corpus.root), mode="pad", seq_len=64, return_doc_info=True)
    for b in make_dataloader(ds, batch_size=2, rank=0, world_size=1):
        for i, d in enumerate(b["doc_ids"].tolist()):
            conv = corpus.all[d]
            n = min(conv.length, 64)
            want = np.full(64, IGNORE)
            want[:n] = np.where(conv.trained[:n], conv.ids[:n], IGNORE)
            want[0] = IGNORE
            assert b["labels"][i].tolist() == want.tolist()
            assert int(b["attention_mask"][i].sum()) == n
    docs = list(ShardDataset(str(corpus.root), mode="doc", shuffle=False))
    assert len(docs) == len(corpus.all)
    for item in docs:
        conv = corpus.all[item["doc_id"]]
        want = np.where(conv.trained, conv.ids, IGNORE)
        want[0] = IGNORE
        assert item["labels"].tolist() == want.tolist() and item["input_ids"].tolist() == conv.ids.tolist()


def test_a_mixture_of_chat_and_pretraining_rows(tmp_path_factory):
    chat = make(tmp_path_factory, [[30, 80, 150, 20, 60] * 6])
    text = make(tmp_path_factory, [[200, 300, 90] * 10], chat=False, plan="text-plan")
    ds = ShardDataset([(str(chat.root), 0.5), (str(text.root), 0.5)], mode="pack", seq_len=200,
                      return_position_ids=True, return_doc_info=True)
    assert list(ds.packing_stats().values())[0]["rows"] == ds.mixture.units[0]
    loader = make_dataloader(ds, batch_size=4, rank=0, world_size=1)
    sources = set()
    for b in loader:
        for i, src in enumerate(b["source_ids"].tolist()):
            sources.add(src)
            if src == 0:
                check_row(chat, b, i, 200)
            else:                                   # pretraining rows: fully trained, no padding
                assert torch.equal(b["labels"][i], b["input_ids"][i])
                assert bool((b["attention_mask"][i] == 1).all())
    assert sources == {0, 1}
    state = loader.state_dict()
    assert state["packing"] == {"window": 1024, "overflow": "truncate"}


def test_refusals(tmp_path_factory):
    corpus = make(tmp_path_factory, [[30, 80, 150, 20]])
    with pytest.raises(ConfigError, match="overflow='cut'"):
        ShardDataset(str(corpus.root), mode="pack", seq_len=64, overflow="cut")
    with pytest.raises(ConfigError, match="pack_window=0"):
        ShardDataset(str(corpus.root), mode="pack", seq_len=64, pack_window=0)
    state = make_dataloader(ShardDataset(str(corpus.root), mode="pack", seq_len=64, pack_window=2),
                            batch_size=1, rank=0, world_size=1).state_dict()
    other = make_dataloader(ShardDataset(str(corpus.root), mode="pack", seq_len=64, pack_window=3), batch_size=1,
                            rank=0, world_size=1)
    with pytest.raises(ConfigError, match="packing="):
        other.load_state_dict(state)


@given(lengths=st.lists(st.integers(0, 600), max_size=60), seq_len=st.integers(1, 500),
       overflow=st.sampled_from(["truncate", "drop"]), seed=st.integers(0, 9))
def test_binpack_keeps_conversations_whole_and_its_row_count_ignores_the_order(lengths, seq_len, overflow, seed):
    arr = np.array(lengths, dtype=np.int64)
    pk = pack(arr, seq_len, overflow)
    members = sorted(pk.members.tolist())
    assert members == [i for i, n in enumerate(lengths) if n > 0 and (n <= seq_len or overflow == "truncate")]
    for r in range(pk.rows):
        m, takes = pk.row(r)
        assert 0 < int(takes.sum()) <= seq_len and m.tolist() == sorted(m.tolist())
    shuffled = np.random.default_rng(seed).permutation(arr)
    assert pack(shuffled, seq_len, overflow).rows == pk.rows


def test_a_mixture_resumes_on_another_world_size_with_the_same_rows(tmp_path_factory):
    chat = make(tmp_path_factory, [[30, 80, 150, 20, 60] * 6, [90, 10] * 8])
    text = make(tmp_path_factory, [[200, 300, 90] * 10], chat=False, plan="text-plan")
    mix = [(str(chat.root), 0.7), (str(text.root), 0.3)]

    def run(rank: int, world: int, state: dict | None = None, steps: int | None = None) -> tuple[dict, list]:
        ds = ShardDataset(mix, mode="pack", seq_len=200, seed=2, return_doc_info=True)
        loader = make_dataloader(ds, batch_size=2, rank=rank, world_size=world)
        if state is not None:
            loader.load_state_dict(state)
        got = []
        for b in loader:
            got.append(b)
            if len(got) == steps:
                break
        return loader.state_dict(), units_and_rows(got)

    _, whole = run(0, 1)
    reference = dict(whole)
    first, state = [], {}
    for rank in range(2):
        state, got = run(rank, 2, steps=2)
        first += got
    second = [row for rank in range(3) for row in run(rank, 3, state)[1]]
    positions = [u for u, _ in first + second]
    assert len(positions) == len(set(positions)) and len(reference) - len(positions) < 3 * 2
    assert all(reference[u] == row for u, row in first + second)


def test_mix_counts_a_chat_sources_rows_as_the_loader_does(tmp_path):
    """`shardprep mix` sizes a chat source by its packed rows (not tokens // seq_len), so its epochs agree."""
    import json as _json

    from helpers import run_cli

    chat = chat_corpus(tmp_path / "chat", [lognormal_lengths(np.random.default_rng(3), 300, median=120, hi=900)])
    spec = tmp_path / "mix.json"
    spec.write_text(_json.dumps({"sources": [{"name": "sft", "path": str(chat.root), "weight": 1.0}]}))
    got = _json.loads(run_cli("mix", spec, "--seq-len", "256", "--json").stdout)
    ds = ShardDataset(spec, mode="pack", seq_len=256, seed=0)
    expected = ds.mixture.table()
    assert [r["epochs"] for r in got["sources"]] == [r["epochs"] for r in expected]
    tokens = sum(len(c.ids) for c in chat.all)
    assert ds.chat_rows[0].rows != tokens // 256     # truncation and padding: not what the token count makes
