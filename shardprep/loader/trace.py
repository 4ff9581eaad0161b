"""The library half of ``shardprep trace``: a run's order rebuilt offline, its batches and where they came from.

A training run's batches are a pure function of the data, the loader options, the world and batch size
and the run's history (resumes, skips).  ``open_run`` rebuilds that from the options given, or from a saved
loader state (``ShardLoader.state_dict()`` as JSON: it records the options, the legs and the skips), plus an
optional quarantine file applied as the loader applies ``skip=`` at the state's step (or at step 0):

- ``TraceRun.batch(step, rank)``: the batch's epoch, positions and per row its documents (``rowdocs``);
- ``Provenance.of(span)``: the document's shard and input (file or URL, byte offset or row, line) from
  the shard's sidecar ``origins`` (format 3), or for older shards the task's inputs it was cut from;
- ``TraceRun.find(doc, ...)``: every (epoch, step, rank, row) that reads a document (``locate``).

No torch, no torch.distributed: the CLI runs on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.config import LoaderConfig, source_from
from shardprep.loader.layout import ConversationPacking, Doc, Pack, layout_of
from shardprep.loader.locate import DocRef, check_ref, positions_of
from shardprep.loader.reading import Reading
from shardprep.loader.rowdocs import DocSpan, RowDocs
from shardprep.loader.skips import STATE_FORMATS, RunSkips, Skips, check_state
from shardprep.loader.timeline import Timeline
from shardprep.storage.locations import read_bytes

# option -> the state's key: a state records them, and a given option must agree with it
_STATE_KEYS = {"mode": "mode", "seq_len": "seq_len", "seed": "seed", "shuffle": "shuffle",
               "shuffle_block": "shuffle_block", "batch": "batch_size"}
_PACKING_KEYS = {"pack_window": "window", "overflow": "overflow"}     # the state's ``packing`` (chat pack rows)
# options a state may leave out (None: the default shuffle block; pretraining data has no packing), so a
# given one is not refused for it
_UNRECORDED = ("shuffle_block", *_PACKING_KEYS)


@dataclass
class RunOptions:
    """The loader options of the run (None: not given; a state fills them in)."""

    mode: str | None = None
    seq_len: int | None = None
    seed: int | None = None
    shuffle: bool | None = None
    shuffle_block: int | None = None
    total_tokens: int | None = None
    world: int | None = None
    batch: int | None = None
    pack_window: int | None = None      # chat data in pack mode (the state's ``packing``)
    overflow: str | None = None


def _with_state(opts: RunOptions, state: dict) -> RunOptions:
    """``opts`` completed from the state; an option given and different from the state's is refused."""
    packing = state.get("packing")
    saved_by_key = {key: (skey, state.get(skey)) for key, skey in _STATE_KEYS.items()}
    saved_by_key.update({key: (f"packing.{skey}", packing.get(skey) if isinstance(packing, dict) else None)
                         for key, skey in _PACKING_KEYS.items()})
    for key, (name, saved) in saved_by_key.items():
        given = getattr(opts, key)
        if given is not None and given != saved and not (saved is None and key in _UNRECORDED):
            raise ConfigError(f"--{key.replace('_', '-')}={given!r} but the loader state says {name}={saved!r}: "
                              f"trace the run with the options it used (or leave it out)")
        if given is None and saved is not None:
            setattr(opts, key, saved)
    legs = state.get("legs") or []
    if opts.world is None and legs:
        opts.world = int(legs[-1][2])
    return opts


def read_state(location: str) -> dict:
    """A saved loader state (the JSON of ``state_dict()``); ConfigError naming the file otherwise."""
    import orjson

    try:
        state = orjson.loads(read_bytes(location))
    except FileNotFoundError:
        raise ConfigError(f"{location}: loader state file does not exist") from None
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"{location}: not a loader state (JSON): {e}") from None
    if not isinstance(state, dict) or state.get("format") not in STATE_FORMATS:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ConfigError(f"{location}: format is {got!r}, expected one of {STATE_FORMATS}")
    return state


