"""Turn a batch's units into its wire dict: which reader each row comes from, then ``batches`` builds it.

A row is ``(EpochReader, unit)``: a single dataset's batch has one reader, a mixture's batch rows from
several (one per source and source epoch).  ``unit_ids`` are what the batch reports as ``unit_ids``
with ``return_doc_info``: stream units for one dataset, mixture positions for a mixture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardprep.loader.batches import doc_item, pack_rows, pad_arrays
from shardprep.loader.chatbatch import chat_pack, doc_trained, pad_trained
from shardprep.loader.epoch import EpochReader
from shardprep.loader.layout import Extras, Layout, Pack, Pad
from shardprep.loader.order import Piece
from shardprep.loader.reader import DecodedChunk

Row = tuple[EpochReader, int]


@dataclass(frozen=True)
class RowFormat:
    """How units become arrays (the dataset's layout and options; ``pad_id`` resolved for its ids);
    ``chat``: some rows are chat data, so every row carries a trained mask (``chatbatch``)."""

    layout: Layout
    extras: Extras
    pad_id: int
    wire_dtype: np.dtype
    chat: bool = False


def doc_id(er: EpochReader, p: Piece, dc: DecodedChunk) -> tuple[int, int]:
    """(index of the document within its shard, global document number), both in file order."""
    doc = int(er.reader.table(p.shard).doc_start[p.chunk] + dc.order[p.start])
    return doc, int(er.index.shard_doc_start[p.shard] + doc)


def assemble(fmt: RowFormat, rows: list[Row], unit_ids: np.ndarray) -> dict:
    """The wire dict of one batch (pack/pad) or one document (doc mode: exactly one row)."""
    layout = fmt.layout
    if isinstance(layout, Pack) and fmt.chat:
        out = chat_pack(rows, layout.seq_len, fmt.extras, fmt.pad_id, fmt.wire_dtype)
        if fmt.extras.doc_info:
            out["unit_ids"] = np.asarray(unit_ids, dtype=np.int64)
        return out
    if isinstance(layout, Pack):
        out = pack_rows([(er.stream, er.reader, er.index.shard_doc_start, u) for er, u in rows], layout.seq_len,
                        fmt.extras, fmt.wire_dtype)
        if fmt.extras.doc_info:
            out["unit_ids"] = np.asarray(unit_ids, dtype=np.int64)
        return out
    found = []
    for er, u in rows:
        p = er.stream.locate(u)
        dc = er.reader.chunk(p.shard, p.chunk)
        found.append((er, p, dc, dc.doc(p.start)))
    if isinstance(layout, Pad):
        arrays = pad_arrays([d for *_, d in found], layout.seq_len, fmt.pad_id, fmt.wire_dtype)
        if fmt.chat:
            arrays["trained"] = pad_trained([dc.doc_trained(p.start) for _, p, dc, _ in found], arrays["lengths"],
                                            layout.seq_len)
        if fmt.extras.doc_info:
            arrays["doc_ids"] = np.array([doc_id(er, p, dc)[1] for er, p, dc, _ in found], dtype=np.int64)
            arrays["unit_ids"] = np.asarray(unit_ids, dtype=np.int64)
        return arrays
    (er, p, dc, tokens), = found
    doc, gid = doc_id(er, p, dc)
    if layout.seq_len is not None:                 # Doc: truncated when a seq_len is given
        tokens = tokens[:layout.seq_len]
    item = doc_item(tokens, shard_name=er.index.shards[p.shard].name, doc=doc, doc_id=gid, unit=int(unit_ids[0]))
    if fmt.chat:
        item["trained"] = doc_trained(dc.doc_trained(p.start), len(tokens))
    return item


class SinglePass:
    """A single dataset's pass: shuffled positions -> its epoch's units -> the batch."""

    def __init__(self, er: EpochReader, fmt: RowFormat):
        self.er, self.fmt = er, fmt

    def batch(self, positions: np.ndarray) -> dict:
        units = self.er.units(positions)
        return assemble(self.fmt, [(self.er, u) for u in units.tolist()], units)

    def close(self) -> None:
        self.er.close()
