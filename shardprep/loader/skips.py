"""Skips: steps and documents a run leaves out, and what they remove from each epoch.

``Skips(steps=((a, b), ...), documents=frozenset({DocRef(...), ...}))`` is what a caller asks for
(``ShardLoader.skip``, ``make_dataloader(..., skip=)``).  It becomes positions taken out of epochs:

* steps ``a..b`` (global steps, inclusive, counted from 0 as the loader counts them since the run began)
  are resolved once, against the run's timeline as it stands, to the positions those steps would read on
  every rank, per epoch (``Timeline.read``); a range may cross epochs.  Those positions are stored in the
  state, so a resume on any world size removes exactly them;
* documents are removed from the current and every later epoch: in each epoch, every position whose unit
  holds any of their tokens (``locate.positions_of``), computed when the epoch is needed and cached.

What remains is split again over the ranks (a new leg of the timeline), so every rank keeps the same step
count, and in pack/pad mode a removed step range is cut out of every rank's sequence alike: the run's
step ``a`` reads what step ``b + 1`` would have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.locate import DocRef, check_ref, positions_of
from shardprep.loader.timeline import Leg, Timeline, union

Removed = Callable[[int], D.Ranges]
STATE_FORMAT = "shardprep.loader.state/2"
STATE_FORMATS = (STATE_FORMAT, "shardprep.loader.state/1")    # /1: no step, legs or skips (the run counts from 0)


@dataclass(frozen=True)
class Skips:
    """What to leave out: global step ranges ``(a, b)`` (inclusive) and documents."""

    steps: tuple[tuple[int, int], ...] = ()
    documents: frozenset[DocRef] = frozenset()

    def __post_init__(self) -> None:
        steps = tuple((int(a), int(b)) for a, b in self.steps)
        for a, b in steps:
            if a < 0 or a > b:
                raise ConfigError(f"skip steps {a}..{b}: a range needs 0 <= first <= last")
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "documents", frozenset(
            d if isinstance(d, DocRef) else DocRef(*(int(x) for x in d)) for d in self.documents))

    def __bool__(self) -> bool:
        return bool(self.steps or self.documents)


@dataclass
class SkipState:
    """The skips a run has taken: declared step ranges, documents, and the positions the steps removed."""

    steps: list[tuple[int, int]] = field(default_factory=list)
    documents: set[DocRef] = field(default_factory=set)
    removed: dict[int, D.Ranges] = field(default_factory=dict)      # epoch -> positions step skips removed

    def to_state(self) -> dict:
        """``{"steps": [[a, b], ...], "documents": [[source, shard, doc], ...], "removed": [[epoch, [[start,
        end], ...]], ...]}``: lists only, so torch.distributed.checkpoint keeps each as one value."""
        return {"steps": [[a, b] for a, b in self.steps], "documents": [d.to_list() for d in sorted(self.documents)],
                "removed": [[e, [list(r) for r in self.removed[e]]] for e in sorted(self.removed)]}

    @classmethod
    def from_state(cls, state: dict) -> "SkipState":
        saved = state.get("skips") or {}
        try:
            steps = [(int(a), int(b)) for a, b in saved.get("steps", [])]
            docs = {DocRef(int(s), int(h), int(d)) for s, h, d in saved.get("documents", [])}
            removed = {int(e): D.normalize(r) for e, r in saved.get("removed", [])}
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"loader state: malformed skips ({e})") from None
        return cls(steps, docs, removed)

    def add_removed(self, found: dict[int, D.Ranges]) -> None:
        for epoch, ranges in found.items():
            self.removed[epoch] = union(self.removed.get(epoch, ()), ranges)


def check_state(state: Any, mixture: Any) -> None:
    """ConfigError unless ``state`` is a loader state of a known format and of the data's kind: a mixture's
    for a ``mixture``, a single dataset's for None (checked before anything else is compared)."""
    if not isinstance(state, dict) or state.get("format") not in STATE_FORMATS:
        raise ConfigError(f"loader state: format is {state.get('format') if isinstance(state, dict) else state!r}, "
                          f"expected {STATE_FORMAT!r}")
    if (mixture is None) != ("mixture" not in state):
        raise ConfigError("loader state: saved by a " + ("mixture, the data read now is one dataset" if mixture is None
                                                          else "single-dataset loader, the data read now is a mixture"))


