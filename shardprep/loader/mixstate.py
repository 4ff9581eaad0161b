"""Where each source of a mixture stands, and resuming a mixture (also one whose weights or sources changed).

Every source has its own endless sequence of units, its *seqs*: seq ``s`` is position ``s % units`` of
the source's own epoch ``s // units`` (the order a single-source loader with the same seed reads).  The
schedule says that position ``g`` of the mixture is the ``k``-th *draw* of source ``i``; a ``Segment``
maps draws to seqs: draw ``k`` is the ``k``-th of ``pending`` (seqs an earlier mixture left unread), then
``fresh``, ``fresh + 1``, ...  A mixture that never changed has one segment (origin 0, nothing pending,
fresh 0): draw k is seq k.

Resuming with the *same* mixture restores the saved segment: the same global schedule continues.
Resuming with *changed* weights, an added or a removed source, or a new ``total_tokens`` (a different
mixture fingerprint) is deliberate, never a reshuffle of what was read:

* what the old mixture read stays read: for every source, the seqs drawn at the positions already
  consumed (and everything before the current pass) are done;
* the seqs the old schedule had placed at positions not yet consumed become that source's ``pending``
  seqs and are read first, then the source continues where the old schedule would have stopped;
* the new schedule starts at the resume point: the pass continues from the number of units already
  consumed to the new pass length, with the new weights from its first position.  A new source starts
  at its seq 0; a removed source is *parked*: its place is kept in the state (by fingerprint), so if it
  comes back in a later change it continues where it stopped instead of starting over.

Pure bookkeeping on ranges (``distribute``), no files.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.schedule import Schedule

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.loader.mixture import Mixture

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """How the draws of the current schedule map to each source's seqs (see the module docstring)."""

    origin: int                      # global position (epoch * length + position) of every source's draw 0
    pending: tuple[D.Ranges, ...]    # per source: seqs read first, in order
    fresh: tuple[int, ...]           # per source: the first seq after them
    parked: tuple[tuple[str, D.Ranges, int], ...] = ()    # (fingerprint, pending, fresh) of removed sources

    @classmethod
    def start(cls, sources: int) -> "Segment":
        return cls(0, ((),) * sources, (0,) * sources)

    @cached_property
    def _pending_ends(self) -> list[list[int]]:
        """Per source: the draw number just past each pending range."""
        return [list(accumulate(e - s for s, e in p)) for p in self.pending]

    def seq(self, source: int, draw: int) -> int:
        """The seq of ``source``'s draw ``draw``."""
        ends = self._pending_ends[source]
        if not ends or draw >= ends[-1]:
            return self.fresh[source] + draw - (ends[-1] if ends else 0)
        r = bisect_right(ends, draw)
        start, end = self.pending[source][r]
        return end - (ends[r] - draw)

    def seq_ranges(self, source: int, lo: int, hi: int) -> D.Ranges:
        """The seqs of draws ``[lo, hi)`` of ``source``, as ranges."""
        pending, fresh = self.pending[source], self.fresh[source]
        n = D.count(pending)
        parts = list(D.slice_ranges(pending, lo, min(hi, n)))
        if hi > n:
            parts.append((fresh + max(lo - n, 0), fresh + hi - n))
        return D.normalize(parts)

    def to_dict(self) -> dict:
        return {"origin": self.origin, "pending": [[list(r) for r in p] for p in self.pending],
                "fresh": list(self.fresh),
                "parked": [[fp, [list(r) for r in p], f] for fp, p, f in self.parked]}

    @classmethod
    def from_dict(cls, d: dict, sources: int) -> "Segment":
        try:
            parked = tuple((str(fp), D.normalize(p), int(f)) for fp, p, f in map(_triple, d["parked"]))
            seg = cls(int(d["origin"]), tuple(D.normalize(p) for p in d["pending"]), tuple(int(f) for f in d["fresh"]),
                      parked)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"loader state: malformed mixture segment ({e})") from None
        if len(seg.pending) != sources or len(seg.fresh) != sources or seg.origin < 0:
            raise ConfigError(f"loader state: the mixture segment lists {len(seg.fresh)} sources, expected {sources}")
        return seg


def _triple(item: Any) -> tuple:
    """A source ``[name, fingerprint, quota]`` or a parked one ``[fingerprint, pending, fresh]``: lists since
    format /2, objects with those keys in /1."""
    if isinstance(item, dict):
        keys = ("name", "fingerprint", "quota") if "quota" in item else ("fingerprint", "pending", "fresh")
        return tuple(item[k] for k in keys)
    a, b, c = item
    return a, b, c


def mixture_state(mix: Mixture) -> dict:
    """The mixture part of the loader state: what the schedule reads, and the segment.  Lists of lists, not
    of objects: torch.distributed.checkpoint keeps each as one value (a list of objects it flattens into
    one key per item, and a changed mixture's fresh state could then not load a saved one's)."""
    return {"sources": [[n, i.fingerprint, q] for n, i, q in zip(mix.names, mix.indexes, mix.schedule.quotas)],
            "units": mix.length, "segment": mix.segment.to_dict()}


