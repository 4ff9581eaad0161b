"""Property tests of the mixture schedule (loader/schedule.py) and of the mixture's draw bookkeeping
(loader/mixstate.py): for random weights the documented prefix and window bounds hold, exactly, and the
schedule is a pure, deterministic function of (seed, weights) and the position."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.mixstate import Segment
from shardprep.loader.schedule import MAX_PERIOD, Schedule, prefix_bound, quotas, window_bound

FAST = settings(max_examples=examples(150), deadline=None)
# Each example builds whole schedules (~60 ms): fewer examples where the body does that more than once.
BUILDS = settings(max_examples=examples(50), deadline=None)

weights_st = st.lists(st.floats(min_value=0.05, max_value=50, allow_nan=False, allow_infinity=False),
                      min_size=1, max_size=7)
small_quotas_st = st.lists(st.integers(1, 40), min_size=1, max_size=6)


def counts_by_position(sched: Schedule, n: int) -> np.ndarray:
    """counts[i, m]: how often source i appears in positions [0, m), by brute force over locate()."""
    src, _ = sched.locate(np.arange(n))
    out = np.zeros((sched.sources, n + 1), dtype=np.int64)
    for i in range(sched.sources):
        out[i, 1:] = np.cumsum(src == i)
    return out


def test_the_bounds_as_documented():
    assert [prefix_bound(k) for k in (1, 2, 3, 4)] == [0, Fraction(1, 2), Fraction(3, 4), Fraction(5, 6)]
    assert [window_bound(k) for k in (1, 2, 3, 8)] == [0, 1, Fraction(3, 2), Fraction(13, 7)]
    assert quotas([0.6, 0.3, 0.1]) == (6, 3, 1)
    assert quotas([6, 3, 1]) == (6, 3, 1) and quotas([2, 2]) == (1, 1) and quotas([0.25]) == (1,)
    assert quotas([1 / 3, 2 / 3]) == (1, 2)


@FAST
@given(weights_st)
def test_quotas_follow_the_weights(weights):
    q = quotas(weights)
    total = sum(weights)
    assert sum(q) <= MAX_PERIOD and min(q) >= 1
    for w, qi in zip(weights, q):
        assert abs(qi / sum(q) - w / total) <= 1 / MAX_PERIOD + 1e-9


def test_weights_that_cannot_be_scheduled_are_refused():
    for bad in ([0.5, 0.0], [1.0, -2.0], []):
        with pytest.raises(ConfigError):
            quotas(bad)
    with pytest.raises(ConfigError, match="below 1/65536"):
        quotas([1.0, 1e-7, 0.3333333])


@FAST
@given(small_quotas_st, st.integers(0, 2**31), st.integers(1, 3))
def test_every_prefix_and_every_window_is_within_the_bound(qs, seed, periods):
    sched = Schedule(qs, seed=seed)
    k, period = sched.sources, sched.period
    n = periods * period + 7
    counts = counts_by_position(sched, n)
    m = np.arange(n + 1)
    pb, wb = prefix_bound(k), window_bound(k)
    for i, q in enumerate(sched.quotas):
        lag = m * q - counts[i] * period                         # period * (m * w_i - c_i(m)), exact integers
        assert np.abs(lag).max() <= pb * period
        # every window [a, b) of every length: count - W*w_i, scaled by the period
        dev = (counts[i][None, :] - counts[i][:, None]) * period - (m[None, :] - m[:, None]) * q
        upper = np.triu(np.ones_like(dev, dtype=bool))
        assert np.abs(dev[upper]).max() <= wb * period
    assert all(counts[i][period] == q for i, q in enumerate(sched.quotas))     # each period is exact


@BUILDS
@given(weights_st, st.integers(0, 2**31), st.lists(st.integers(0, 10**12), min_size=1, max_size=20))
def test_schedule_is_a_pure_function_of_seed_weights_and_position(weights, seed, positions):
    a, b = Schedule(quotas(weights), seed=seed), Schedule(quotas(list(weights)), seed=seed)
    pos = np.array(positions, dtype=np.int64)
    sa, da = a.locate(pos)
    sb, db = b.locate(pos)
    assert np.array_equal(sa, sb) and np.array_equal(da, db)
    for p, s, d in zip(positions, sa.tolist(), da.tolist()):
        assert a.locate_one(p) == (s, d)                    # the scalar path (a batch's rows) agrees
        assert a.draws(p)[s] == d                           # the draw is the source's count before p
        assert a.draws(p + 1)[s] == d + 1


@BUILDS
@given(weights_st, st.integers(0, 2**31), st.integers(0, 10**9), st.integers(1, 3000))
def test_far_windows_keep_the_bound(weights, seed, start, width):
    """Windows deep into a long run (positions up to 1e9): counts from ``draws`` only."""
    sched = Schedule(quotas(weights), seed=seed)
    c = sched.draws(start + width) - sched.draws(start)
    assert int(c.sum()) == width
    for ci, q in zip(c.tolist(), sched.quotas):
        assert abs(Fraction(ci) - Fraction(width * q, sched.period)) <= window_bound(sched.sources)


def test_the_seed_only_breaks_ties():
    patterns = {tuple(Schedule((1, 1, 1, 1), seed=s).pattern.tolist()) for s in range(20)}
    assert len(patterns) > 1
    for p in patterns:
        assert sorted(p) == [0, 1, 2, 3]


@FAST
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 8)), max_size=5), st.integers(0, 60),
       st.lists(st.integers(0, 80), min_size=1, max_size=30))
def test_segment_reads_pending_then_fresh(pending_raw, fresh_extra, draws):
    cells = sorted({s + j for s, n in pending_raw for j in range(n)})
    pending = D.normalize([(c, c + 1) for c in cells])
    fresh = (cells[-1] + 1 if cells else 0) + fresh_extra
    seg = Segment(0, (pending,), (fresh,))
    flat = cells + list(range(fresh, fresh + 100))
    assert [seg.seq(0, d) for d in draws] == [flat[d] for d in draws]
    lo, hi = min(draws), max(draws) + 1
    assert sorted(int(x) for x in D.positions(seg.seq_ranges(0, lo, hi))) == sorted(flat[lo:hi])


# -- a changed mixture on resume (mixstate.resume), with any history ----------------------------------------


class FakeIndex:
    def __init__(self, fingerprint: str):
        self.fingerprint = fingerprint


class FakeMixture:
    """What mixstate reads of a Mixture: sources (by fingerprint), quotas, pass length, the segment."""

    unit_name = "rows"

    def __init__(self, fingerprints: list[str], quotas: list[int], length: int):
        self.indexes = [FakeIndex(f) for f in fingerprints]
        self.names = list(fingerprints)
        self.schedule = Schedule(quotas, seed=0)
        self.length = length
        self.segment = Segment.start(len(fingerprints))
        self.fingerprint = repr((fingerprints, self.schedule.quotas, length))

    def read(self, epoch: int, positions) -> list[tuple[str, int]]:
        """(source fingerprint, seq) at the positions of a pass, as MixturePass.locate_one computes them."""
        out = []
        for p in positions:
            src, draw = self.schedule.locate_one(epoch * self.length + p - self.segment.origin)
            out.append((self.names[src], self.segment.seq(src, draw)))
        return out


mixture_st = st.tuples(st.lists(st.sampled_from("abcde"), min_size=1, max_size=4, unique=True),
                       st.lists(st.integers(1, 5), min_size=4, max_size=4), st.integers(4, 60))


@FAST
@given(mixture_st, st.lists(st.tuples(mixture_st, st.integers(0, 1), st.sets(st.integers(0, 59))), min_size=1,
                            max_size=3))
def test_a_changed_mixture_reads_nothing_twice_and_skips_nothing(first, changes):
    from shardprep.loader.mixstate import mixture_state, resume

    names, qs, length = first
    mix = FakeMixture(names, qs[:len(names)], length)
    epoch, remaining = 0, D.normalize([(0, length)])
    read: list[tuple[str, int]] = []
    for (names, qs, length), passes, consumed_raw in changes:
        # consume some positions of the current pass, possibly after finishing whole passes first
        for _ in range(passes):
            read += mix.read(epoch, D.positions(remaining).tolist())
            epoch, remaining = epoch + 1, D.normalize([(0, mix.length)])
        consumed = D.normalize([(p, p + 1) for p in consumed_raw if p < mix.length])
        consumed = D.normalize([r for r in consumed if D.subtract(((r[0], r[1]),), remaining) == ()])
        read += mix.read(epoch, D.positions(consumed).tolist())
        remaining = D.subtract(remaining, consumed)
        state = {"dataset": mix.fingerprint, "units": mix.length, "mixture": mixture_state(mix)}
        new = FakeMixture(names, qs[:len(names)], length)
        epoch, remaining = resume(new, state, epoch, remaining)
        mix = new
    need = {n: D.count(p) + 1 for n, p in zip(mix.names, mix.segment.pending)}
    after: list[tuple[str, int]] = []
    while any(sum(1 for n, _ in after if n == name) < k for name, k in need.items()):
        after += mix.read(epoch, D.positions(remaining).tolist())     # read on until every pending seq came up
        epoch, remaining = epoch + 1, D.normalize([(0, mix.length)])
    read += after
    for name in set(n for n, _ in read):
        seqs = sorted(q for n, q in read if n == name)
        assert len(seqs) == len(set(seqs)), f"{name}: a seq read twice"
        if name in mix.names:                  # a source still read: no gap below what it has read
            assert seqs == list(range(len(seqs))), name