def open_reading(spec: object, opts: RunOptions) -> Reading:
    """The ``Reading`` the run's loader built (the same door: ``source_from``, ``LoaderConfig``)."""
    mode = opts.mode or "pack"
    layout = layout_of(mode, opts.seq_len)
    config = LoaderConfig(layout=layout, seed=opts.seed or 0, shuffle=True if opts.shuffle is None else opts.shuffle,
                          shuffle_block=opts.shuffle_block,
                          conversations=ConversationPacking(opts.pack_window or 1024, opts.overflow or "truncate"))
    return Reading(source_from(spec, total_tokens=opts.total_tokens), config, files=False)


class TraceRun:
    """A run rebuilt: its reading, timeline and skips (see ``open_run``)."""

    def __init__(self, reading: Reading, opts: RunOptions, run: RunSkips, *, start: int = 0):
        self.reading, self.opts, self.run, self.start = reading, opts, run, start
        self.timeline: Timeline = run.timeline()
        self._rows: dict[int, RowDocs] = {}     # per loader epoch: ranks of one step share shards and orders

    @property
    def world(self) -> int:
        return int(self.opts.world or 1)

    def batch(self, step: int, rank: int) -> tuple[int, D.Ranges, list[list[DocSpan]]]:
        """``(epoch, positions, rows)`` that ``rank`` reads at global ``step`` (rows: per row its documents)."""
        if not 0 <= rank < self.world:
            raise ConfigError(f"--rank={rank} is invalid: the run has {self.world} ranks (0..{self.world - 1})")
        if step < 0:
            raise ConfigError(f"--step={step} is invalid: steps count from 0")
        epoch, ranges = self.timeline.batch(step, rank)
        rows = self._rows.get(epoch)
        if rows is None:
            rows = self._rows[epoch] = RowDocs(self.reading, epoch)
        return epoch, ranges, [rows.spans(p) for p in D.positions(ranges).tolist()]

    def close(self) -> None:
        """Close the shards the traced rows opened."""
        for rows in self._rows.values():
            rows.close()
        self._rows.clear()

    def find(self, doc: DocRef, *, epochs: int = 1, last_step: int | None = None) -> list[dict]:
        """Every read of ``doc``: per loader epoch ``0..epochs-1`` (with ``last_step``: every epoch up to the
        one that step reads), each position that holds it and the (step, rank, row) reading it, or why no
        step does (``dropped``: the remainder that keeps ranks equal; ``skipped``; ``not reached``)."""
        check_ref(self.reading, doc)
        if last_step is not None:
            epochs = self.timeline.batch(last_step, 0)[0] + 1
        out = []
        for epoch in range(epochs):
            removed = self.timeline.removed(epoch)
            held = D.positions(positions_of(self.reading, doc, epoch)).tolist()
            if not held:            # in no unit of the pass: say why rather than nothing
                out.append({"epoch": epoch, "position": None, "step": None, "rank": None, "row": None,
                            "why": self._in_no_unit()})
            for p in held:
                out.append(self._hit(epoch, p, removed, last_step))
        return out

    def _in_no_unit(self) -> str:
        packing = self.reading.config.conversations
        if self.reading.chat and isinstance(self.reading.layout, Pack):
            return f"in no row: longer than seq_len, and overflow={packing.overflow!r} leaves such a conversation out" \
                if packing.overflow == "drop" else "in no row (an empty conversation)"
        return "in no unit: in the stream's tail (fewer than seq_len tokens after the last row), or empty" \
            if isinstance(self.reading.layout, Pack) else "in no unit (an empty document)"

    def _hit(self, epoch: int, position: int, removed: D.Ranges, last_step: int | None) -> dict:
        found = self.timeline.find(epoch, position, last_step=last_step)
        if found is not None:
            step, rank = found
            _, ranges = self.timeline.batch(step, rank)
            row = int(D.positions(ranges).tolist().index(position))
            return {"epoch": epoch, "position": position, "step": step, "rank": rank, "row": row}
        skipped = any(s <= position < e for s, e in removed)
        why = "skipped" if skipped else "not reached" if self.timeline.find(epoch, position) is not None \
            else "dropped"
        return {"epoch": epoch, "position": position, "step": None, "rank": None, "row": None, "why": why}


