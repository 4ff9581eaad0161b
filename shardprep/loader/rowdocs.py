"""The forward half of tracing: a batch's shuffled positions -> per row, the documents and token ranges in it.

``row_documents(reading, epoch, positions)`` answers "which documents made these rows" from the same
order the loader reads (``order``: shards, chunks, documents, blocks; ``schedule``/``mixstate`` for a
mixture), without reading any token: a pack row's pieces come from the stream, and a chunk's documents
from its document lengths (one small ranged read, ``shard.reader.read_doclens``) in the epoch's seeded
document order.  Only chat pack rows (whole conversations bin-packed per window) decode their window's
chunks, as the loader does, because the packing needs the conversations in stream order.

``DocSpan.token_lo``/``token_hi`` are the document's own token offsets: concatenating
``document[token_lo:token_hi]`` of a row's spans gives the row's ids (pack: exactly ``seq_len``; pad and
chat rows: the real tokens before padding; doc mode: the item).  ``tests/loader/test_rowdocs.py`` checks
that against the loader's batches.  The inverse (a document -> positions) is ``loader.locate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardprep.loader.chatbatch import window_rows
from shardprep.loader.epoch import EpochReader
from shardprep.loader.layout import Pack
from shardprep.loader.mixread import MixturePass
from shardprep.loader.order import doc_order
from shardprep.loader.reading import Reading
from shardprep.shard.reader import read_doclens
from shardprep.storage.store import ByteSource


@dataclass(frozen=True)
class DocSpan:
    """Tokens ``[token_lo, token_hi)`` of one document, as they fill part of a row.

    ``source``: index of the source (0 for one dataset); ``shard``: the shard's index in its source's
    index.json; ``doc``: the document's index in the shard (file order); ``doc_id``: its global number in
    its source (index order: what ``return_doc_info`` reports as ``doc_ids``).
    """

    source: int
    shard: int
    doc: int
    doc_id: int
    token_lo: int
    token_hi: int

    @property
    def tokens(self) -> int:
        return self.token_hi - self.token_lo


@dataclass(frozen=True)
class ChunkDocs:
    """One chunk's documents in an epoch's stream order: stream doc ``j`` is file doc ``order[j]`` of the
    chunk, and its tokens are ``[starts[j], starts[j + 1])`` of the chunk's stream-ordered tokens."""

    order: np.ndarray
    starts: np.ndarray
    first: int          # index in the shard of the chunk's first document (file order)