class DocumentPositions:
    """Per epoch, the positions whose unit holds any of ``documents`` (cached; ``reading`` as in locate)."""

    def __init__(self, reading: Any, documents: Iterable[DocRef]):
        self.reading = reading
        self.documents = sorted(set(documents))
        for doc in self.documents:
            check_ref(reading, doc)
        self._cache: dict[int, D.Ranges] = {}

    def __call__(self, epoch: int) -> D.Ranges:
        found = self._cache.get(epoch)
        if found is None:
            found = self._cache[epoch] = union(*(positions_of(self.reading, d, epoch) for d in self.documents))
        return found


class RunSkips:
    """A loader's record of its run: the legs so far (``timeline.Leg``), the skips, and what they remove
    from each epoch; ``reading`` is the dataset (``locate``), ``units`` its positions per epoch."""

    def __init__(self, reading: Any, units: int, exact: bool):
        self.reading, self.units, self.exact = reading, int(units), bool(exact)
        self.legs: list[Leg] = []
        self.state = SkipState()
        self.docs: DocumentPositions | None = None

    def removed(self, epoch: int) -> D.Ranges:
        mine = self.state.removed.get(epoch, ())
        return union(mine, self.docs(epoch)) if self.docs is not None else mine

    def fresh(self, epoch: int) -> D.Ranges:
        """Epoch ``epoch`` at its start: every position but what the skips removed."""
        return D.subtract(D.normalize([(0, self.units)]), self.removed(epoch))

    def timeline(self) -> Timeline:
        steady = None if self.docs is not None else max(self.state.removed, default=-1) + 1
        return Timeline(self.legs, self.units, self.removed, steady_from=steady)

    def note(self, step: int, epoch: int, remaining: D.Ranges, world: int, batch: int) -> None:
        """The run is at ``step`` in ``epoch`` with ``remaining`` on ``world`` ranks: a new leg unless the
        timeline already says so (a resume on the same world, the next epoch after a finished one)."""
        leg = Leg(step, epoch, world, batch, self.exact, remaining)
        if self.legs and self.legs[-1] == leg:
            return
        if self.legs and self.legs[-1].step >= step:          # the last leg read nothing: this one replaces it
            self.legs = [g for g in self.legs if g.step < step]
        if self.legs and (self.legs[-1].world, self.legs[-1].batch) == (world, batch):
            try:
                if self.timeline().position(step) == (epoch, remaining):
                    return
            except ConfigError:
                pass
        self.legs.append(leg)

    def add(self, skips: Skips, step: int) -> None:
        """Resolve and record ``skips`` at global ``step`` (the run's legs noted up to it); what was declared
        before is not declared again.  ConfigError for steps already delivered or documents not in the data."""
        steps = [s for s in skips.steps if s not in self.state.steps]
        docs = set(skips.documents) - self.state.documents
        for a, b in steps:
            if a < step:
                raise ConfigError(f"skip steps {a}..{b}: the run has delivered steps 0..{step - 1} already "
                                  f"(a skip takes steps from {step} on)")
        for doc in sorted(docs):
            check_ref(self.reading, doc)
        if steps:
            tl = self.timeline()
            for a, b in steps:
                self.state.add_removed(tl.read(a, b))
            self.state.steps.extend(steps)
        if docs:
            self.state.documents |= docs
            self.docs = DocumentPositions(self.reading, self.state.documents)

    def to_state(self) -> dict:
        return {"legs": [leg.to_list() for leg in self.legs], "skips": self.state.to_state()}

    def resume(self, state: dict) -> tuple[int, int, D.Ranges]:
        """``(step, epoch, remaining)`` of a saved loader state, its legs and skips loaded (a mixture adopts its
        segment, ``mixstate.resume``): what the loader continues from and what ``trace`` rebuilds.
        ConfigError for another format, a state of the other kind (a mixture's, one dataset's), a malformed
        one, or one holding positions the data does not have."""
        from shardprep.loader.mixstate import resume as resume_mixture

        mixture = self.reading.mixture
        check_state(state, mixture)
        try:
            remaining = D.normalize(state["remaining"])
            epoch, step = int(state["epoch"]), int(state.get("step", 0))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"loader state: malformed remaining/epoch/step ({e})") from None
        self.load(state)
        if mixture is not None:
            epoch, remaining = resume_mixture(mixture, state, epoch, remaining)
        if remaining and (remaining[-1][1] > self.units or epoch < 0):
            raise ConfigError(f"loader state: remaining ranges exceed the dataset's {self.units} units")
        return step, epoch, remaining

    def load(self, state: dict) -> None:
        """The legs and skips of a saved state (none in a state of format /1)."""
        self.legs = [Leg.from_list(item) for item in state.get("legs", [])]
        self.state = SkipState.from_state(state)
        self.docs = DocumentPositions(self.reading, self.state.documents) if self.state.documents else None