def doc_ref(reading: Reading, text: str) -> DocRef:
    """``ID`` (a global document id of a single dataset) or ``SOURCE:ID`` (a mixture's source by name or
    number) -> the document; ConfigError naming what does not exist."""
    import numpy as np

    name, _, number = text.rpartition(":")
    source = 0
    if name:
        names = reading.names
        if name in names:
            source = names.index(name)
        elif name.isdigit() and int(name) < len(names):
            source = int(name)
        else:
            raise ConfigError(f"document {text!r}: no source {name!r} (sources: {', '.join(names)})")
    elif reading.mixture is not None and len(reading.sources) > 1:
        raise ConfigError(f"document {text!r}: the mixture has {len(reading.sources)} sources: say which, "
                          f"SOURCE:ID (sources: {', '.join(reading.names)})")
    try:
        gid = int(number)
    except ValueError:
        raise ConfigError(f"document {text!r}: expected ID or SOURCE:ID with a whole number ID") from None
    index = reading.sources[source]
    total = int(index.shard_docs.sum())
    if not 0 <= gid < total:
        raise ConfigError(f"document {text!r}: no document {gid} ({reading.names[source]} has {total}: 0..{total - 1})")
    shard = int(np.searchsorted(index.shard_doc_start, gid, side="right") - 1)
    return DocRef(source, shard, gid - int(index.shard_doc_start[shard]))


def open_run(spec: object, opts: RunOptions, *, state: dict | None = None, skips: Skips | None = None,
             quarantine: Any = None) -> TraceRun:
    """Rebuild a run: options (completed and checked against ``state``), its timeline, its skips, and the
    ``quarantine`` (a ``loader.quarantine.Quarantine``, resolved against the data) or ``skips`` applied at the
    state's step (or step 0) as ``ShardLoader.skip`` applies them."""
    if state is not None:
        opts = _with_state(opts, state)
    if opts.world is None or (opts.batch is None and opts.mode != "doc"):
        raise ConfigError("--world-size and --batch-size are needed (or --state, a saved loader state that records them)")
    reading = open_reading(spec, opts)
    exact = isinstance(reading.layout, Doc)
    if exact:
        opts.batch = 1
    assert opts.world is not None and opts.batch is not None
    run = RunSkips(reading, reading.num_units, exact)
    step, epoch, remaining = 0, 0, D.normalize([(0, reading.num_units)])
    if state is not None:
        step, epoch, remaining = _resume(reading, state, run)
    run.note(step, epoch, remaining, opts.world, opts.batch)
    if quarantine is not None:
        skips = quarantine.resolve(reading)
    if skips:
        run.add(skips, step)
        run.note(step, epoch, D.subtract(remaining, run.removed(epoch)), opts.world, opts.batch)
    return TraceRun(reading, opts, run, start=step)


def _resume(reading: Reading, state: dict, run: RunSkips) -> tuple[int, int, D.Ranges]:
    """The state's position (mixtures: their segment adopted) and its legs and skips loaded into ``run``, as the
    loader loads them (``RunSkips.resume``); a single dataset's state must be of the same data."""
    check_state(state, reading.mixture)
    if reading.mixture is None and state.get("dataset") != reading.fingerprint:
        raise ConfigError(f"loader state: dataset={str(state.get('dataset'))[:12]}... but SPEC is "
                          f"{reading.fingerprint[:12]}...: the state was saved reading other data")
    return run.resume(state)
