"""``ShardDataset``: a torch IterableDataset over a shardprep output (or legacy token_ids.json tars).

The dataset yields whole batches (``make_dataloader`` runs it with ``batch_size=None``) so that which
units form batch j of a rank is decided here, by ``distribute``, and not by DataLoader's sampler:

1. the epoch's unit order comes from ``order`` (a function of seed and epoch only);
2. ``distribute.Split`` gives this rank an equal number of batches and reports what is dropped;
3. worker w of nw yields the rank's batches j with j % nw == w, which DataLoader's in-order round robin
   turns back into the rank's exact sequence, for any nw (including more workers than shards);
4. ``batches`` reads the units through a per-worker ``ChunkReader`` and builds tensors.

Iterated directly (without ``make_dataloader``) it yields single units: pack/pad rows as 1-D tensors, or
documents in doc mode.  ``ShardDataset(path, mode="doc", shuffle=False)`` is every document in index order.
"""

from __future__ import annotations

import copy
import glob
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from torch.utils.data import IterableDataset

from shardprep.errors import ConfigError, InputDataError
from shardprep.loader import distribute as D
from shardprep.loader.batches import Extras, doc_item, pack_arrays, pad_arrays, to_tensors
from shardprep.loader.index import DatasetIndex, load_index
from shardprep.loader.order import BlockShuffle, EpochStream, Piece
from shardprep.loader.reader import ChunkReader, DecodedChunk
from shardprep.storage.locations import StorageOptions, is_url
from shardprep.loader.world import World, resolve_world, worker_slot
from shardprep.shard.format import DTYPES, INDEX_FILE, JOB_FILE
from shardprep.storage.s3 import ClientOptions

log = logging.getLogger(__name__)

MODES = ("pack", "pad", "doc")
SHUFFLE_TOKENS = 1 << 23      # default shuffle block: about 8M tokens of units (16 MiB of uint16)


@dataclass(frozen=True)
class PassSpec:
    """What one pass over the data covers; set by the loader wrapper, or the whole epoch by default."""

    epoch: int
    remaining: D.Ranges
    world: World
    batch: int | None           # None: unbatched (one unit per item)
    per_transfer: int = 0       # >0: yield lists of that many numpy batches (the loader converts and unpacks)


def open_dataset(path: str | Path | list, *, verify: bool, storage: StorageOptions) -> DatasetIndex:
    """A finalized output (a directory or URL prefix with index.json), else legacy tars (dir, glob, list)."""
    if isinstance(path, (list, tuple)):
        from shardprep.loader.legacy import load_legacy
        return load_legacy([str(p) for p in path])
    spec = str(path)
    if is_url(spec):
        return load_index(spec, verify=verify, storage=storage)
    p = Path(spec)
    if p.is_dir() and (p / INDEX_FILE).exists():
        return load_index(spec, verify=verify)
    if p.is_dir() and (p / JOB_FILE).exists():
        raise InputDataError(f"{spec} is a shardprep output without {INDEX_FILE}: the job is not finalized",
                             hint=f"run `shardprep status {spec}` and `shardprep finalize {spec}`")
    from shardprep.loader.legacy import expand_legacy, load_legacy
    if p.is_dir() or glob.has_magic(spec) or "{" in spec or p.suffix == ".tar":
        return load_legacy(expand_legacy(spec))
    raise ConfigError(f"path={spec!r}: no index.json there and not a directory, glob or .tar of legacy shards")


