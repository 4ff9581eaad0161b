"""A run's timeline: which positions of which epoch every global step reads, on every rank.

The loader's order is a pure function of the data and the seed; what a *run* reads at step ``n`` also
depends on its history: where it resumed, on how many ranks, with which batch size, and what it skipped.
That history is a list of *legs*.  A leg starts at a global step (batches delivered per rank since the
run began, counted from 0: the batch a training log calls "step 1" is step 0 here) in some epoch with some
remaining positions, and from there the run goes on with the leg's world and batch: the rest of that
epoch (``distribute.Split`` of ``remaining``), then epoch after epoch, each starting with every position
``[0, units)`` minus ``removed(epoch)`` (what skips took out of it), until the next leg starts.  A new leg
begins at each resume, each skip and each jump of epoch; the loader state records them (docs/loader.md,
"Skips and the state").

Every query is integer arithmetic over ``Split``: O(legs + epochs crossed), never a loop over steps, so
step 10**6 is answered at once.  Epochs from ``steady_from`` on lose nothing to skips and all have the
same step count, so crossing them is one division.  No torch, no files.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D

Removed = Callable[[int], D.Ranges]


def _nothing(epoch: int) -> D.Ranges:
    return ()


@dataclass(frozen=True)
class Leg:
    """A stretch of the run with one world size and batch; see the module docstring."""

    step: int             # global step where the leg starts
    epoch: int
    world: int
    batch: int            # units per batch (1 in doc mode)
    exact: bool           # doc mode: nothing dropped, ranks may differ by one unit (``D.Split`` exact)
    remaining: D.Ranges   # positions of ``epoch`` left at the leg's start

    def split(self) -> D.Split:
        return D.Split(self.remaining, self.world, self.batch, self.exact)

    def to_list(self) -> list:
        """The state's form: ``[step, epoch, world, batch, exact, [[start, end], ...]]`` (a flat list, so
        torch.distributed.checkpoint keeps it as one value)."""
        return [self.step, self.epoch, self.world, self.batch, self.exact, [list(r) for r in self.remaining]]

    @classmethod
    def from_list(cls, item: Sequence) -> "Leg":
        try:
            step, epoch, world, batch, exact, remaining = item
            leg = cls(int(step), int(epoch), int(world), int(batch), bool(exact), D.normalize(remaining))
            leg.split()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"loader state: malformed leg {item!r} ({e})") from None
        if leg.step < 0 or leg.epoch < 0:
            raise ConfigError(f"loader state: leg {item!r} has a negative step or epoch")
        return leg


def rank_of(split: D.Split, index: int) -> tuple[int, int] | None:
    """``(rank, batch number)`` that reads flattened index ``index`` of ``split.remaining``; None: dropped."""
    if split.exact:
        q, r = divmod(split.total, split.world)
        big = r * (q + 1)                        # ranks < r hold q + 1 positions each
        rank = index // (q + 1) if index < big else r + (index - big) // q if q else split.world
        if rank >= split.world:
            return None
        lo, _ = split.rank_span(rank)
        return rank, index - lo
    per = split.steps * split.batch
    if per == 0 or index >= per * split.world:
        return None
    rank = index // per
    return rank, (index - rank * per) // split.batch


def index_in(ranges: D.Ranges, position: int) -> int | None:
    """The flattened index of ``position`` in ``ranges`` (None: not there)."""
    starts = [s for s, _ in ranges]
    i = bisect_right(starts, position) - 1
    if i < 0 or position >= ranges[i][1]:
        return None
    return sum(e - s for s, e in ranges[:i]) + position - ranges[i][0]


@dataclass(frozen=True)
class Segment:
    """One epoch's stretch inside a leg: steps ``[start, end)`` read ``split`` from its batch 0."""

    epoch: int
    split: D.Split
    start: int
    end: int


