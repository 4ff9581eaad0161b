"""Who yields which units: split an epoch's remaining positions over ranks, batches and workers.

State of an epoch is the set of *remaining* positions of the shuffled unit order, kept as sorted
disjoint ranges (``[[0, N)]`` at the start of an epoch).  With ``M`` remaining, world size ``W`` and
batch size ``B``:

* every rank gets ``S = M // (W * B)`` batches, rank ``r`` the remaining positions
  ``[r*S*B, (r+1)*S*B)`` (indices into the flattened remaining list), batch ``j`` the ``B`` after
  ``j*B``; the ``M - S*W*B`` leftover positions are dropped for this pass and *reported*;
* in ``exact`` mode (doc mode: evaluation, exactly once) nothing is dropped and ranks differ by at most
  one unit (batch size 1);
* worker ``w`` of ``nw`` yields the rank's batches ``j % nw == w`` in order (or groups of k consecutive
  batches, :func:`worker_transfers`), which DataLoader's in-order round robin turns back into the rank's
  sequence, whatever ``nw`` is.

After every rank consumed ``k`` batches the remaining ranges lose those ``k*B`` positions per rank
(:meth:`Split.after`); leftovers stay remaining.  Re-splitting those ranges with the same ``W`` gives
every rank exactly the rest of its old sequence (bit-identical resume); with another ``W`` or ``nw`` it
gives a new split of the same positions: nothing repeated, nothing skipped.
Everything here is pure integer arithmetic; tests/test_loader_logic.py checks it with Hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

Ranges = tuple[tuple[int, int], ...]


def normalize(ranges: Iterable[Sequence[int]]) -> Ranges:
    """Sorted, merged, non-empty ``(start, end)`` pairs; ValueError on negative or inverted ranges."""
    pairs = []
    for r in ranges:
        if len(r) != 2:
            raise ValueError(f"a range must be [start, end), got {list(r)!r}")
        s, e = int(r[0]), int(r[1])
        if s < 0 or e < s:
            raise ValueError(f"invalid range [{s}, {e})")
        if e > s:
            pairs.append((s, e))
    pairs.sort()
    out: list[tuple[int, int]] = []
    for s, e in pairs:
        if out and s < out[-1][1]:
            raise ValueError(f"overlapping ranges near [{s}, {e})")
        if out and s == out[-1][1]:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return tuple(out)


def count(ranges: Ranges) -> int:
    return sum(e - s for s, e in ranges)


def slice_ranges(ranges: Ranges, lo: int, hi: int) -> Ranges:
    """The positions at flattened indices ``[lo, hi)`` of ``ranges``, as ranges."""
    out: list[tuple[int, int]] = []
    seen = 0
    for s, e in ranges:
        n = e - s
        a, b = max(lo - seen, 0), min(hi - seen, n)
        if a < b:
            out.append((s + a, s + b))
        seen += n
        if seen >= hi:
            break
    return tuple(out)


def positions(ranges: Ranges) -> np.ndarray:
    """All positions of ``ranges`` as one int64 array (meant for small slices such as one batch)."""
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in ranges])


def subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    """``ranges`` minus ``removed`` (both normalized)."""
    out: list[tuple[int, int]] = []
    rem = list(removed)
    i = 0
    for s, e in ranges:
        cur = s
        while i < len(rem) and rem[i][1] <= cur:
            i += 1
        j = i
        while j < len(rem) and rem[j][0] < e:
            rs, re_ = rem[j]
            if rs > cur:
                out.append((cur, rs))
            cur = max(cur, re_)
            j += 1
        if cur < e:
            out.append((cur, e))
    return normalize(out)


@dataclass(frozen=True)
class Split:
    """One pass over ``remaining`` by ``world`` ranks with batches of ``batch`` units."""

    remaining: Ranges
    world: int
    batch: int
    exact: bool = False

    def __post_init__(self) -> None:
        if self.world < 1 or self.batch < 1:
            raise ValueError(f"world={self.world} and batch={self.batch} must be >= 1")
        if self.exact and self.batch != 1:
            raise ValueError("exact (exactly-once) splits are unbatched: batch must be 1")

    @cached_property
    def total(self) -> int:
        return count(self.remaining)

    @property
    def steps(self) -> int:
        """Batches per rank (pad/pack: the same on every rank; exact: the largest rank's count)."""
        if self.exact:
            return -(-self.total // self.world)
        return self.total // (self.world * self.batch)

    @property
    def dropped(self) -> int:
        """Remaining units no rank yields in this pass (0 in exact mode)."""
        return 0 if self.exact else self.total - self.steps * self.world * self.batch

    def rank_span(self, rank: int) -> tuple[int, int]:
        """Flattened indices ``[lo, hi)`` of the remaining list that ``rank`` yields."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside [0, {self.world})")
        if self.exact:
            q, r = divmod(self.total, self.world)
            lo = rank * q + min(rank, r)
            return lo, lo + q + (1 if rank < r else 0)
        per = self.steps * self.batch
        return rank * per, (rank + 1) * per

    def rank_steps(self, rank: int) -> int:
        lo, hi = self.rank_span(rank)
        return (hi - lo) // self.batch

    def batch_ranges(self, rank: int, j: int) -> Ranges:
        """Remaining positions of batch ``j`` of ``rank`` (in the order they fill the batch)."""
        if not 0 <= j < self.rank_steps(rank):
            raise IndexError(f"batch {j} outside [0, {self.rank_steps(rank)}) for rank {rank}")
        lo, _ = self.rank_span(rank)
        return slice_ranges(self.remaining, lo + j * self.batch, lo + (j + 1) * self.batch)

    def consumed(self, k: int) -> Ranges:
        """Positions yielded once every rank has delivered ``k`` batches (fewer on ranks that ran out)."""
        if k < 0:
            raise ValueError(f"k={k} must be >= 0")
        parts: list[tuple[int, int]] = []
        for rank in range(self.world):
            lo, hi = self.rank_span(rank)
            parts.extend(slice_ranges(self.remaining, lo, min(hi, lo + k * self.batch)))
        return normalize(parts)

    def after(self, k: int) -> Ranges:
        """The remaining ranges once every rank has delivered ``k`` batches."""
        return subtract(self.remaining, self.consumed(k))


def worker_steps(steps: int, worker: int, num_workers: int) -> range:
    """The rank's batch numbers that DataLoader worker ``worker`` of ``num_workers`` produces, in order."""
    if not 0 <= worker < num_workers:
        raise ValueError(f"worker {worker} outside [0, {num_workers})")
    return range(worker, steps, num_workers)


def worker_transfers(steps: int, worker: int, num_workers: int, per_transfer: int) -> Iterator[range]:
    """The rank's batches a worker produces, grouped into transfers of ``per_transfer`` consecutive batches.

    Transfer i holds batches ``[i*k, (i+1)*k)`` and goes to worker ``i % num_workers``, so the in-order round
    robin still yields batches 0, 1, 2, ...  One DataLoader item per transfer amortizes the per-item cost
    of the worker queues (hundreds of microseconds) over k batches.
    """
    if per_transfer < 1:
        raise ValueError(f"per_transfer={per_transfer} must be >= 1")
    for i in worker_steps(-(-steps // per_transfer), worker, num_workers):
        yield range(i * per_transfer, min((i + 1) * per_transfer, steps))