class ShardDataset(IterableDataset):
    """Tokenized shards as a resumable, rank- and worker-aware stream of units (see module docstring)."""

    def __init__(self, path: str | Path | list, *, mode: str = "pack", seq_len: int | None = None, seed: int = 0,
                 shuffle: bool = True, shuffle_block: int | None = None, pad_id: int | None = None,
                 return_position_ids: bool = False, return_doc_info: bool = False, verify: bool = False,
                 endpoint_url: str | None = None, s3: ClientOptions | None = None,
                 storage_options: dict | None = None, rank: int | None = None, world_size: int | None = None,
                 cache_bytes: int | None = None):
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r} is invalid: one of {MODES}")
        if mode in ("pack", "pad") and (seq_len is None or int(seq_len) < 1):
            raise ConfigError(f"seq_len={seq_len!r} is invalid: mode={mode!r} needs seq_len >= 1")
        if int(seed) < 0:
            raise ConfigError(f"seed={seed} is invalid: must be >= 0")
        self.mode, self.seed, self.shuffle = mode, int(seed), bool(shuffle)
        self.seq_len = None if seq_len is None else int(seq_len)
        self.extras = Extras(position_ids=return_position_ids, doc_info=return_doc_info)
        self.rank, self.world_size = rank, world_size
        storage = StorageOptions.build(endpoint_url=endpoint_url, s3=s3, storage_options=storage_options)
        self.index = open_dataset(path, verify=verify, storage=storage)
        self.total_tokens = int(self.index.shard_tokens.sum())
        self.total_docs = int(self.index.shard_docs.sum())
        if mode == "pack":
            unit_tokens = self._row_len
            self.num_units = self.total_tokens // unit_tokens
            self.tail_tokens = self.total_tokens - self.num_units * unit_tokens
        else:
            self.num_units, self.tail_tokens = self.total_docs, 0
            unit_tokens = max(1, self.total_tokens // max(1, self.total_docs))
        if shuffle_block is not None and int(shuffle_block) < 1:
            raise ConfigError(f"shuffle_block={shuffle_block} is invalid: must be >= 1 (1 disables the buffer)")
        self.shuffle_block = int(shuffle_block) if shuffle_block else max(1, SHUFFLE_TOKENS // unit_tokens)
        block_bytes = self.shuffle_block * unit_tokens * 4
        self.cache_bytes = int(cache_bytes) if cache_bytes else max(64 << 20, 3 * block_bytes)
        self.pad_id = self._resolve_pad(pad_id)
        # token ids travel in the shard's dtype (legacy JSON: int64); the pad id must fit it too
        self.wire_dtype = np.dtype(DTYPES.get(self.index.dtype, "<i8"))
        if self.pad_id > np.iinfo(self.wire_dtype).max or self.pad_id < 0:
            raise ConfigError(f"pad_id={self.pad_id} is invalid: must be a token id in [0, "
                              f"{np.iinfo(self.wire_dtype).max}] for {self.index.dtype} shards")
        self.epoch = 0
        self._pass: PassSpec | None = None
        self._tables: dict = {}

    # -- configuration ----------------------------------------------------------------------------------
    def _resolve_pad(self, pad_id: int | None) -> int:
        """Explicit pad id, else the tokenizer's pad, else its EOS, else 0 (labels never depend on it)."""
        for value in (pad_id, self.index.special_id("pad_id"), self.index.special_id("eos_id")):
            if value is not None:
                return int(value)
        return 0

    @property
    def fingerprint(self) -> str:
        return self.index.fingerprint

    @property
    def _row_len(self) -> int:
        """``seq_len`` where the mode needs it (pack, pad: ``__init__`` refuses them without)."""
        if self.seq_len is None:
            raise ConfigError(f"mode={self.mode!r} has no seq_len")
        return self.seq_len

    @property
    def unit_name(self) -> str:
        return "rows" if self.mode == "pack" else "documents"

    def set_epoch(self, epoch: int) -> None:
        """Order for the next direct iteration (the loader wrapper passes its own epoch instead)."""
        if int(epoch) < 0:
            raise ConfigError(f"epoch={epoch} is invalid: must be >= 0")
        self.epoch = int(epoch)

    def split(self, remaining: D.Ranges, world_size: int, batch: int | None) -> D.Split:
        if self.mode == "doc":
            if batch not in (None, 1):
                raise ConfigError(f"batch_size={batch} is invalid for mode='doc' (unbatched, exactly once): use None")
            return D.Split(remaining, world_size, 1, exact=True)
        return D.Split(remaining, world_size, batch or 1)

    def check_one_batch(self, world_size: int, batch: int | None) -> None:
        """Refuse settings under which a full epoch cannot give every rank one batch (numbers in the message)."""
        split = self.split(((0, self.num_units),), world_size, batch)
        if split.steps == 0 and self.mode != "doc":
            per = f"{self.total_tokens} tokens = {self.num_units} rows of seq_len={self.seq_len}" \
                if self.mode == "pack" else f"{self.num_units} documents"
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
                        resolve_world(self.rank, self.world_size), batch)

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
        reader = ChunkReader(self.index, seed=self.seed, epoch=spec.epoch, shuffle=self.shuffle,
                             packed=self.mode == "pack", cache_bytes=self.cache_bytes, tables=self._tables)
        unit = "tokens" if self.mode == "pack" else "docs"
        sizes = self.index.shard_tokens if unit == "tokens" else self.index.shard_docs
        stream = EpochStream(sizes, lambda s: reader.chunk_sizes(s, unit), seed=self.seed, epoch=spec.epoch,
                             shuffle=self.shuffle)
        block = BlockShuffle(self.num_units, self.shuffle_block, seed=self.seed, epoch=spec.epoch,
                             shuffle=self.shuffle)
        rank = spec.world.rank
        steps = split.rank_steps(rank)

        def batch(j: int) -> dict:
            return self._assemble(block.units(D.positions(split.batch_ranges(rank, j))), stream, reader)

        try:
            if spec.per_transfer:
                for transfer in D.worker_transfers(steps, worker, num_workers, spec.per_transfer):
                    yield [batch(j) for j in transfer]
            else:
                for j in D.worker_steps(steps, worker, num_workers):
                    yield self.tensors(batch(j), unbatched=spec.batch is None)
        finally:
            reader.close()

    def tensors(self, item: dict, *, unbatched: bool = False, pin: bool = False) -> dict:
        """Turn an assembled numpy item into tensors (adds pack labels)."""
        return to_tensors(item, mode=self.mode, unbatched=unbatched, pin=pin)

    def _assemble(self, units: np.ndarray, stream: EpochStream, reader: ChunkReader) -> dict:
        if self.mode == "pack":
            return pack_arrays(stream, reader, units, self._row_len, self.extras, self.index.shard_doc_start,
                               self.wire_dtype)
        found = []
        for u in units.tolist():
            p = stream.locate(u)
            dc = reader.chunk(p.shard, p.chunk)
            found.append((p, dc, dc.doc(p.start)))
        if self.mode == "pad":
            arrays = pad_arrays([d for _, _, d in found], self._row_len, self.pad_id, self.wire_dtype)
            if self.extras.doc_info:
                arrays["doc_ids"] = np.array([self._doc_id(reader, p, dc)[1] for p, dc, _ in found], dtype=np.int64)
                arrays["unit_ids"] = np.asarray(units, dtype=np.int64)
            return arrays
        (p, dc, tokens), = found
        doc, doc_id = self._doc_id(reader, p, dc)
        if self.seq_len is not None:
            tokens = tokens[:self.seq_len]
        return doc_item(tokens, shard_name=self.index.shards[p.shard].name, doc=doc, doc_id=doc_id,
                        unit=int(units[0]))

    def _doc_id(self, reader: ChunkReader, p: Piece, dc: DecodedChunk) -> tuple[int, int]:
        """(index of the document within its shard, global document number), both in file order."""
        doc = int(reader.table(p.shard).doc_start[p.chunk] + dc.order[p.start])
        return doc, int(self.index.shard_doc_start[p.shard] + doc)

    def __repr__(self) -> str:
        return (f"ShardDataset({self.index.root!r}, mode={self.mode!r}, seq_len={self.seq_len}, seed={self.seed}, "
                f"units={self.num_units} {self.unit_name}, shards={len(self.index.shards)})")
