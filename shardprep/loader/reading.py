"""``Reading``: what a loader reads, decided once and without torch (a dataset or mixture + its config).

``ShardDataset`` builds one at construction and keeps using its fields; ``shardprep trace`` and the
quarantine file build the same one on a login node (no torch, no ranks) to answer "which documents made
step N" from the same sizes, read options and schedule the training run used.  Everything here reads
index.json files (and, for chat data in pack mode, every chunk's document lengths, as the loader does);
no tokens.

- ``sources``: the datasets read (one, or a mixture's sources in spec order), ``mixture`` their schedule;
- ``num_units`` (rows or documents of a pass), ``tail_tokens``, ``total_tokens``, ``total_docs``;
- ``read_opts``: per source its order and read options (shuffle block, cache, chat rows);
- ``pad_id`` and ``wire_dtype``: how ids travel; ``split``: the rank/batch split of a pass;
- ``open_pass(epoch)``: what turns shuffled positions into batches; ``epoch_reader``: one source's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.assemble import RowFormat, SinglePass
from shardprep.loader.chatrows import ChatRows, chat_rows
from shardprep.loader.config import Dataset, LegacyTars, LoaderConfig, Source
from shardprep.loader.epoch import EpochReader, ReadOptions
from shardprep.loader.index import DatasetIndex, load_index
from shardprep.loader.layout import Doc, Layout, Pack, Pad
from shardprep.loader.mixread import MixturePass
from shardprep.loader.mixture import MixSpec, Mixture, open_mixture
from shardprep.shard.format import DTYPES
from shardprep.shard.sidecar import ChunkTable
from shardprep.storage.locations import StorageOptions

SHUFFLE_TOKENS = 1 << 23      # default shuffle block: about 8M tokens of units (16 MiB of uint16)


def open_dataset(source: Dataset | LegacyTars, *, verify: bool, storage: StorageOptions,
                 files: bool = True) -> DatasetIndex:
    """One dataset's index: a finalized output's (checked against its files unless ``files`` is False), or
    legacy tars scanned."""
    if isinstance(source, LegacyTars):
        from shardprep.loader.legacy import load_legacy
        return load_legacy(list(source.paths))
    return load_index(source.location, verify=verify, storage=storage, files=files)


@dataclass
class Sizes:
    """Units of a pass (rows or documents) and the tokens and documents behind them."""

    num_units: int
    tail_tokens: int
    total_tokens: int
    total_docs: int


class Reading:
    """A source opened under a ``LoaderConfig``: everything a pass's order depends on (module docstring)."""

    def __init__(self, source: Source, config: LoaderConfig, *, files: bool = True):
        """``files``: check that every listed shard exists with its size, as a loader does before its first
        batch; ``trace`` leaves it out (it reads only the sidecars a step touches, and those reads fail clearly)."""
        self.config = cfg = config
        self.mixture: Mixture | None = None
        if isinstance(source, MixSpec):
            self.mixture = open_mixture(source, layout=cfg.layout, seed=cfg.seed, verify=cfg.verify,
                                        storage=cfg.storage, files=files)
            self.sources = self.mixture.indexes
        else:
            self.sources = [open_dataset(source, verify=cfg.verify, storage=cfg.storage, files=files)]
        self.index = self.sources[0]
        self.tables: list[dict[int, ChunkTable]] = [{} for _ in self.sources]
        self.chat = any(i.record is not None and i.record.chat for i in self.sources)
        self.chat_rows = [self._chat_rows(i, tables) for i, tables in zip(self.sources, self.tables)]
        if self.mixture is not None:
            for n, rows in enumerate(self.chat_rows):
                if rows is not None:
                    self.mixture.use_rows(n, rows.rows)
        self.sizes = self._size()
        self.read_opts = [self._read_options(i, rows) for i, rows in zip(self.sources, self.chat_rows)]
        self.pad_id = self._resolve_pad(cfg.layout.pad_id if isinstance(cfg.layout, Pad) else None)
        # token ids travel in the shards' dtype, the widest of a mixture's (legacy JSON: int64); the pad id fits it
        self.wire_dtype = np.result_type(*(np.dtype(DTYPES.get(i.dtype, "<i8")) for i in self.sources))
        if self.pad_id > np.iinfo(self.wire_dtype).max or self.pad_id < 0:
            raise ConfigError(f"pad_id={self.pad_id} is invalid: must be a token id in [0, "
                              f"{np.iinfo(self.wire_dtype).max}] for {self.wire_dtype.name} ids")

    @property
    def layout(self) -> Layout:
        return self.config.layout

    @property
    def _read_opts(self) -> list[ReadOptions]:
        """``ShardDataset``'s names for ``read_opts`` and ``tables`` (``locate`` reads either object)."""
        return self.read_opts

    @property
    def _tables(self) -> list[dict[int, ChunkTable]]:
        return self.tables

    @property
    def fingerprint(self) -> str:
        """What a loader state names the data by: the dataset's, or the mixture's (its sources and weights)."""
        return self.index.fingerprint if self.mixture is None else self.mixture.fingerprint

    @property
    def num_units(self) -> int:
        return self.sizes.num_units

    @property
    def names(self) -> list[str]:
        """Source names (a single dataset is called by its location)."""
        return self.mixture.names if self.mixture is not None else [str(self.index.root)]

    def _size(self) -> Sizes:
        if self.mixture is not None:
            mix = self.mixture
            docs = mix.length if not isinstance(self.layout, Pack) else \
                int(mix.length * mix.unit_tokens / max(1.0, float(mix.tokens.sum() / max(1, mix.docs.sum()))))
            return Sizes(mix.length, 0, int(mix.length * mix.unit_tokens), docs)
        tokens, docs = int(self.index.shard_tokens.sum()), int(self.index.shard_docs.sum())
        rows = self.chat_rows[0]
        if rows is not None:                       # whole conversations per row: nothing is a tail
            return Sizes(rows.rows, 0, tokens, docs)
        if isinstance(self.layout, Pack):
            units = tokens // self.layout.seq_len
            return Sizes(units, tokens - units * self.layout.seq_len, tokens, docs)
        return Sizes(docs, 0, tokens, docs)

    def _read_options(self, index: DatasetIndex, rows: ChatRows | None = None) -> ReadOptions:
        """A dataset's shuffle block (default: about 8M tokens of units) and chunk cache (3 blocks, >= 64 MiB)."""
        cfg, layout = self.config, self.layout
        tokens, docs = int(index.shard_tokens.sum()), int(index.shard_docs.sum())
        unit_tokens = layout.seq_len if isinstance(layout, Pack) else max(1, tokens // max(1, docs))
        block = int(cfg.shuffle_block) if cfg.shuffle_block else max(1, SHUFFLE_TOKENS // unit_tokens)
        cache = int(cfg.cache_bytes) if cfg.cache_bytes else max(64 << 20, 3 * block * unit_tokens * 4)
        return ReadOptions(isinstance(layout, Pack) and rows is None, cfg.seed, cfg.shuffle, block, cache, rows)

    def _chat_rows(self, index: DatasetIndex, tables: dict) -> ChatRows | None:
        """Pack mode over chat data: its rows of whole conversations, counted once (``loader.chatrows``)."""
        if not isinstance(self.layout, Pack) or index.record is None or not index.record.chat:
            return None
        return chat_rows(index, self.layout.seq_len, self.config.conversations, tables)

    def _resolve_pad(self, pad_id: int | None) -> int:
        """Explicit pad id, else the tokenizer's pad, else its EOS, else 0 (labels never depend on it)."""
        for value in (pad_id, self.index.special_id("pad_id"), self.index.special_id("eos_id")):
            if value is not None:
                return int(value)
        return 0

    def split(self, remaining: D.Ranges, world_size: int, batch: int | None) -> D.Split:
        """The pass over ``remaining`` by ``world_size`` ranks (doc mode: exactly once, unbatched)."""
        if isinstance(self.layout, Doc):
            if batch not in (None, 1):
                raise ConfigError(f"batch_size={batch} is invalid for mode='doc' (unbatched, exactly once): use None")
            return D.Split(remaining, world_size, 1, exact=True)
        return D.Split(remaining, world_size, batch or 1)

    def row_format(self) -> RowFormat:
        return RowFormat(self.layout, self.config.extras, self.pad_id, self.wire_dtype, self.chat)

    def epoch_reader(self, source: int, epoch: int) -> EpochReader:
        """Source ``source`` in its own epoch ``epoch`` (a mixture's source epochs advance on their own)."""
        units = self.num_units if self.mixture is None else int(self.mixture.units[source])
        return EpochReader(self.sources[source], units, epoch, self.read_opts[source], self.tables[source])

    def open_pass(self, epoch: int) -> SinglePass | MixturePass:
        """What turns this pass's shuffled positions into batches (``batch(positions)``, then ``close()``)."""
        fmt = self.row_format()
        if self.mixture is not None:
            return MixturePass(self.mixture, epoch, fmt, self.read_opts, self.tables)
        return SinglePass(self.epoch_reader(0, epoch), fmt)
