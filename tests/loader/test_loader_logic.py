"""Property tests of the loader's pure rules: the epoch order (order.py) and the rank/worker split
(distribute.py).  No files, no torch: every guarantee that is arithmetic is checked here against a
brute-force reference with Hypothesis; tests/test_loader_data.py checks the same on real shards."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.loader import distribute as D
from shardprep.loader.order import BlockShuffle, EpochStream, Layout, doc_order, permutation

FAST = settings(max_examples=examples(150), deadline=None)

# -- helpers ------------------------------------------------------------------------------------------


def as_set(ranges) -> set[int]:
    return {p for s, e in ranges for p in range(s, e)}


ranges_st = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=6).map(
    lambda xs: D.normalize(_disjoint(xs))
)


def _disjoint(xs):
    """Turn arbitrary (start, length) pairs into disjoint ranges (drop overlaps)."""
    taken: set[int] = set()
    out = []
    for s, n in sorted(xs):
        cells = [p for p in range(s, s + n) if p not in taken]
        if cells and cells == list(range(cells[0], cells[0] + len(cells))):
            out.append((cells[0], cells[0] + len(cells)))
            taken.update(cells)
    return out


def round_robin(per_worker: list[list]) -> list:
    """What DataLoader's in-order iterator does with IterableDataset workers: cycle, skip exhausted."""
    its = [iter(x) for x in per_worker]
    active = list(range(len(its)))
    out = []
    while active:
        for w in list(active):
            try:
                out.append(next(its[w]))
            except StopIteration:
                active.remove(w)
    return out


def rank_sequence(split: D.Split, rank: int, num_workers: int) -> list[tuple[int, ...]]:
    """The batches (as position tuples) a rank delivers when its batches are spread over workers."""
    steps = split.rank_steps(rank)
    per_worker = [[tuple(D.positions(split.batch_ranges(rank, j))) for j in D.worker_steps(steps, w, num_workers)]
                  for w in range(num_workers)]
    return round_robin(per_worker)


# -- ranges -------------------------------------------------------------------------------------------


@FAST
@given(ranges_st, ranges_st)
def test_subtract_matches_set_difference(a, b):
    assert as_set(D.subtract(a, b)) == as_set(a) - as_set(b)
    assert D.normalize(D.subtract(a, b)) == D.subtract(a, b)


@FAST
@given(ranges_st, st.integers(0, 80), st.integers(0, 80))
def test_slice_ranges_is_list_slice(a, lo, hi):
    flat = sorted(as_set(a))
    assert list(D.positions(D.slice_ranges(a, lo, hi))) == flat[lo:hi]


def test_normalize_rejects_bad_ranges():
    assert D.normalize([(5, 7), (0, 2), (2, 3), (9, 9)]) == ((0, 3), (5, 7))
    for bad in ([(3, 1)], [(-1, 2)], [(0, 5), (4, 6)], [(1, 2, 3)]):
        with pytest.raises(ValueError):
            D.normalize(bad)


# -- distribution ---------------------------------------------------------------------------------------

world_st = st.integers(1, 7)
batch_st = st.integers(1, 6)


@FAST
@given(ranges_st, world_st, batch_st, st.integers(1, 5))
def test_equal_steps_disjoint_complete_but_reported_remainder(remaining, world, batch, nw):
    split = D.Split(remaining, world, batch)
    seen: list[int] = []
    for rank in range(world):
        seq = rank_sequence(split, rank, nw)
        assert len(seq) == split.steps == split.rank_steps(rank)       # guarantee 1: same count everywhere
        assert all(len(b) == batch for b in seq)
        seen.extend(p for b in seq for p in b)
    assert len(seen) == len(set(seen))                                   # guarantee 2: nothing twice
    assert set(seen) <= as_set(remaining)
    assert len(as_set(remaining)) - len(seen) == split.dropped          # ... and the rest is reported
    assert 0 <= split.dropped < world * batch


@FAST
@given(ranges_st, world_st, st.integers(1, 5))
def test_exact_mode_yields_everything_once(remaining, world, nw):
    split = D.Split(remaining, world, 1, exact=True)
    counts = []
    seen: list[int] = []
    for rank in range(world):
        seq = rank_sequence(split, rank, nw)
        counts.append(len(seq))
        seen.extend(p for b in seq for p in b)
    assert sorted(seen) == sorted(as_set(remaining)) and split.dropped == 0
    assert max(counts) - min(counts) <= 1 and max(counts) == split.steps


