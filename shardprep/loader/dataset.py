"""``ShardDataset``: a torch IterableDataset over a shardprep output (or legacy token_ids.json tars).

The dataset yields whole batches (``make_dataloader`` runs it with ``batch_size=None``) so that which
units form batch j of a rank is decided here, by ``distribute``, and not by DataLoader's sampler:

1. the epoch's unit order comes from ``order`` (a function of seed and epoch only);
2. ``distribute.Split`` gives this rank an equal number of batches and reports what is dropped;
3. worker w of nw yields the rank's batches j with j % nw == w, which DataLoader's in-order round robin
   turns back into the rank's exact sequence, for any nw (including more workers than shards);
4. ``batches`` reads the units through a per-worker ``ChunkReader`` and builds tensors.

A mixture (several datasets with token weights, ``loader.mixture``) is read the same way: its positions
are the mixture's schedule, each read from its source by ``mixread`` (step 4 per source).

Iterated directly (without ``make_dataloader``) it yields single units: pack/pad rows as 1-D tensors, or
documents in doc mode.  ``ShardDataset(path, mode="doc", shuffle=False)`` is every document in index order.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from torch.utils.data import IterableDataset

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.assemble import SinglePass
from shardprep.loader.batches import to_tensors
from shardprep.loader.config import LoaderConfig, LoaderKeywords, from_keywords
from shardprep.loader.layout import Doc, Extras, Layout, Pack
from shardprep.loader.mixread import MixturePass
from shardprep.loader.mixture import Mixture
from shardprep.loader.reading import Reading
from shardprep.loader.world import World, worker_slot

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassSpec:
    """What one pass over the data covers; set by the loader wrapper, or the whole epoch by default."""

    epoch: int
    remaining: D.Ranges
    world: World
    batch: int | None           # None: unbatched (one unit per item)
    per_transfer: int = 0       # >0: yield lists of that many numpy batches (the loader converts and unpacks)


class ShardDataset(IterableDataset):
    """Tokenized shards as a resumable, rank- and worker-aware stream of units (see module docstring).

    ``ShardDataset(path, mode="pack", seq_len=2048, seed=1234, ...)``: the keywords of docs/loader.md,
    turned into one ``LoaderConfig`` at the door (``loader.config``); or ``ShardDataset(path, config)``.
    ``path`` is a finalized output, a mixture, legacy tars, or a source from ``config.source_from``.
    """

    def __init__(self, path: object, config: LoaderConfig | None = None, **keywords: Unpack[LoaderKeywords]):
        source, self.config, self.placement = from_keywords(path, config, keywords)
        # what is read and in which order, decided without torch (``loader.reading``; trace builds the same)
        self.reading = r = Reading(source, self.config)
        self.mixture: Mixture | None = r.mixture
        self.sources, self.index, self._tables, self.chat, self.chat_rows = r.sources, r.index, r.tables, r.chat, \
            r.chat_rows
        self.num_units, self.tail_tokens = r.sizes.num_units, r.sizes.tail_tokens
        self.total_tokens, self.total_docs = r.sizes.total_tokens, r.sizes.total_docs
        self._read_opts = r.read_opts
        # the state's identity: the block in use, or for a mixture the option (None: each source's default)
        self.shuffle_block = self._read_opts[0].block if self.mixture is None else self.config.shuffle_block
        self.cache_bytes = self._read_opts[0].cache_bytes
        self.pad_id, self.wire_dtype = r.pad_id, r.wire_dtype
        self.epoch = 0
        self._pass: PassSpec | None = None

    # -- the config, as the state and the loader read it ---------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self.config.layout

    @property
    def mode(self) -> str:
        return self.config.layout.name

    @property
    def seq_len(self) -> int | None:
        return self.config.layout.seq_len

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def shuffle(self) -> bool:
        return self.config.shuffle

    @property
    def extras(self) -> Extras:
        return self.config.extras

    def packing_stats(self) -> dict | None:
        """Chat pack mode: rows, efficiency (real tokens over row tokens), padding share, truncated and
        dropped conversations (per source in a mixture, by name); None for pretraining data."""
        found = {(self.mixture.names[n] if self.mixture is not None else "dataset"): rows.summary()
                 for n, rows in enumerate(self.chat_rows) if rows is not None}
        if not found:
            return None
        return found if self.mixture is not None else found["dataset"]

    @property
    def fingerprint(self) -> str:
        return self.reading.fingerprint

    @property
    def vocab_size(self) -> int | None:
        """The largest vocabulary of the datasets read (None for legacy tars, which carry no tokenizer)."""
        sizes = [i.tokenizer.vocab_size for i in self.sources if i.tokenizer is not None]
        return max(sizes) if sizes else None

    @property
    def unit_name(self) -> str:
        return self.layout.unit_name

    def set_epoch(self, epoch: int) -> None:
        """Order for the next direct iteration (the loader wrapper passes its own epoch instead)."""
        if int(epoch) < 0:
            raise ConfigError(f"epoch={epoch} is invalid: must be >= 0")
        self.epoch = int(epoch)

    def split(self, remaining: D.Ranges, world_size: int, batch: int | None) -> D.Split:
        return self.reading.split(remaining, world_size, batch)

    def check_one_batch(self, world_size: int, batch: int | None) -> None:
        """Refuse settings under which a full epoch cannot give every rank one batch (numbers in the message)."""
        split = self.split(((0, self.num_units),), world_size, batch)
        if split.steps == 0 and not isinstance(self.layout, Doc):
            per = f"{self.total_tokens} tokens = {self.num_units} rows of seq_len={self.seq_len}" \
                if isinstance(self.layout, Pack) else f"{self.num_units} documents"
            if self.mixture is None and self.chat_rows[0] is not None:
                per = f"{self.num_units} rows of whole conversations at seq_len={self.seq_len}"
            raise ConfigError(
                f"seq_len={self.seq_len} batch_size={batch or 1} world_size={world_size}: the dataset has {per}, "
                f"fewer than one batch per rank ({batch or 1} x {world_size} = {(batch or 1) * world_size} "
                f"{self.unit_name})", hint="use a smaller seq_len or batch_size, or fewer ranks")

    def for_pass(self, spec: PassSpec) -> "ShardDataset":
        """A shallow copy that iterates exactly ``spec`` (what the loader hands to DataLoader)."""
        clone = copy.copy(self)
        clone._pass = spec
        return clone

    def full_pass(self, batch: int | None = None) -> PassSpec:
        return PassSpec(self.epoch, D.normalize([(0, self.num_units)]),
                        self.placement.resolve(), batch)

    # -- iteration --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict | list[dict]]:
        """Batches (numpy wire dicts turned into tensors), or lists of numpy batches when the loader asked
        for transfers of several (``PassSpec.per_transfer``; it converts them on its side)."""
        spec = self._pass
        if spec is None:
            spec = self.full_pass()
            self.check_one_batch(spec.world.world_size, None)
        split = self.split(spec.remaining, spec.world.world_size, spec.batch)
        worker, num_workers = worker_slot()
        rows = self.open_pass(spec.epoch)
        rank = spec.world.rank
        steps = split.rank_steps(rank)

        def batch(j: int) -> dict:
            return rows.batch(D.positions(split.batch_ranges(rank, j)))

        try:
            if spec.per_transfer:
                for transfer in D.worker_transfers(steps, worker, num_workers, spec.per_transfer):
                    yield [batch(j) for j in transfer]
            else:
                for j in D.worker_steps(steps, worker, num_workers):
                    yield self.tensors(batch(j), unbatched=spec.batch is None)
        finally:
            rows.close()

    def tensors(self, item: dict, *, unbatched: bool = False, pin: bool = False) -> dict:
        """Turn an assembled numpy item into tensors (adds pack labels)."""
        return to_tensors(item, self.layout, unbatched=unbatched, pin=pin)

    def open_pass(self, epoch: int) -> SinglePass | MixturePass:
        """What turns this pass's shuffled positions into batches (``batch(positions)``, then ``close()``)."""
        return self.reading.open_pass(epoch)

    def __repr__(self) -> str:
        where = repr(self.index.root) if self.mixture is None else \
            "[" + ", ".join(f"({s.location!r}, {s.weight})" for s in self.mixture.spec.sources) + "]"
        return (f"ShardDataset({where}, mode={self.mode!r}, seq_len={self.seq_len}, seed={self.seed}, "
                f"units={self.num_units} {self.unit_name}, shards={sum(len(i.shards) for i in self.sources)})")
