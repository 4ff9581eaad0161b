"""``make_dataloader``: DataLoader over a ShardDataset with epochs, exact resume and a dropped report.

The wrapper owns the position in the epoch, as the set of remaining unit positions (a global position,
the same on every rank, never per-worker offsets).  It counts batches delivered to the training loop in
the main process; ``state_dict()`` removes ``k * batch_size`` consumed units per rank from the remaining
ranges.  A new process that loads the state re-splits what remains: with the same world size each rank
gets exactly the rest of its old sequence (bit-identical batches); with another world size or worker
count, a fresh equal split of the same remaining units.

A new torch DataLoader is built for every pass, because the pass (epoch, remaining ranges) is baked into
the dataset copy the workers receive; persistent workers would keep iterating a stale pass.

The loader also counts global steps since the run began and records the run's legs (``timeline``) and its
skips (``skips``: step ranges and documents left out); the state (format ``shardprep.loader.state/2``,
docs/loader.md "Skips and the state") carries them, so a resume on any world size stays exact.  A state
of format /1 still loads: its run starts counting steps at 0 there.  The loader is a
``torch.distributed.checkpoint`` Stateful: every variable-length part of its state is one list value.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterator

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.dataset import PassSpec, ShardDataset
from shardprep.loader.layout import Doc
from shardprep.loader.mixstate import mixture_state
from shardprep.loader.skips import STATE_FORMAT, RunSkips, Skips, check_state
from shardprep.loader.world import Placement, World

log = logging.getLogger(__name__)

TRANSFER_TOKENS = 1 << 18     # default worker -> main transfer size: ~256K tokens of batches per queue item
# keys that must match for a saved position to mean the same units in the same order
_IDENTITY = ("dataset", "mode", "seq_len", "seed", "shuffle", "shuffle_block", "units")


def _can_pin() -> bool:
    """Pinned memory needs an accelerator; like DataLoader, warn and carry on without one."""
    import torch

    available = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    if not available:
        log.warning("pin_memory=True but no accelerator is available: not pinning")
    return available


def _keep(item: list) -> list:
    """DataLoader's collate_fn: items are already whole batches (module-level so spawn can pickle it)."""
    return item