@FAST
@given(ranges_st, world_st, batch_st, st.integers(1, 6), st.integers(1, 6))
def test_rank_sequence_independent_of_worker_count(remaining, world, batch, nw1, nw2):
    split = D.Split(remaining, world, batch)
    for rank in range(world):
        assert rank_sequence(split, rank, nw1) == rank_sequence(split, rank, nw2)


@FAST
@given(ranges_st, world_st, batch_st, st.data())
def test_resume_same_world_is_bit_identical(remaining, world, batch, data):
    split = D.Split(remaining, world, batch)
    k = data.draw(st.integers(0, split.steps))
    resumed = D.Split(split.after(k), world, batch)
    assert resumed.steps == split.steps - k
    for rank in range(world):
        full = rank_sequence(split, rank, data.draw(st.integers(1, 4)))
        assert rank_sequence(resumed, rank, data.draw(st.integers(1, 4))) == full[k:]


@FAST
@given(st.integers(0, 120), batch_st, st.lists(st.tuples(world_st, st.floats(0, 1)), min_size=1, max_size=4),
       st.booleans())
def test_resume_across_world_sizes_repeats_and_skips_nothing(n, batch, stops, exact):
    """Run an epoch in segments, each with its own world size, stopping after a fraction of the steps."""
    if exact:
        batch = 1
    remaining = D.normalize([(0, n)])
    seen: list[int] = []
    for i, (world, frac) in enumerate(stops):
        split = D.Split(remaining, world, batch, exact=exact)
        last = i == len(stops) - 1
        k = split.steps if last else int(frac * split.steps)
        for rank in range(world):
            for j in range(min(k, split.rank_steps(rank))):
                seen.extend(D.positions(split.batch_ranges(rank, j)).tolist())
        remaining = split.after(k)
    assert len(seen) == len(set(seen))
    assert set(seen) | as_set(remaining) == set(range(n))
    assert not set(seen) & as_set(remaining)
    if exact:
        assert remaining == ()
    else:
        assert D.count(remaining) == split.dropped


@FAST
@given(st.integers(0, 60), st.integers(1, 6), st.integers(1, 9))
def test_transfers_keep_batch_order(steps, nw, k):
    per_worker = [list(D.worker_transfers(steps, w, nw, k)) for w in range(nw)]
    assert [j for t in round_robin(per_worker) for j in t] == list(range(steps))
    assert all(1 <= len(t) <= k for w in per_worker for t in w)


def test_worker_steps_and_errors():
    assert list(D.worker_steps(7, 1, 3)) == [1, 4]
    assert list(D.worker_steps(2, 3, 4)) == []          # more workers than batches: idle, not an error
    with pytest.raises(ValueError):
        D.worker_steps(3, 2, 2)
    with pytest.raises(ValueError):
        D.Split(((0, 4),), 0, 1)
    split = D.Split(((0, 10),), 3, 3)
    assert (split.steps, split.dropped) == (1, 1)
    with pytest.raises(IndexError):
        split.batch_ranges(0, 1)


# -- order ------------------------------------------------------------------------------------------------

sizes_st = st.lists(st.lists(st.integers(0, 9), min_size=0, max_size=4), min_size=1, max_size=5)


def brute_stream(chunks: list[list[int]], seed: int, epoch: int, shuffle: bool) -> list[tuple[int, int, int]]:
    """Reference: every (shard, chunk, unit-in-chunk stream position), in stream order, built naively."""
    shard_tot = [sum(c) for c in chunks]
    out = []
    for shard in permutation(len(chunks), seed=seed, epoch=epoch, kind=1, shuffle=shuffle):
        cs = chunks[shard]
        assert sum(cs) == shard_tot[shard]
        for chunk in permutation(len(cs), seed=seed, epoch=epoch, kind=2, index=(int(shard),), shuffle=shuffle):
            out.extend((int(shard), int(chunk), p) for p in range(cs[chunk]))
    return out


def make_stream(chunks, seed, epoch, shuffle, touched=None):
    def chunk_sizes(shard):
        if touched is not None:
            touched.add(shard)
        return np.array(chunks[shard], dtype=np.int64)

    return EpochStream(np.array([sum(c) for c in chunks]), chunk_sizes, seed=seed, epoch=epoch, shuffle=shuffle)