def resume(mix: Mixture, state: dict, epoch: int, remaining: D.Ranges) -> tuple[int, D.Ranges]:
    """Adopt a saved mixture position; returns the ``(epoch, remaining)`` the loader continues with."""
    saved = state.get("mixture")
    if not isinstance(saved, dict):
        raise ConfigError("loader state: saved by a single-dataset loader, this loader reads a mixture")
    try:
        old_sources = [(str(n), str(fp), int(q)) for n, fp, q in map(_triple, saved["sources"])]
        old_length = int(saved["units"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"loader state: malformed mixture ({e})") from None
    segment = Segment.from_dict(saved.get("segment", {}), len(old_sources))
    if state.get("dataset") == mix.fingerprint:
        mix.segment = segment
        return epoch, remaining
    _refuse_changed_data(mix, old_sources, segment)
    old = _Old(old_sources, Schedule([q for *_, q in old_sources], seed=mix.schedule.seed), old_length, segment)
    return _rebase(mix, old, epoch, remaining)


def _refuse_changed_data(mix: Mixture, old_sources: list[tuple[str, str, int]], segment: Segment) -> None:
    """ConfigError when a source keeps its name but holds other data (re-tokenized or replaced at its path).

    Why: sources are followed by their data (the index fingerprint), so such a source was taken for a new
    one: it started over at its first row, logged as "added" beside the old one "no longer read", and the
    rows the run had read of it meant nothing in the new data.  A change of data is not one of the mixture
    changes adopted on resume (weights, sources added or removed, the budget); it must be said.  Renaming
    the source in the spec says it: the new data is then an added source and starts at its first row.
    """
    known = {fp for _, fp, _ in old_sources} | {fp for fp, _, _ in segment.parked}
    saved = {name: fp for name, fp, _ in old_sources}
    for name, index in zip(mix.names, mix.indexes):
        if name in saved and saved[name] != index.fingerprint and index.fingerprint not in known:
            raise ConfigError(
                f"loader state: mixture source {name!r} holds other data than when the state was saved (its "
                f"index.json fingerprint is {index.fingerprint[:12]}, was {saved[name][:12]}: re-tokenized or "
                f"replaced at the same path), so the rows read of it cannot be told apart from the rest",
                hint=f"give it a new 'name' in the spec to read the new data from its first row as an added "
                     f"source (the old {name!r} keeps its place), or start without the saved state")


@dataclass(frozen=True)
class _Old:
    sources: list[tuple[str, str, int]]      # name, fingerprint, quota
    schedule: Schedule
    length: int
    segment: Segment


def _left_over(old: _Old, source: int, epoch: int, remaining: D.Ranges) -> tuple[D.Ranges, int]:
    """Source ``source``'s seqs the old mixture has not read: ``(pending, fresh)`` for the new segment."""
    base = epoch * old.length - old.segment.origin
    draws_before = old.schedule.draws
    parts: list[tuple[int, int]] = []
    for a, b in remaining:                   # the seqs placed at positions not yet consumed
        lo, hi = int(draws_before(base + a)[source]), int(draws_before(base + b)[source])
        parts.extend(old.segment.seq_ranges(source, lo, hi))
    end = int(draws_before(base + old.length)[source])       # the old schedule's draws up to the pass end
    n = D.count(old.segment.pending[source])
    parts.extend(D.slice_ranges(old.segment.pending[source], end, n))
    pending, fresh = D.normalize(parts), old.segment.fresh[source] + max(0, end - n)
    if pending and pending[-1][1] == fresh:  # unread up to the fresh seqs: one open range, not two
        pending, fresh = pending[:-1], pending[-1][0]
    return pending, fresh


def _rebase(mix: Mixture, old: _Old, epoch: int, remaining: D.Ranges) -> tuple[int, D.Ranges]:
    """A changed mixture: keep what each source has read, start the new schedule at the resume point."""
    if remaining and remaining[-1][1] > old.length:
        raise ConfigError(f"loader state: remaining ranges exceed the saved mixture's {old.length} units")
    places = {fp: (p, f) for fp, p, f in old.segment.parked}        # every source the run has read, by data
    places.update({fp: _left_over(old, i, epoch, remaining) for i, (_, fp, _) in enumerate(old.sources)})
    current = [index.fingerprint for index in mix.indexes]
    pending, fresh = zip(*(places.get(fp, ((), 0)) for fp in current))
    parked = tuple((fp, p, f) for fp, (p, f) in sorted(places.items()) if fp not in current)
    consumed = old.length - D.count(remaining)
    if consumed >= mix.length:               # the new pass is shorter than what was read: next pass
        epoch, consumed = epoch + 1, 0
    mix.segment = Segment(epoch * mix.length + consumed, tuple(pending), tuple(fresh), parked)
    dropped = [n for n, fp, _ in old.sources if fp not in current]
    added = [n for n, fp in zip(mix.names, current) if fp not in {fp for _, fp, _ in old.sources}]
    log.warning("loader state: the mixture changed (was %s; now %s%s%s): %d %s of this pass were read with the old "
                "schedule; the new one starts here and every source continues with what it has not read yet",
                ", ".join(f"{n}:{q}" for n, _, q in old.sources),
                ", ".join(f"{n}:{q}" for n, q in zip(mix.names, mix.schedule.quotas)),
                f"; added {', '.join(added)}" if added else "",
                f"; no longer read (position kept): {', '.join(dropped)}" if dropped else "", consumed,
                mix.unit_name)
    return epoch, D.normalize([(consumed, mix.length)])