class Timeline:
    """The legs of a run and what follows the last one; see the module docstring.

    ``removed(epoch)``: the positions skips took out of ``epoch`` (normalized ranges); it is asked only for
    epochs a leg does not start in.  ``steady_from``: from this epoch on ``removed`` is empty (None: never
    assumed; with the default ``removed`` every epoch is steady).
    """

    def __init__(self, legs: Sequence[Leg], units: int, removed: Removed | None = None, *,
                 steady_from: int | None = None):
        if not legs:
            raise ValueError("a timeline needs at least one leg")
        self.legs = sorted(legs, key=lambda leg: leg.step)
        if self.legs[0].step != 0:
            raise ValueError(f"the first leg starts at step {self.legs[0].step}, not 0")
        self._steps = [leg.step for leg in self.legs]
        if len(set(self._steps)) != len(self._steps):
            raise ValueError("two legs start at the same step")
        self.units = int(units)
        self._removed = removed if removed is not None else _nothing
        self.steady_from = 0 if removed is None else steady_from
        self._splits: dict[tuple[int, int, int, bool], D.Split] = {}

    @classmethod
    def fresh(cls, units: int, world: int, batch: int, exact: bool = False, removed: Removed | None = None, *,
              steady_from: int | None = None) -> "Timeline":
        """A run that has not resumed or skipped: one leg from step 0, epoch 0."""
        first = D.subtract(D.normalize([(0, units)]), (removed or _nothing)(0))
        return cls([Leg(0, 0, world, batch, exact, first)], units, removed, steady_from=steady_from)

    @classmethod
    def from_state(cls, state: dict, removed: Removed | None = None) -> "Timeline":
        """The timeline of a saved loader state (format /2, docs/loader.md "Skips and the state"): its legs,
        and the positions its step skips removed per epoch, joined with ``removed``: what its document skips
        remove, which takes the data to compute (``skips.DocumentPositions(dataset, documents)``; required
        when the state skips documents)."""
        try:
            legs = [Leg.from_list(item) for item in state["legs"]]
            units = int(state["units"])
            skips = state.get("skips") or {}
            by_steps = {int(e): D.normalize(r) for e, r in skips.get("removed", [])}
            documents = len(skips.get("documents", []))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"loader state: no legs and skips to follow ({e}); a state of format /1 records "
                              f"none") from None
        if documents and removed is None:
            raise ConfigError(f"loader state: it skips {documents} documents, whose positions take the data to "
                              f"compute: pass removed=skips.DocumentPositions(dataset, documents)")
        if not by_steps and removed is None:
            return cls(legs, units)

        def both(epoch: int) -> D.Ranges:
            mine = by_steps.get(epoch, ())
            return union(mine, removed(epoch)) if removed is not None else mine
        return cls(legs, units, both, steady_from=None if documents else max(by_steps, default=-1) + 1)

    # -- the epochs ------------------------------------------------------------------------------------
    def removed(self, epoch: int) -> D.Ranges:
        return () if self.steady_from is not None and epoch >= self.steady_from else self._removed(epoch)

    def epoch_split(self, epoch: int, leg: Leg) -> D.Split:
        """The split of a whole ``epoch`` with ``leg``'s world and batch (cached)."""
        key = (epoch if self.steady_from is None or epoch < self.steady_from else -1, leg.world, leg.batch, leg.exact)
        sp = self._splits.get(key)
        if sp is None:
            remaining = D.subtract(D.normalize([(0, self.units)]), self.removed(epoch))
            sp = self._splits[key] = D.Split(remaining, leg.world, leg.batch, leg.exact)
        return sp

    def _limit(self, i: int) -> int | None:
        return self.legs[i + 1].step if i + 1 < len(self.legs) else None

    def _jump(self, leg: Leg, epoch: int, start: int, to_step: int | None, to_epoch: int | None) -> tuple[int, int]:
        """From ``epoch`` starting at step ``start``, with ``leg``'s world and batch: whole epochs skipped
        until the one that reads step ``to_step`` (or until epoch ``to_epoch``); its ``(epoch, start)``."""
        empty = 0
        while to_epoch is None or epoch < to_epoch:
            n = self.epoch_split(epoch, leg).steps
            if self.steady_from is not None and epoch >= self.steady_from:
                if n == 0:
                    raise ConfigError(f"{leg.world} ranks x batch {leg.batch}: an epoch of {self.units} units "
                                      f"gives no rank a batch")
                k = (to_epoch - epoch) if to_epoch is not None else max(0, (to_step or 0) - start) // n
                return epoch + k, start + k * n
            if to_step is not None and start + n > to_step:
                break
            epoch, start = epoch + 1, start + n
            empty = empty + 1 if n == 0 else 0
            if empty > 10_000:
                raise ConfigError("skips leave no batch in 10000 epochs in a row: no step reads anything")
        return epoch, start

    def segments(self, i: int) -> Iterator[Segment]:
        """Leg ``i``'s epochs in order, until the next leg starts (endless for the last leg)."""
        leg, limit = self.legs[i], self._limit(i)
        sp, epoch, start = leg.split(), leg.epoch, leg.step
        while limit is None or start < limit:
            end = start + sp.steps if limit is None else min(limit, start + sp.steps)
            yield Segment(epoch, sp, start, end)
            epoch, start = epoch + 1, start + sp.steps
            sp = self.epoch_split(epoch, leg)

    def _segment_at(self, step: int) -> Segment:
        """The segment that reads global ``step`` (the epoch whose split still has a batch there)."""
        if step < 0:
            raise ValueError(f"step {step} is negative")
        i = bisect_right(self._steps, step) - 1
        leg = self.legs[i]
        sp = leg.split()
        if step < leg.step + sp.steps:
            return Segment(leg.epoch, sp, leg.step, leg.step + sp.steps)
        epoch, start = self._jump(leg, leg.epoch + 1, leg.step + sp.steps, step, None)
        sp = self.epoch_split(epoch, leg)
        return Segment(epoch, sp, start, start + sp.steps)

    # -- queries ---------------------------------------------------------------------------------------
    def batch(self, step: int, rank: int) -> tuple[int, D.Ranges]:
        """``(epoch, positions)`` that ``rank`` reads at global ``step``, in batch order (doc mode: empty
        where the rank has run out of documents before the others)."""
        seg = self._segment_at(step)
        j = step - seg.start
        if j >= seg.split.rank_steps(rank):
            return seg.epoch, ()
        return seg.epoch, seg.split.batch_ranges(rank, j)

    def position(self, step: int) -> tuple[int, D.Ranges]:
        """``(epoch, remaining)`` just before global ``step`` is read: what a loader resumed there holds."""
        seg = self._segment_at(step)
        return seg.epoch, seg.split.after(step - seg.start)

    def read(self, first: int, last: int) -> dict[int, D.Ranges]:
        """Every position that steps ``first..last`` (inclusive) read on any rank, per epoch."""
        if first > last:
            return {}
        out: dict[int, list[tuple[int, int]]] = {}
        i = bisect_right(self._steps, first) - 1
        while i < len(self.legs):
            for seg in self.segments(i):
                if seg.start > last:
                    return {e: D.normalize(r) for e, r in out.items()}
                lo, hi = max(first, seg.start) - seg.start, min(last + 1, seg.end) - seg.start
                if lo < hi:
                    out.setdefault(seg.epoch, []).extend(_batches(seg.split, lo, hi))
            i += 1
        return {e: D.normalize(r) for e, r in out.items()}

    def find(self, epoch: int, position: int, *, last_step: int | None = None) -> tuple[int, int] | None:
        """``(step, rank)`` that reads ``position`` of ``epoch``; None where it is dropped (the remainder
        that keeps ranks equal), skipped, or not reached (by ``last_step``, inclusive, when given)."""
        for i, leg in enumerate(self.legs):
            if epoch < leg.epoch:
                continue
            limit = self._limit(i)
            if epoch == leg.epoch:
                sp, start = leg.split(), leg.step
            else:
                first = leg.split()
                _, start = self._jump(leg, leg.epoch + 1, leg.step + first.steps, None, epoch)
                sp = self.epoch_split(epoch, leg)
            if limit is not None and start >= limit:
                continue
            index = index_in(sp.remaining, position)
            hit = None if index is None else rank_of(sp, index)
            if hit is None:
                continue
            step = start + hit[1]
            if limit is not None and step >= limit:
                continue
            return None if last_step is not None and step > last_step else (step, hit[0])
        return None


def _batches(split: D.Split, lo: int, hi: int) -> list[tuple[int, int]]:
    """The positions of batches ``[lo, hi)`` of every rank of ``split``."""
    out: list[tuple[int, int]] = []
    for rank in range(split.world):
        a, b = split.rank_span(rank)
        out.extend(D.slice_ranges(split.remaining, a + lo * split.batch, min(b, a + hi * split.batch)))
    return out


def union(*parts: D.Ranges) -> D.Ranges:
    """Normalized ranges covering every position of ``parts`` (which may overlap)."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(r for p in parts for r in p):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        elif e > s:
            merged.append((s, e))
    return tuple(merged)
