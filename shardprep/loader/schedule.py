"""The mixture schedule: which source every position of a mixture reads, fixed in advance.

Weights are turned into integer *quotas* ``q_i`` of a period ``Q = sum(q_i)``: exactly when every
weight is a fraction with a small denominator (0.6/0.3/0.1 -> 6/3/1 of 10), else apportioned over
``Q = 2**16`` (largest remainders; each weight then within ``1/Q`` of what was asked).  One period is
laid out once by Tijdeman's rule for the chairman assignment problem (R. Tijdeman, "The chairman
assignment problem", Discrete Mathematics 32, 1980): position ``n`` (1-based) goes, among the sources
whose next turn is *released* (``n*q_i/Q - c_i >= d``), to the one whose *deadline*
``(c_i + 1 - d) * Q / q_i`` is earliest, with ``d = 1/(2K-2)`` for ``K`` sources and ``c_i`` the turns
source ``i`` already had; ties go to a source order drawn from the seed.  Tijdeman proved that this
keeps every source's lag within the prefix bound below, and :func:`interleave` checks it on every
period it builds (exact integer arithmetic).  After ``Q`` positions every lag is back at zero, so the
whole schedule is that period repeated: position ``g`` reads source ``pattern[g % Q]``, and that is the
source's draw number ``(g // Q) * q_i + rank[g % Q]``.  A pure function of the position, in O(1).

Guarantees, for ``K >= 2`` sources with effective weights ``w_i = q_i / Q``:

* prefix: after any ``n`` positions, ``|c_i(n) - n*w_i| <= 1 - 1/(2K-2)``;
* window: in any ``W`` consecutive positions (anywhere, across periods and epochs), source ``i``
  appears ``c`` times with ``|c - W*w_i| <= 2 - 1/(K-1)`` (``<= 1`` for two sources): ``c`` is at
  most one more than ``ceil(W*w_i)`` and at most one less than ``floor(W*w_i)``.

For three or more sources "always within one" (``|c - W*w_i| < 1`` in every window) is impossible for
most weights (balanced sequences exist only for special rates), so this is within a fraction of a row
of the best possible.  ``K == 1`` is the trivial schedule (bounds 0).  Nothing here reads files.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

import numpy as np

from shardprep.errors import ConfigError

MAX_PERIOD = 1 << 16
_EXACT_DENOMINATOR = 10 ** 6     # weights given as decimals (0.6, 0.125) are read as the fractions meant


def prefix_bound(k: int) -> Fraction:
    """The largest ``|c_i(n) - n*w_i|`` the schedule allows after any prefix of ``n`` positions."""
    return Fraction(0) if k < 2 else 1 - Fraction(1, 2 * k - 2)


def window_bound(k: int) -> Fraction:
    """The largest ``|c - W*w_i|`` in any window of ``W`` consecutive positions."""
    return 2 * prefix_bound(k)


def quotas(weights: Sequence[float], *, resolution: int = MAX_PERIOD) -> tuple[int, ...]:
    """Integer quotas proportional to ``weights`` (all > 0), reduced to lowest terms.

    Exact when the normalized weights are fractions whose common denominator is at most
    ``resolution``; otherwise ``resolution`` is apportioned by largest remainders.
    """
    if not weights:
        raise ConfigError("a mixture needs at least one source")
    if any(not w > 0 for w in weights):
        raise ConfigError(f"weights={list(weights)!r}: every weight must be > 0")
    exact = [Fraction(w) for w in weights]
    meant = [f.limit_denominator(_EXACT_DENOMINATOR) for f in exact]       # 0.6 -> 3/5, if that is what it is
    fracs = meant if all(m > 0 and abs(m - f) <= f * Fraction(1, 10**9) for m, f in zip(meant, exact)) else exact
    total = sum(fracs)
    shares = [f / total for f in fracs]
    period = math.lcm(*(s.denominator for s in shares))
    if period <= resolution:
        q = [int(s * period) for s in shares]
    else:
        raw = [s * resolution for s in shares]
        q = [int(r) for r in raw]
        by_remainder = sorted(range(len(q)), key=lambda i: (-(raw[i] - q[i]), i))
        for i in by_remainder[:resolution - sum(q)]:
            q[i] += 1
        if min(q) == 0:
            tiny = min(range(len(q)), key=lambda i: shares[i])
            raise ConfigError(f"weight {weights[tiny]!r} is below 1/{resolution} of the mixture: too small to "
                              f"schedule (give it a larger weight or leave it out)")
    g = math.gcd(*q)
    return tuple(x // g for x in q)


@lru_cache(maxsize=16)
def interleave(quotas: tuple[int, ...], priority: tuple[int, ...]) -> np.ndarray:
    """One period (``sum(quotas)`` positions) of the schedule: the source at each position (int64).

    ``priority`` (a permutation of the sources) breaks ties.  The prefix bound is checked on the result;
    a violation would be a bug here, never a property of the weights.
    """
    k, period = len(quotas), sum(quotas)
    if k == 1:
        return np.zeros(period, dtype=np.int64)
    den = 2 * k - 2
    turn = [1] * k                      # the 1-based number of each source's next turn
    out = np.empty(period, dtype=np.int64)
    for n in range(1, period + 1):
        best, best_num = -1, 0
        for i in priority:
            q = quotas[i]
            if n * q * den < ((turn[i] - 1) * den + 1) * period:
                continue                # not released yet: taking it now would run ahead of its weight
            num = (turn[i] * den - 1) * period         # deadline num / q, compared without division
            if best < 0 or num * quotas[best] < best_num * q:
                best, best_num = i, num
        if best < 0:
            raise RuntimeError(f"schedule: no source released at position {n} for quotas {quotas}")
        out[n - 1] = best
        turn[best] += 1
    _check_prefix_bound(out, quotas)
    out.flags.writeable = False
    return out


def _check_prefix_bound(pattern: np.ndarray, quotas: tuple[int, ...]) -> None:
    k, period = len(quotas), len(pattern)
    den = 2 * k - 2
    n = np.arange(1, period + 1, dtype=np.int64)
    for i, q in enumerate(quotas):
        lag = n * q - period * np.cumsum(pattern == i)
        if int(np.abs(lag).max()) * den > (den - 1) * period or int(lag[-1]) != 0:
            raise RuntimeError(f"schedule: source {i} leaves the prefix bound for quotas {quotas}")


def tie_order(k: int, seed: int) -> tuple[int, ...]:
    """The seeded source order that breaks ties (a different seed, a different but equally even schedule)."""
    from shardprep.loader.order import KIND_MIX, permutation

    return tuple(permutation(k, seed=seed, epoch=0, kind=KIND_MIX).tolist())


class Schedule:
    """The periodic interleave of ``len(quotas)`` sources; ``locate`` and ``draws`` are O(1) per position."""

    def __init__(self, quotas: Sequence[int], *, seed: int):
        self.quotas = tuple(int(q) for q in quotas)
        self.period = sum(self.quotas)
        self.seed = int(seed)
        self.pattern = interleave(self.quotas, tie_order(len(self.quotas), self.seed))
        rank = np.empty(self.period, dtype=np.int64)
        self._occurrences = []
        for i in range(len(self.quotas)):
            where = np.flatnonzero(self.pattern == i)
            rank[where] = np.arange(len(where), dtype=np.int64)
            self._occurrences.append(where)
        self.rank = rank
        self._q = np.array(self.quotas, dtype=np.int64)
        self._pattern_list, self._rank_list = self.pattern.tolist(), rank.tolist()

    @property
    def sources(self) -> int:
        return len(self.quotas)

    @property
    def weights(self) -> list[Fraction]:
        """The effective weights ``q_i / Q`` (the bounds are stated against these)."""
        return [Fraction(q, self.period) for q in self.quotas]

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source, draw)`` for each position >= 0: the source read there and how many times that
        source was read before it."""
        g = np.asarray(positions, dtype=np.int64)
        if g.size and int(g.min()) < 0:
            raise IndexError("schedule positions must be >= 0")
        r = g % self.period
        src = self.pattern[r]
        return src, (g // self.period) * self._q[src] + self.rank[r]

    def locate_one(self, position: int) -> tuple[int, int]:
        """Scalar :meth:`locate` for ``position >= 0`` (unchecked: a batch's rows, without numpy's overhead)."""
        whole, r = divmod(position, self.period)
        src = self._pattern_list[r]
        return src, whole * self.quotas[src] + self._rank_list[r]

    def draws(self, position: int) -> np.ndarray:
        """How many times each source is read in positions ``[0, position)`` (int64, one per source)."""
        if position < 0:
            raise IndexError("schedule positions must be >= 0")
        whole, r = divmod(int(position), self.period)
        return np.array([whole * q + int(np.searchsorted(occ, r)) for q, occ in zip(self.quotas, self._occurrences)],
                        dtype=np.int64)