@FAST
@given(sizes_st, st.integers(0, 2**32), st.integers(0, 5), st.booleans(), st.integers(1, 7))
def test_stream_pieces_cover_each_unit_once_in_order(chunks, seed, epoch, shuffle, row):
    stream = make_stream(chunks, seed, epoch, shuffle)
    ref = brute_stream(chunks, seed, epoch, shuffle)
    assert stream.total == len(ref)
    got = []
    for start in range(0, stream.total, row):      # consecutive rows, the last one short
        n = min(row, stream.total - start)
        pieces = stream.pieces(start, n)
        assert sum(p.n for p in pieces) == n and all(p.n > 0 for p in pieces)
        got.extend((p.shard, p.chunk, p.start + i) for p in pieces for i in range(p.n))
    assert got == ref
    for u in range(stream.total):
        p = stream.locate(u)
        assert (p.shard, p.chunk, p.start) == ref[u]


def test_shuffle_false_is_index_order_and_epochs_differ():
    chunks = [[3, 2], [4], [1, 1, 1], [5, 0, 2]]
    plain = brute_stream(chunks, 7, 0, False)
    assert [(s, c) for s, c, _ in plain] == sorted((s, c) for s, c, _ in plain)
    a, b = brute_stream(chunks, 7, 0, True), brute_stream(chunks, 7, 1, True)
    assert a != b and sorted(a) == sorted(b) == sorted(plain)
    assert brute_stream(chunks, 7, 0, True) == a                     # deterministic
    assert list(doc_order(5, seed=1, epoch=0, shard=0, chunk=0, shuffle=False)) == [0, 1, 2, 3, 4]
    assert not np.array_equal(doc_order(50, seed=1, epoch=0, shard=0, chunk=0, shuffle=True),
                              doc_order(50, seed=1, epoch=1, shard=0, chunk=0, shuffle=True))
    # distinct kinds never share a generator even when the index is zero-padded
    assert not np.array_equal(permutation(40, seed=3, epoch=0, kind=2, index=(0,)),
                              permutation(40, seed=3, epoch=0, kind=3, index=(0, 0)))


def test_only_touched_shards_are_opened():
    touched: set[int] = set()
    chunks = [[10, 10], [10], [5, 5], [20]]
    stream = make_stream(chunks, 1, 0, True, touched)
    p = stream.pieces(0, 3)
    assert touched == {p[0].shard}


@FAST
@given(st.integers(0, 300), st.integers(1, 40), st.integers(0, 100), st.booleans())
def test_block_shuffle_permutes_within_blocks(n, block, seed, shuffle):
    bs = BlockShuffle(n, block, seed=seed, epoch=0, shuffle=shuffle, cache=2)
    units = bs.units(np.arange(n))
    assert sorted(units.tolist()) == list(range(n))
    assert np.array_equal(units // block, np.arange(n) // block)          # stays inside its block
    rev = np.arange(n)[::-1].copy()
    assert np.array_equal(bs.units(rev), units[::-1])                       # vectorized == pointwise
    if not shuffle:
        assert np.array_equal(units, np.arange(n))


def test_layout_skips_empty_items_and_checks_range():
    lay = Layout(np.array([3, 0, 2]), np.array([0, 1, 2]))
    slot, item, inner = lay.locate(np.array([0, 2, 3, 4]))
    assert item.tolist() == [0, 0, 2, 2] and inner.tolist() == [0, 2, 0, 1]
    with pytest.raises(IndexError):
        lay.locate(5)


# -- world ------------------------------------------------------------------------------------------------


def test_world_precedence(monkeypatch):
    from shardprep.errors import ConfigError
    from shardprep.loader.world import resolve_world, worker_slot

    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    assert (resolve_world().rank, resolve_world().world_size) == (0, 1)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert (resolve_world().rank, resolve_world().world_size, resolve_world().source) == (3, 8, "SLURM_PROCID/SLURM_NTASKS")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (resolve_world().rank, resolve_world().world_size) == (1, 2)          # torchrun's vars win over Slurm's
    assert (resolve_world(rank=0).rank, resolve_world(rank=0).world_size) == (0, 2)
    w = resolve_world(rank=4, world_size=5)
    assert (w.rank, w.world_size, w.source) == (4, 5, "arguments")
    with pytest.raises(ConfigError, match="rank=5"):
        resolve_world(rank=5, world_size=5)
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="WORLD_SIZE='two'"):
        resolve_world()
    assert worker_slot() == (0, 1)