class ShardLoader:
    """Iterate batches of a ShardDataset for this rank; see ``make_dataloader``."""

    def __init__(self, dataset: ShardDataset, *, batch_size: int | None, num_workers: int = 0,
                 pin_memory: bool = False, rank: int | None = None, world_size: int | None = None,
                 batches_per_transfer: int | None = None, skip: Skips | str | os.PathLike | None = None,
                 **dataloader_kwargs: Any):
        if isinstance(dataset.layout, Doc):
            if batch_size not in (None, 1):
                raise ConfigError(f"batch_size={batch_size} is invalid for mode='doc' (documents are yielded "
                                  f"one at a time): use batch_size=None")
            batch_size = None
        elif batch_size is None or int(batch_size) < 1:
            raise ConfigError(f"batch_size={batch_size!r} is invalid for mode={dataset.mode!r}: must be >= 1")
        if int(num_workers) < 0:
            raise ConfigError(f"num_workers={num_workers} is invalid: must be >= 0")
        if dataloader_kwargs.get("persistent_workers"):
            raise ConfigError("persistent_workers=True is not supported: each pass starts its workers with the "
                              "pass's position (epoch and remaining units)")
        if batches_per_transfer is not None and int(batches_per_transfer) < 1:
            raise ConfigError(f"batches_per_transfer={batches_per_transfer} is invalid: must be >= 1")
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        unit_tokens = dataset.seq_len or max(1, dataset.total_tokens // max(1, dataset.total_docs))
        self.per_transfer = int(batches_per_transfer or max(1, TRANSFER_TOKENS // ((self.batch_size or 1) * unit_tokens)))
        self.num_workers, self.pin_memory = int(num_workers), bool(pin_memory) and _can_pin()
        self.placement = Placement(rank, world_size).over(dataset.placement)     # each one given wins
        self.dataloader_kwargs = dataloader_kwargs
        self.epoch = dataset.epoch
        self._full = D.normalize([(0, dataset.num_units)])
        self._remaining = self._full
        self._pass: PassSpec | None = None
        self._delivered = 0
        self._epoch_done = False
        self._run = RunSkips(dataset, dataset.num_units, exact=isinstance(dataset.layout, Doc))
        self._step0 = 0                  # global step at the start of the pass (or of the position held)
        self._iterating = False
        self._given: list[Skips] = []     # skips given to this loader: added again after a loaded state's
        dataset.check_one_batch(self.world().world_size, self.batch_size)
        if skip:
            self.skip(skip)

    # -- position ---------------------------------------------------------------------------------------
    def world(self) -> World:
        return self.placement.resolve()

    def _split(self) -> D.Split:
        if self._pass is not None:
            return self.dataset.split(self._pass.remaining, self._pass.world.world_size, self._pass.batch)
        return self.dataset.split(self._remaining, self.world().world_size, self.batch_size)

    def _current_remaining(self) -> D.Ranges:
        if self._pass is None:
            return self._remaining
        return self._split().after(self._delivered)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning, unless the loader is already part-way through it.

        Part-way (after ``load_state_dict`` or a loop left with ``break``) the position is kept, so the
        usual ``loader.set_epoch(epoch)`` at the top of the epoch loop does not undo a resume.
        """
        epoch = int(epoch)
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} is invalid: must be >= 0")
        if epoch == self.epoch and not self._epoch_done:
            return
        self._step0 = self.step
        self.epoch, self._remaining, self._pass, self._delivered = epoch, self._run.fresh(epoch), None, 0
        self._epoch_done = False

    @property
    def step(self) -> int:
        """Global steps delivered since the run began (batches per rank, the state's ``step``)."""
        if self._pass is None:
            return self._step0
        return self._step0 + (self._split().steps if self._epoch_done else self._delivered)

    def _position(self) -> tuple[int, D.Ranges]:
        """``(epoch, remaining)`` of the next batch (a finished epoch: the next one from its start)."""
        if self._epoch_done:
            return self.epoch + 1, self._run.fresh(self.epoch + 1)
        return self.epoch, self._current_remaining()

    def skip(self, skips: Skips | str | os.PathLike) -> None:
        """Leave out ``skips`` from here on (module ``skips``): step ranges ``a..b`` (global steps counted from
        0, the batches the run as it stands reads there) and documents (every position holding them, this
        epoch and every later one); a path is a quarantine file (``loader.quarantine``: steps, documents,
        shards, input byte or row ranges), resolved against this loader's data.  What remains is split
        again: every rank keeps equal steps.  Called between passes; ConfigError for steps already delivered
        or data the dataset does not have."""
        if not isinstance(skips, Skips):
            from shardprep.loader.quarantine import load_quarantine

            skips = load_quarantine(os.fspath(skips)).resolve(self.dataset.reading)
        if self._iterating:
            raise ConfigError("skip() is called between passes, not while the loader is iterating")
        step = self.step
        self.epoch, self._remaining = self._position()
        self._step0, self._pass, self._delivered, self._epoch_done = step, None, 0, False
        world = self.world()
        self._run.note(step, self.epoch, self._remaining, world.world_size, self.batch_size or 1)
        self._run.add(skips, step)
        self._remaining = D.subtract(self._remaining, self._run.removed(self.epoch))
        if skips not in self._given:
            self._given.append(skips)

    def __len__(self) -> int:
        """Batches this rank yields in the current (or next) pass; the same on every rank (pack/pad)."""
        if self._epoch_done:
            return self.dataset.split(self._run.fresh(self.epoch + 1), self.world().world_size,
                                      self.batch_size).rank_steps(self.world().rank)
        rank = self._pass.world.rank if self._pass is not None else self.world().rank
        return self._split().rank_steps(rank)

    @property
    def dropped(self) -> dict:
        """What the current (or next) pass leaves out to keep every rank's batch count equal."""
        split = self._split()
        full = (self._pass.remaining if self._pass is not None else self._remaining) == self._full
        return {"epoch": self.epoch, "unit": self.dataset.unit_name, "units": split.dropped,
                "tail_tokens": self.dataset.tail_tokens if full else 0}

    # -- iteration --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        from torch.utils.data import DataLoader

        if self._epoch_done:
            log.info("epoch %d already finished and set_epoch() was not called: starting epoch %d",
                     self.epoch, self.epoch + 1)
            self.set_epoch(self.epoch + 1)
        remaining = self._current_remaining()
        world = self.world()
        if remaining == self._full:
            self.dataset.check_one_batch(world.world_size, self.batch_size)
        self._step0 = self.step
        self._remaining, self._delivered = remaining, 0
        self._run.note(self._step0, self.epoch, remaining, world.world_size, self.batch_size or 1)
        per_transfer = self.per_transfer if self.num_workers else 1
        self._pass = PassSpec(self.epoch, remaining, world, self.batch_size, per_transfer=per_transfer)
        split = self._split()
        steps = split.rank_steps(world.rank)
        self._log_pass(split, world)
        # workers send lists of numpy batches (see batches.py); tensors and pinning happen here
        loader = DataLoader(self.dataset.for_pass(self._pass), batch_size=None, num_workers=self.num_workers,
                            collate_fn=_keep, **self.dataloader_kwargs)
        self._iterating = True
        try:
            for transfer in loader:
                for item in transfer:
                    batch = self.dataset.tensors(item, pin=self.pin_memory)
                    self._delivered += 1
                    yield batch
        finally:
            self._iterating = False
        if self._delivered != steps:  # would mean a bug in the split; fail loudly rather than desync ranks
            raise RuntimeError(f"rank {world.rank} delivered {self._delivered} batches, expected {steps}")
        self._epoch_done = True

    def _log_pass(self, split: D.Split, world: World) -> None:
        d = self.dropped
        level = logging.INFO if world.rank == 0 else logging.DEBUG
        tail = f" and {d['tail_tokens']} tail tokens" if d["tail_tokens"] else ""
        log.log(level, "epoch %d: %d %s remaining for %d ranks (world from %s), batch %s: %d steps per rank; "
                "dropping %d %s%s to keep ranks equal", self.epoch, split.total, d["unit"], world.world_size,
                world.source, self.batch_size, split.rank_steps(world.rank), d["units"], d["unit"], tail)

    # -- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The epoch position as global remaining ranges: identical on every rank, JSON-serializable."""
        ds = self.dataset
        epoch, remaining = self._position()
        step = self.step
        self._run.note(step, epoch, remaining, self.world().world_size, self.batch_size or 1)
        state: dict[str, Any] = {
            "format": STATE_FORMAT, "dataset": ds.fingerprint, "mode": ds.mode, "seq_len": ds.seq_len,
            "seed": ds.seed, "shuffle": ds.shuffle, "shuffle_block": ds.shuffle_block, "units": ds.num_units,
            "batch_size": self.batch_size, "epoch": epoch, "remaining": [list(r) for r in remaining],
            "step": step, **self._run.to_state()}
        if ds.mixture is not None:
            state["mixture"] = mixture_state(ds.mixture)
        if any(rows is not None for rows in ds.chat_rows):      # chat pack rows: how they were packed
            state["packing"] = next(rows for rows in ds.chat_rows if rows is not None).identity()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (from ``state_dict()``, possibly with another world size or workers)."""
        mixture = self.dataset.mixture
        check_state(state, mixture)
        mine = self.state_dict()
        for key in _IDENTITY:
            if mixture is not None and key in ("dataset", "units"):
                continue            # a changed mixture is adopted, deliberately (loader/mixstate.py)
            if state.get(key) != mine[key]:
                raise ConfigError(f"loader state: {key}={state.get(key)!r} but this loader has {mine[key]!r}; "
                                  f"a position only means the same units with the same dataset and order options")
        if state.get("packing") != mine.get("packing"):
            raise ConfigError(f"loader state: packing={state.get('packing')!r} but this loader has "
                              f"{mine.get('packing')!r}; packed rows only mean the same conversations with the "
                              f"same pack_window and overflow")
        if state.get("batch_size") != self.batch_size:
            log.warning("loader state was saved with batch_size=%s, continuing with %s: nothing repeated or "
                        "skipped, but batches differ from an uninterrupted run", state.get("batch_size"),
                        self.batch_size)
        step, epoch, remaining = self._run.resume(state)
        self.epoch, self._remaining, self._pass, self._delivered = epoch, remaining, None, 0
        self._epoch_done, self._step0 = False, step
        for skips in self._given:       # skips given to this loader come after the state's
            self.skip(skips)


def make_dataloader(dataset: ShardDataset, *, batch_size: int | None = 8, num_workers: int = 0,
                    pin_memory: bool = False, rank: int | None = None, world_size: int | None = None,
                    batches_per_transfer: int | None = None, skip: Skips | str | os.PathLike | None = None,
                    **dataloader_kwargs: Any) -> ShardLoader:
    """Wrap ``dataset`` for this rank: ``for batch in loader`` yields dicts of tensors.

    ``rank``/``world_size`` override detection (torch.distributed, RANK/WORLD_SIZE, SLURM_PROCID/
    SLURM_NTASKS).  Extra keyword arguments go to ``torch.utils.data.DataLoader`` (e.g. ``prefetch_factor``,
    ``timeout``, ``multiprocessing_context``).  Raises ConfigError when a full epoch cannot give every rank
    one batch.  ``batches_per_transfer`` (default: about 256K tokens' worth) is how many consecutive batches a
    worker sends per queue item; it changes prefetch granularity only, never the batches.  ``skip``: steps
    and documents to leave out, or a quarantine file (``ShardLoader.skip``; after a loaded state's own).
    """
    return ShardLoader(dataset, batch_size=batch_size, num_workers=num_workers, pin_memory=pin_memory, rank=rank,
                       world_size=world_size, batches_per_transfer=batches_per_transfer, skip=skip,
                       **dataloader_kwargs)
