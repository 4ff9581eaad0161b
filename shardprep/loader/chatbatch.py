"""Chat batches: packed rows of whole conversations, and pad/doc rows, each with its trained mask.

A chat wire dict is the pretraining one plus ``trained`` (bool, like ``input_ids``: True where the token
gets a label) and, for rows, ``lengths`` (real tokens per row; the rest is padding).  ``to_tensors`` turns
them into ``labels`` (the id where trained, else -100) and ``attention_mask``.  The mask is already False
on padding and on the first token of every conversation of a packed row, so no conversation is trained
to follow another.  Rows of a pretraining source in the same batch (a mixture) are fully trained.

A packed row (``Pack`` over chat data) is row ``r`` of packing window ``w`` of a shard: the stream's
pieces are windows (``chatrows``), and a window's packing (``binpack.pack`` over its conversations in the
epoch's order: chunks in file order, each chunk's documents in its seeded order) is computed once per
worker and epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardprep.errors import InputDataError
from shardprep.loader.batches import _segments_to_positions, pack_rows
from shardprep.loader.binpack import Packing, pack
from shardprep.loader.epoch import EpochReader
from shardprep.loader.layout import Extras

KEEP_WINDOWS = 16      # packings kept per reader: a shuffle block spans a few windows


@dataclass(frozen=True)
class WindowRows:
    """A window's packing for one epoch; window position ``m`` is document ``doc[m]`` (stream order) of chunk
    ``chunk[m]``."""

    packing: Packing
    chunk: np.ndarray
    doc: np.ndarray


def window_rows(er: EpochReader, shard: int, window: int) -> WindowRows:
    """The packing of ``window`` of ``shard`` in ``er``'s epoch (cached on the reader)."""
    key = (shard, window)
    found = er.packings.get(key)
    if found is not None:
        er.packings.move_to_end(key)
        return found
    rows = er.rows
    assert rows is not None, "a chat packing needs the dataset's ChatRows"
    bounds = rows.bounds[shard]
    lens, chunk_of, doc_of = [], [], []
    for c in range(int(bounds[window]), int(bounds[window + 1])):
        dc = er.reader.chunk(shard, c)
        n = len(dc.starts) - 1
        lens.append(np.diff(dc.starts)[dc.order])
        chunk_of.append(np.full(n, c, dtype=np.int64))
        doc_of.append(np.arange(n, dtype=np.int64))
    packing = pack(np.concatenate(lens), rows.seq_len, rows.packing.overflow)
    if packing.rows != int(rows.window_rows[shard][window]):
        raise InputDataError(f"{er.index.location(er.index.shards[shard].name)}: packing window {window} gives "
                             f"{packing.rows} rows, {int(rows.window_rows[shard][window])} when the dataset was "
                             f"opened: the shard changed under the loader")
    found = er.packings[key] = WindowRows(packing, np.concatenate(chunk_of), np.concatenate(doc_of))
    if len(er.packings) > KEEP_WINDOWS:
        er.packings.popitem(last=False)
    return found


@dataclass
class ChatArrays:
    """A batch being filled: ids, trained mask, segment starts, real lengths and (with doc info) doc ids."""

    ids: np.ndarray
    trained: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    doc_ids: np.ndarray | None

    @classmethod
    def empty(cls, b: int, seq_len: int, pad_id: int, dtype: np.dtype, doc_info: bool) -> ChatArrays:
        return cls(np.full((b, seq_len), pad_id, dtype=dtype), np.zeros((b, seq_len), dtype=bool),
                   np.zeros((b, seq_len), dtype=bool), np.zeros(b, dtype=np.int64),
                   np.full((b, seq_len), -1, dtype=np.int64) if doc_info else None)


def _fill_chat_row(out: ChatArrays, i: int, er: EpochReader, unit: int) -> None:
    """Row ``i``: packed row ``unit`` of ``er``'s epoch, conversation after conversation, then padding."""
    p = er.stream.locate(unit)
    wr = window_rows(er, p.shard, p.chunk)
    members, takes = wr.packing.row(p.start)
    col = 0
    for m, take in zip(members.tolist(), takes.tolist()):
        c = int(wr.chunk[m])
        dc = er.reader.chunk(p.shard, c)
        doc = int(dc.order[int(wr.doc[m])])
        lo = int(dc.starts[doc])
        assert dc.trained is not None, "chat chunks carry their trained mask"
        out.ids[i, col:col + take] = dc.tokens[lo:lo + take]
        out.trained[i, col:col + take] = dc.trained[lo:lo + take]
        out.trained[i, col] = False                # never predicted from the conversation before it
        out.starts[i, col] = True
        if out.doc_ids is not None:
            table = er.reader.table(p.shard)
            out.doc_ids[i, col:col + take] = er.index.shard_doc_start[p.shard] + table.doc_start[c] + doc
        col += take
    out.lengths[i] = col
    if col < out.ids.shape[1]:
        out.starts[i, col] = True                  # padding is a segment of its own (cu_seqlens, positions)


def _fill_text_row(out: ChatArrays, i: int, er: EpochReader, unit: int, doc_info: bool) -> None:
    """Row ``i``: pretraining row ``unit`` (a mixture's other source), every token trained."""
    seq_len = out.ids.shape[1]
    got = pack_rows([(er.stream, er.reader, er.index.shard_doc_start, unit)], seq_len,
                    Extras(position_ids=True, doc_info=doc_info), out.ids.dtype)
    out.ids[i] = got["input_ids"][0]
    out.trained[i] = True
    out.starts[i] = got["position_ids"][0] == 0
    out.lengths[i] = seq_len
    if out.doc_ids is not None:
        out.doc_ids[i] = got["doc_ids"][0]


def chat_pack(rows: list[tuple[EpochReader, int]], seq_len: int, extras: Extras, pad_id: int,
              dtype: np.dtype) -> dict[str, np.ndarray]:
    """Wire dict of packed chat rows (and pretraining rows of a mixture); ``unit_ids`` are the caller's."""
    out = ChatArrays.empty(len(rows), seq_len, pad_id, dtype, extras.doc_info)
    for i, (er, unit) in enumerate(rows):
        if er.rows is not None:
            _fill_chat_row(out, i, er, unit)
        else:
            _fill_text_row(out, i, er, unit, extras.doc_info)
    out.starts[:, 0] = True
    wire = {"input_ids": out.ids, "trained": out.trained, "lengths": out.lengths}
    if extras.position_ids:
        wire["position_ids"] = _segments_to_positions(out.starts)
    if out.doc_ids is not None:
        wire["cu_seqlens"] = np.append(np.flatnonzero(out.starts.ravel()), out.starts.size).astype(np.int32)
        wire["doc_ids"] = out.doc_ids
    return wire


def doc_trained(mask: np.ndarray | None, length: int) -> np.ndarray:
    """A document's trained mask for a pad row or doc item: chat data's own (never its first token), a
    pretraining document's all True."""
    if mask is None:
        return np.ones(length, dtype=bool)
    out = mask[:length].copy()
    out[:1] = False
    return out


def pad_trained(masks: list[np.ndarray | None], lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """The ``trained`` field of pad rows: each row's mask, False on padding."""
    out = np.zeros((len(masks), seq_len), dtype=bool)
    for i, (mask, n) in enumerate(zip(masks, lengths.tolist())):
        out[i, :n] = doc_trained(mask, n)
    return out
