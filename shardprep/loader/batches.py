"""Assemble units into what the training loop receives: pack rows, padded rows, or single documents.

Two stages.  ``pack_arrays`` / ``pad_arrays`` / ``doc_item`` run where the data is read (a DataLoader
worker or the main process) and build a compact *wire* dict of numpy arrays: token ids keep the shard's
dtype (uint16 for most vocabularies), pad rows travel as ids + lengths.  ``to_tensors`` runs in the
process that consumes the batch and expands that into the final tensors.  A uint16 batch pickles through
the worker pipe 4x smaller than int64 tensors, and numpy pickling beats torch's shared-memory handoff
for batches of this size; without workers the two stages simply run back to back.

Conventions (Hugging Face causal LM):
* pack: ``input_ids`` and ``labels`` are ``LongTensor[B, L]``, labels equal to the ids (the model
  shifts), no padding.  ``position_ids`` restart at 0 at every row start and document start; with doc
  info, ``cu_seqlens`` (int32, flash-attn varlen style, over the flattened batch), per-token ``doc_ids``
  (global document numbers) and ``unit_ids`` (row numbers in the epoch stream).
* pad: one document per row, truncated to L, right-padded with ``pad_id``; ``attention_mask``;
  ``labels`` are -100 on padding only.
* chat data (``chatbatch``) adds a ``trained`` mask to the wire: pack rows of whole conversations then
  carry ``attention_mask`` and ``labels`` (-100 where untrained, on each conversation's first token and
  on padding), pad rows and doc items ``labels`` from the same mask.  Padding is found *by length*, never by comparing ids, so a real
  EOS keeps its label even when the pad id equals the EOS id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from shardprep.loader.layout import Doc, Extras, Layout, Pack, Pad
from shardprep.loader.order import EpochStream

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.loader.reader import DecodedChunk

IGNORE_INDEX = -100
_WIDEN = ("input_ids", "position_ids")       # wire fields sent narrow and widened to int64 on arrival


class DocStarts(Protocol):
    """A shard's chunk table as packing sees it (``ChunkTable``): each chunk's first document number."""

    @property
    def doc_start(self) -> np.ndarray: ...


class ChunkSource(Protocol):
    """Where ``pack_arrays`` reads decoded chunks: the loader's ``ChunkReader``, or the window of samples
    not yet packed that ``shardprep.wds.pack`` keeps (so both cut rows with this one code)."""

    def chunk(self, shard: int, chunk: int) -> DecodedChunk: ...

    def table(self, shard: int) -> DocStarts: ...


def _segments_to_positions(starts: np.ndarray) -> np.ndarray:
    """position ids (B, L) restarting at every True of ``starts`` (a row start is always one)."""
    b, length = starts.shape
    col = np.broadcast_to(np.arange(length, dtype=np.int32), (b, length))
    last = np.where(starts, col, 0)
    np.maximum.accumulate(last, axis=1, out=last)
    return col - last


def pack_arrays(stream: EpochStream, reader: ChunkSource, units: np.ndarray, seq_len: int, extras: Extras,
                doc_base: np.ndarray, dtype: np.dtype) -> dict[str, np.ndarray]:
    """Wire dict for pack rows ``units`` (a unit is ``seq_len`` consecutive stream tokens) of one stream."""
    out = pack_rows([(stream, reader, doc_base, u) for u in units.tolist()], seq_len, extras, dtype)
    if extras.doc_info:
        out["unit_ids"] = np.asarray(units, dtype=np.int64)
    return out


PackRow = tuple[EpochStream, ChunkSource, np.ndarray, int]
"""Where a row comes from: ``(stream, reader, doc_base, unit)``; ``doc_base`` is each shard's first
global document number.  Rows of one batch may come from different streams (a mixture's sources)."""


def pack_rows(rows: list[PackRow], seq_len: int, extras: Extras, dtype: np.dtype) -> dict[str, np.ndarray]:
    """Wire dict for pack rows (``unit_ids`` is the caller's: a unit number only means something per stream)."""
    b = len(rows)
    ids = np.empty((b, seq_len), dtype=dtype)
    starts = np.zeros((b, seq_len), dtype=bool) if extras.position_ids or extras.doc_info else None
    doc_ids = np.empty((b, seq_len), dtype=np.int64) if extras.doc_info else None
    for i, (stream, reader, doc_base, u) in enumerate(rows):
        col = 0
        for p in stream.pieces(u * seq_len, seq_len):
            dc = reader.chunk(p.shard, p.chunk)
            ids[i, col:col + p.n] = dc.tokens[p.start:p.start + p.n]
            if starts is not None:
                lo, hi = p.start, p.start + p.n
                first = int(np.searchsorted(dc.starts, lo, side="right")) - 1
                last = int(np.searchsorted(dc.starts, hi, side="left"))
                inner = dc.starts[first:last]          # document starts in [lo, hi)
                starts[i, col + inner[inner >= lo] - lo] = True
                if doc_ids is not None:
                    bounds = np.clip(dc.starts[first:last + 1], lo, hi)
                    gid = doc_base[p.shard] + reader.table(p.shard).doc_start[p.chunk] + dc.order[first:last]
                    doc_ids[i, col:col + p.n] = np.repeat(gid, np.diff(bounds))
            col += p.n
    out = {"input_ids": ids}
    if starts is not None:
        starts[:, 0] = True
        if extras.position_ids:
            out["position_ids"] = _segments_to_positions(starts)
        if doc_ids is not None:
            flat = np.flatnonzero(starts.ravel())
            out["cu_seqlens"] = np.append(flat, b * seq_len).astype(np.int32)
            out["doc_ids"] = doc_ids
    return out


def pad_arrays(docs: list[np.ndarray], seq_len: int, pad_id: int, dtype: np.dtype) -> dict[str, np.ndarray]:
    """Wire dict for pad rows: ids truncated to ``seq_len`` and right-padded, plus each row's real length."""
    b = len(docs)
    ids = np.full((b, seq_len), pad_id, dtype=dtype)
    lengths = np.fromiter((min(len(d), seq_len) for d in docs), dtype=np.int64, count=b)
    for i, d in enumerate(docs):
        ids[i, :lengths[i]] = d[:seq_len]
    return {"input_ids": ids, "lengths": lengths}


def doc_item(tokens: np.ndarray, *, shard_name: str, doc: int, doc_id: int, unit: int) -> dict:
    """Doc mode: one document, unbatched, with its provenance (shard name, index in shard, global id)."""
    return {"input_ids": tokens.copy(), "shard": shard_name, "doc": doc, "doc_id": doc_id, "unit": unit}


def to_tensors(item: dict, layout: Layout, *, unbatched: bool = False, pin: bool = False) -> dict:
    """Expand a wire dict into the batch the training loop sees (see the module docstring)."""
    import torch

    out = {}
    for k, v in item.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(v)
            out[k] = t.long() if k in _WIDEN and t.dtype != torch.int64 else t
        else:
            out[k] = v
    trained = out.pop("trained", None)          # chat data (loader.chatbatch): False where not trained
    if isinstance(layout, Pack) and trained is None:
        out["labels"] = out["input_ids"].clone()
    elif isinstance(layout, (Pack, Pad)):
        lengths = out.pop("lengths")
        mask = torch.arange(out["input_ids"].shape[1])[None, :] < lengths[:, None]
        out["attention_mask"] = mask.long()
        out["labels"] = out["input_ids"].masked_fill(~mask, IGNORE_INDEX)   # by length, never by id
        if trained is not None:
            out["labels"] = out["labels"].masked_fill(~trained, IGNORE_INDEX)
    elif trained is not None:
        out["labels"] = out["input_ids"].masked_fill(~trained, IGNORE_INDEX)
    if unbatched and not isinstance(layout, Doc):
        out = {k: (v[0] if isinstance(v, torch.Tensor) and k != "cu_seqlens" else v) for k, v in out.items()}
    if pin:
        out = {k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
    return out