class RowDocs:
    """Rows -> document spans for one loader epoch of ``reading``; caches chunk orders and open shards."""

    def __init__(self, reading: Reading, epoch: int):
        self.reading, self.epoch = reading, int(epoch)
        self._readers: dict[tuple[int, int], EpochReader] = {}
        self._chunks: dict[tuple[int, int, int, int], ChunkDocs] = {}
        self._open: dict[tuple[int, int], ByteSource] = {}
        mix = reading.mixture
        self._mix = None if mix is None else MixturePass(mix, self.epoch, reading.row_format(), reading.read_opts,
                                                         reading.tables)

    def row(self, position: int) -> tuple[EpochReader, int, int]:
        """``(reader, unit, source)``: the source epoch's reader and the stream unit shown at ``position``."""
        if self._mix is None:
            er = self._reader(0, self.epoch)
            return er, er.block.unit(int(position)), 0
        src, seq = self._mix.locate_one(int(position))
        epoch, inner = divmod(seq, int(self.reading.mixture.units[src]))     # type: ignore[union-attr]
        er = self._reader(src, epoch)
        return er, er.block.unit(inner), src

    def _reader(self, source: int, epoch: int) -> EpochReader:
        er = self._readers.get((source, epoch))
        if er is None:
            er = self._readers[(source, epoch)] = self.reading.epoch_reader(source, epoch)
        return er

    def chunk_docs(self, er: EpochReader, source: int, shard: int, chunk: int) -> ChunkDocs:
        """The documents of ``chunk`` in ``er``'s epoch order, from their lengths only."""
        key = (source, er.epoch, shard, chunk)
        found = self._chunks.get(key)
        if found is None:
            table = er.reader.table(shard)
            lens = read_doclens(self._source(source, shard), table.chunk(chunk))
            opts = er.reader
            order = doc_order(len(lens), seed=opts.seed, epoch=er.epoch, shard=shard, chunk=chunk,
                              shuffle=opts.shuffle)
            starts = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens[order], out=starts[1:])
            found = self._chunks[key] = ChunkDocs(order, starts, int(table.doc_start[chunk]))
        return found

    def _source(self, source: int, shard: int) -> ByteSource:
        src = self._open.get((source, shard))
        if src is None:
            src = self._open[(source, shard)] = self.reading.sources[source].open(shard)
        return src

    def spans(self, position: int) -> list[DocSpan]:
        """The documents that fill the row (or item) at shuffled ``position``, in row order."""
        er, unit, source = self.row(position)
        layout = self.reading.layout
        if er.rows is not None:
            return self._chat_row(er, unit, source)
        if isinstance(layout, Pack):
            return self._pack_row(er, unit, source, layout.seq_len)
        p = er.stream.locate(unit)
        cd = self.chunk_docs(er, source, p.shard, p.chunk)
        doc = cd.first + int(cd.order[p.start])
        length = int(cd.starts[p.start + 1] - cd.starts[p.start])
        hi = length if layout.seq_len is None else min(length, layout.seq_len)
        return [self._span(er, source, p.shard, doc, 0, hi)]

    def _span(self, er: EpochReader, source: int, shard: int, doc: int, lo: int, hi: int) -> DocSpan:
        return DocSpan(source, shard, doc, int(er.index.shard_doc_start[shard]) + doc, lo, hi)

    def _pack_row(self, er: EpochReader, unit: int, source: int, seq_len: int) -> list[DocSpan]:
        """A row of ``seq_len`` stream tokens: every document piece of it, the ends clipped to the row."""
        out = []
        for p in er.stream.pieces(unit * seq_len, seq_len):
            cd = self.chunk_docs(er, source, p.shard, p.chunk)
            lo, hi = p.start, p.start + p.n
            first = int(np.searchsorted(cd.starts, lo, side="right")) - 1
            last = int(np.searchsorted(cd.starts, hi, side="left"))
            for j in range(first, last):
                a, b = int(cd.starts[j]), int(cd.starts[j + 1])
                if max(a, lo) < min(b, hi):
                    out.append(self._span(er, source, p.shard, cd.first + int(cd.order[j]), max(a, lo) - a,
                                          min(b, hi) - a))
        return out

    def _chat_row(self, er: EpochReader, unit: int, source: int) -> list[DocSpan]:
        """A packed row of whole conversations (``chatbatch``): each member's first ``take`` tokens."""
        p = er.stream.locate(unit)
        wr = window_rows(er, p.shard, p.chunk)
        members, takes = wr.packing.row(p.start)
        out = []
        for m, take in zip(members.tolist(), takes.tolist()):
            c = int(wr.chunk[m])
            cd = self.chunk_docs(er, source, p.shard, c)
            out.append(self._span(er, source, p.shard, cd.first + int(cd.order[int(wr.doc[m])]), 0, int(take)))
        return out

    def close(self) -> None:
        for src in self._open.values():
            src.close()
        self._open.clear()
        for er in self._readers.values():
            er.close()
        self._readers.clear()


def row_documents(reading: Reading, epoch: int, positions: object) -> list[list[DocSpan]]:
    """Per shuffled position of loader epoch ``epoch`` (a batch's, in batch order), its document spans."""
    rows = RowDocs(reading, epoch)
    try:
        return [rows.spans(int(p)) for p in np.asarray(positions, dtype=np.int64).reshape(-1).tolist()]
    finally:
        rows.close()
