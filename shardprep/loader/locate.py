"""From a document to the loader positions that read it (the inverse half of tracing).

``positions_of(reading, doc, epoch)``: the shuffled positions of loader pass ``epoch`` whose unit holds any
token of document ``doc`` (``DocRef``: source, shard, document in the shard's file order).  Every step of
the forward order (loader/order.py) is inverted on its own, so only the document's chunk is touched:

* the stream: the shard's place in the epoch's shard permutation, the chunk's place in the shard's chunk
  permutation (sizes from the sidecar), the document's place in the chunk's document permutation and the
  lengths of the documents before it (one small ranged read of the chunk's document lengths);
* pack: every row of ``seq_len`` stream tokens that overlaps the document's tokens (only whole rows,
  ``< num_units``: the tail is never read); pad/doc: the document is one unit;
* the shuffle block: the position whose block permutation shows that unit.

A mixture goes on from its source's own epochs: the source epochs loader epoch ``epoch`` draws from (the
schedule's draws of the source over the pass, mapped to seqs by the segment), the seqs that hold the
document, each seq back to its draw (``Segment`` inverted), the draw to its global position (the schedule's
period: ``period * (draw // q) + occurrence[draw % q]``) and that to a position of the pass.

Chat data in pack mode (rows of whole conversations, ``chatbatch``) has no token stream to cut: its
stream is shards, then packing windows (``chatrows``), then each window's rows in packing order.  The
conversation's window is packed for the epoch by the loader's own ``chatbatch.window_rows`` (the same
conversation lengths in the same seeded order), the row holding the conversation read off the packing
(none when ``overflow="drop"`` left it out, or it is empty), and the row's stream unit is the window's
place in the epoch's shard and window permutations plus the row.  The block shuffle and a mixture then go
on as for any other unit.

``reading`` is a ``ShardDataset`` or a ``Reading`` (anything with their attributes: ``sources``,
``mixture``, ``num_units``, ``layout``, ``_read_opts``, ``_tables``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardprep.errors import ConfigError
from shardprep.loader import distribute as D
from shardprep.loader.chatbatch import window_rows
from shardprep.loader.epoch import EpochReader
from shardprep.loader.order import KIND_CHUNKS, KIND_SHARDS, BlockShuffle, Layout, doc_order, permutation
from shardprep.shard.reader import read_doclens


@dataclass(frozen=True, order=True)
class DocRef:
    """One document: ``source`` (0 for a single dataset, else the mixture's source number), ``shard`` (index
    in that source's index.json), ``doc`` (index in the shard, file order)."""

    source: int
    shard: int
    doc: int

    def to_list(self) -> list[int]:
        return [self.source, self.shard, self.doc]


def check_ref(reading: Any, doc: DocRef) -> None:
    """ConfigError (one line) for a document the data does not have."""
    sources = reading.sources
    if not 0 <= doc.source < len(sources):
        raise ConfigError(f"document {doc.to_list()}: source {doc.source} does not exist (the data has "
                          f"{len(sources)} source{'s' if len(sources) != 1 else ''})")
    index = sources[doc.source]
    if not 0 <= doc.shard < len(index.shards):
        raise ConfigError(f"document {doc.to_list()}: shard {doc.shard} does not exist ({index.root} has "
                          f"{len(index.shards)} shards)")
    docs = int(index.shard_docs[doc.shard])
    if not 0 <= doc.doc < docs:
        raise ConfigError(f"document {doc.to_list()}: shard {doc.shard} ({index.shards[doc.shard].name}) has "
                          f"{docs} documents")


def _slot(perm: np.ndarray, item: int) -> int:
    """Where ``item`` stands in permutation ``perm``."""
    return int(np.flatnonzero(perm == item)[0])


def stream_span(reading: Any, doc: DocRef, epoch: int) -> tuple[int, int]:
    """The document's place in its source's epoch stream: ``[lo, hi)`` in tokens (pack) or units (pad/doc)."""
    index, opts = reading.sources[doc.source], reading._read_opts[doc.source]
    tables = reading._tables[doc.source]
    table = tables.get(doc.shard)
    if table is None:
        table = tables[doc.shard] = index.chunk_table(doc.shard)
    packed = opts.packed
    seed, shuffle = opts.seed, opts.shuffle
    shard_sizes = np.asarray(index.shard_tokens if packed else index.shard_docs, dtype=np.int64)
    shards = permutation(len(shard_sizes), seed=seed, epoch=epoch, kind=KIND_SHARDS, shuffle=shuffle)
    slot = _slot(shards, doc.shard)
    start = int(shard_sizes[shards[:slot]].sum())
    chunk_sizes = np.asarray(table.tokens_array if packed else table.docs_array, dtype=np.int64)
    chunks = permutation(len(chunk_sizes), seed=seed, epoch=epoch, kind=KIND_CHUNKS, index=(doc.shard,),
                         shuffle=shuffle)
    firsts = np.asarray(table.doc_start, dtype=np.int64)
    chunk = int(np.searchsorted(firsts, doc.doc, side="right") - 1)
    start += int(chunk_sizes[chunks[:_slot(chunks, chunk)]].sum())
    local = doc.doc - int(firsts[chunk])
    order = doc_order(int(table.docs_array[chunk]), seed=seed, epoch=epoch, shard=doc.shard, chunk=chunk,
                      shuffle=shuffle)
    j = _slot(order, local)
    if not packed:
        return start + j, start + j + 1
    src = index.open(doc.shard)
    try:
        lens = read_doclens(src, table.chunk(chunk))
    finally:
        src.close()
    lo = start + int(lens[order[:j]].sum())
    return lo, lo + int(lens[local])


def _start(layout: Layout, item: int) -> int:
    """The first unit of ``item`` in a stream layout (its place in the permutation, the sizes before it)."""
    return int(layout.starts[_slot(layout.order, item)])


def chat_row_unit(reading: Any, doc: DocRef, epoch: int, units: int) -> int | None:
    """The stream unit (packed row) of the source's ``epoch`` that holds conversation ``doc``; None when its
    window's packing left it out (``overflow="drop"``, or empty).  The window is packed by the loader's own
    ``window_rows``, so the rows are the ones it reads (module docstring)."""
    src = doc.source
    er = EpochReader(reading.sources[src], units, epoch, reading._read_opts[src], reading._tables[src])
    try:
        rows = er.rows
        assert rows is not None, "only chat data in pack mode has packed rows"
        firsts = np.asarray(er.reader.table(doc.shard).doc_start, dtype=np.int64)
        chunk = int(np.searchsorted(firsts, doc.doc, side="right") - 1)
        window = int(np.searchsorted(rows.bounds[doc.shard], chunk, side="right") - 1)
        wr = window_rows(er, doc.shard, window)
        j = _slot(er.reader.chunk(doc.shard, chunk).order, doc.doc - int(firsts[chunk]))   # its stream place
        member = np.flatnonzero((wr.chunk == chunk) & (wr.doc == j))
        at = np.flatnonzero(wr.packing.members == int(member[0]))
        if not at.size:
            return None
        row = int(np.searchsorted(wr.packing.offsets, int(at[0]), side="right") - 1)
        return _start(er.stream.shards, doc.shard) + _start(er.stream.chunk_layout(doc.shard), window) + row
    finally:
        er.close()


def units_of(reading: Any, doc: DocRef, epoch: int, units: int) -> D.Ranges:
    """The stream units of the source's ``epoch`` that hold the document (only units ``< units``)."""
    opts = reading._read_opts[doc.source]
    if opts.rows is not None:
        row = chat_row_unit(reading, doc, epoch, units)
        return () if row is None or row >= units else ((row, row + 1),)
    lo, hi = stream_span(reading, doc, epoch)
    if opts.packed:
        if hi <= lo:                    # an empty document fills no row
            return ()
        seq = reading.layout.seq_len
        lo, hi = lo // seq, (hi - 1) // seq + 1
    return D.normalize([(lo, min(hi, units))]) if lo < units else ()


def shuffled(units: D.Ranges, n: int, opts: Any, epoch: int) -> D.Ranges:
    """The shuffled positions that show ``units`` (the block shuffle inverted)."""
    block = BlockShuffle(n, opts.block, seed=opts.seed, epoch=epoch, shuffle=opts.shuffle)
    if not block.active:
        return units
    found: list[int] = []
    for u in D.positions(units).tolist():
        base = u - u % block.block
        found.append(base + _slot(block._perm(base // block.block), u - base))
    return D.normalize((p, p + 1) for p in sorted(found))


def source_positions(reading: Any, doc: DocRef, epoch: int, units: int) -> D.Ranges:
    """Positions of source ``doc.source``'s own ``epoch`` (``units`` of them) that hold the document."""
    return shuffled(units_of(reading, doc, epoch, units), units, reading._read_opts[doc.source], epoch)


def positions_of(reading: Any, doc: DocRef, epoch: int) -> D.Ranges:
    """The positions of loader pass ``epoch`` whose unit holds any token of ``doc`` (module docstring)."""
    check_ref(reading, doc)
    if epoch < 0:
        raise ConfigError(f"epoch={epoch} is invalid: must be >= 0")
    if reading.mixture is None:
        return source_positions(reading, doc, epoch, int(reading.num_units))
    return mixture_positions(reading, doc, epoch)


def draw_of(segment: Any, source: int, seq: int) -> int | None:
    """The draw that reads ``seq`` of ``source`` under ``segment`` (inverse of ``Segment.seq``); None: none."""
    pending = segment.pending[source]
    before = 0
    for s, e in pending:
        if s <= seq < e:
            return before + seq - s
        before += e - s
    fresh = segment.fresh[source]
    return before + seq - fresh if seq >= fresh else None


def global_of(schedule: Any, source: int, draw: int) -> int:
    """The global position of ``source``'s ``draw`` (inverse of ``Schedule.locate_one``)."""
    q = schedule.quotas[source]
    return schedule.period * (draw // q) + int(schedule._occurrences[source][draw % q])


def mixture_positions(reading: Any, doc: DocRef, epoch: int) -> D.Ranges:
    """``positions_of`` for a mixture (module docstring)."""
    mix = reading.mixture
    src, length = doc.source, int(mix.length)
    units = int(mix.units[src])
    base = epoch * length - mix.segment.origin           # global position of the pass's position 0, from the origin
    first = max(0, -base)
    if first >= length:
        return ()
    d0 = int(mix.schedule.draws(base + first)[src])
    d1 = int(mix.schedule.draws(base + length)[src])
    seqs = mix.segment.seq_ranges(src, d0, d1)
    found: list[int] = []
    for se in sorted({s // units for lo, hi in seqs for s in range(lo // units * units, hi, units)}):
        within = source_positions(reading, doc, se, units)
        for p in D.positions(within).tolist():
            seq = se * units + p
            if not any(lo <= seq < hi for lo, hi in seqs):
                continue
            draw = draw_of(mix.segment, src, seq)
            if draw is not None:
                pos = global_of(mix.schedule, src, draw) - base
                if first <= pos < length:
                    found.append(pos)
    return D.normalize((p, p + 1) for p in sorted(set(found)))
