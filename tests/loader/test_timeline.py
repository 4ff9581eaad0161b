"""The run's timeline (loader/timeline.py) against a step-by-step simulation of the run, with Hypothesis.

The simulation reads the run one step at a time with ``distribute.Split`` (what the loader does); the
timeline answers any step or position by arithmetic.  They must agree on every batch of every rank, on
which step reads a position (``find``), and on what a step range reads (``read``)."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.timeline import Leg, Timeline

FAST = settings(max_examples=examples(120), deadline=None)


def simulate(units, changes, removed, steps, exact=False):
    """The run step by step: ``changes`` maps a step to (world, batch) taking effect there (step 0 first).
    Returns (legs, batches): batches[step] = [(epoch, positions) per rank]."""
    full = D.normalize([(0, units)])
    world, batch = changes[0]
    epoch, split, k = 0, D.Split(D.subtract(full, removed(0)), world, batch, exact), 0
    legs, out = [Leg(0, 0, world, batch, exact, split.remaining)], []
    for step in range(steps):
        if step in changes and step:
            world, batch = changes[step]
            split, k = D.Split(split.after(k), world, batch, exact), 0
            legs.append(Leg(step, epoch, world, batch, exact, split.remaining))
        guard = 0
        while k >= split.steps:
            epoch, k, guard = epoch + 1, 0, guard + 1
            split = D.Split(D.subtract(full, removed(epoch)), world, batch, exact)
            assert guard < 50
        out.append([(epoch, split.batch_ranges(r, k) if k < split.rank_steps(r) else ()) for r in range(world)])
        k += 1
    return legs, out


@st.composite
def runs(draw, exact=False):
    units = draw(st.integers(1, 60))
    first = (draw(st.integers(1, 4)), 1 if exact else draw(st.integers(1, 3)))
    if first[0] * first[1] > units:
        first = (1, 1)
    changes = {0: first}
    for step in draw(st.lists(st.integers(1, 40), max_size=3, unique=True)):
        w, b = draw(st.integers(1, 4)), 1 if exact else draw(st.integers(1, 3))
        changes[step] = (w, b) if w * b <= units // 2 else (1, 1)
    gone = {e: draw(st.lists(st.tuples(st.integers(0, units), st.integers(0, 4)), max_size=3))
            for e in range(draw(st.integers(0, 3)))}
    removed_map = {e: D.normalize(_merge([(s, min(s + n, units)) for s, n in v])) for e, v in gone.items()}
    return units, changes, removed_map


def _merge(pairs):
    out = []
    for s, e in sorted(pairs):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def _check(units, changes, removed_map, exact):
    removed = lambda e: removed_map.get(e, ())      # noqa: E731
    steps = 50
    legs, sim = simulate(units, changes, removed, steps, exact)
    tl = Timeline(legs, units, removed, steady_from=len(removed_map))
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for step, per_rank in enumerate(sim):
        world = len(per_rank)
        for rank, (epoch, ranges) in enumerate(per_rank):
            assert tl.batch(step, rank) == (epoch, ranges)
            for p in D.positions(ranges).tolist():
                assert (epoch, p) not in seen               # every position read once per epoch
                seen[(epoch, p)] = (step, rank)
        if not exact:
            assert all(r for _, r in per_rank) and world     # equal steps: every rank has a batch
    last = steps - 1
    for (epoch, p), where in seen.items():
        assert tl.find(epoch, p, last_step=last) == where
    last_epoch = max(e for e, _ in seen)
    for epoch in range(last_epoch):                 # whole epochs: a position not read is removed or dropped
        for p in range(units):
            if (epoch, p) not in seen:
                assert tl.find(epoch, p, last_step=last) is None
    a, b = 7, 23
    expect: dict[int, list] = {}
    for step in range(a, b + 1):
        for epoch, r in sim[step]:
            expect.setdefault(epoch, []).extend(r)
    assert tl.read(a, b) == {e: D.normalize(r) for e, r in expect.items() if r}


@FAST
@given(runs())
def test_timeline_matches_a_step_by_step_run(run):
    _check(*run, exact=False)


@FAST
@given(runs(exact=True))
def test_timeline_matches_in_exact_doc_mode(run):
    _check(*run, exact=True)


def test_position_is_what_a_resumed_loader_holds():
    tl = Timeline.fresh(100, 3, 4)
    assert tl.position(0) == (0, ((0, 100),))
    epoch, rem = tl.position(5)
    assert epoch == 0 and D.count(rem) == 100 - 5 * 12
    assert tl.position(8) == (1, ((0, 100),))      # 8 steps per epoch: step 8 is epoch 1's first


def test_a_far_step_is_arithmetic_and_legs_cut_epochs():
    """Step 10**12 (billions of epochs on): answered by arithmetic over the legs and the steady epochs, not a
    walk over steps or epochs (which would never return), and found back."""
    legs = [Leg(0, 0, 2, 4, False, ((0, 1000),)), Leg(50, 0, 3, 2, False, ((400, 1000),))]
    tl = Timeline(legs, 1000)
    epoch, ranges = tl.batch(10**12, 2)
    assert epoch > 10**9
    hit = tl.find(epoch, ranges[0][0])
    assert hit == (10**12, 2)
    assert tl.find(0, 0) == (0, 0) and tl.find(0, 401) is not None


def test_removed_epochs_are_crossed_one_by_one_and_an_empty_run_refused():
    removed = {1: ((0, 10),), 2: ((0, 5),)}
    tl = Timeline.fresh(10, 1, 2, removed=lambda e: removed.get(e, ()), steady_from=3)
    assert tl.batch(5, 0) == (2, ((5, 7),))        # epoch 1 is gone, epoch 2 has positions 5..9 (2 steps)
    assert tl.batch(7, 0) == (3, ((0, 2),))
    assert tl.find(1, 3) is None and tl.find(2, 4) is None
    with pytest.raises(ConfigError):
        Timeline.fresh(3, 2, 2).batch(0, 0)


def test_leg_round_trips_and_rejects_malformed():
    leg = Leg(5, 2, 3, 4, False, ((1, 9), (12, 30)))
    assert Leg.from_list(leg.to_list()) == leg
    with pytest.raises(ConfigError):
        Leg.from_list([1, 2, 3])
    with pytest.raises(ConfigError):
        Leg.from_list([0, 0, 0, 4, False, []])
