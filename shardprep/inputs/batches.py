"""One work item -> batches of documents for the encoder: the task's reading, fast where the input is clean.

Text inputs are read as blocks of whole lines (``inputs.blocks``); each block goes through the fast path
(``inputs.fastpath``: no Python per document) when it is clean and through the per-line policy
(``inputs.readers``) when it is not, so counters, examples and line numbers never depend on the path.
Parquet and Arrow inputs are read a record batch at a time (``inputs.tabular``).  Once an item is read,
``inputs.health`` warns when it looks binary or mis-encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from shardprep.inputs.blocks import BLOCK_BYTES, LongLine, Piece, TextBlock, item_blocks, prefetched, reads_wait
from shardprep.inputs.discover import InputFile
from shardprep.inputs.fastpath import DocBatch, jsonl_block, txt_block
from shardprep.inputs.health import ItemWatch
from shardprep.inputs.planned import rows_then_check
from shardprep.inputs.readers import (
    Placed,
    ReadOptions,
    SkipLog,
    WorkItem,
    block_lines,
    jsonl_docs,
    paragraph_docs,
    txt_line_docs,
)

PARAGRAPH_BATCH_CHARS = 1 << 20


@dataclass
class ReadCount:
    """What an item's reading went through: lines of a text input (rows are counted by the caller)."""

    lines: int = 0
    documents: int = 0


def items_batches(items: Sequence[tuple[InputFile, WorkItem]], opts: ReadOptions, skips: SkipLog, *,
                  block_bytes: int = BLOCK_BYTES, prefetch: bool | None = None) -> Iterator[DocBatch]:
    """:func:`item_batches` of each item in turn.  Where reads wait (``prefetch``, as there), the blocks of
    the text items come from one read-ahead thread: the next item's first block is on its way while this
    item's last one is encoded, so a task of many objects does not wait for each one's first request
    (still one block ahead: at most one block queued, one being read)."""
    ahead = _ReadAhead(items, opts.max_doc_bytes, block_bytes, prefetch)
    try:
        for k, (inp, item) in enumerate(items):
            pieces = ahead.pieces(k)
            if pieces is None:
                yield from item_batches(inp, item, opts, skips, block_bytes=block_bytes, prefetch=prefetch)
            else:
                yield from _watched(inp, item, skips, _batches(inp, item, opts, skips, True, ReadCount(), pieces))
    finally:
        ahead.close()


class _ReadAhead:
    """One read-ahead thread over the blocks of several items, in item order: ``pieces(k)`` ends where the
    first block of the next item read ahead arrives (kept for it), so the thread never waits for the
    consumer to finish an item before it asks for the next one.  An item's error is raised by its own
    ``pieces``.  None of it runs unless an item's reads wait."""

    def __init__(self, items: Sequence[tuple[InputFile, WorkItem]], limit: int, block_bytes: int,
                 prefetch: bool | None):
        self.ahead = [k for k, (inp, _) in enumerate(items) if not inp.tabular and _reads_ahead(inp, prefetch)]
        self._ahead_set = frozenset(self.ahead)  # asked once per item, and a task may hold thousands
        self._stream: Iterator[tuple[int, Piece | Exception]] | None = None
        self._next: tuple[int, Piece | Exception] | None = None
        if self.ahead:
            self._stream = prefetched(self._chain(items, limit, block_bytes))

    def _chain(self, items: Sequence[tuple[InputFile, WorkItem]], limit: int,
               block_bytes: int) -> Iterator[tuple[int, Piece | Exception]]:
        for k in self.ahead:
            inp, item = items[k]
            try:
                for piece in item_blocks(inp, item.start, item.end, limit, block_bytes=block_bytes):
                    yield k, piece
            except Exception as e:  # noqa: BLE001 - raised by item k's reader, in its place
                yield k, e
                return

    def pieces(self, k: int) -> Iterator[Piece] | None:
        """Item ``k``'s blocks from the thread; None when it is not read ahead."""
        if self._stream is None or k not in self._ahead_set:
            return None
        return self._take(k, self._stream)

    def _take(self, k: int, stream: Iterator[tuple[int, Piece | Exception]]) -> Iterator[Piece]:
        while True:
            if self._next is None:
                try:
                    self._next = next(stream)
                except StopIteration:
                    return
            j, piece = self._next
            if j != k:
                return
            self._next = None
            if isinstance(piece, Exception):
                raise piece
            yield piece

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


def item_batches(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, *,
                 block_bytes: int = BLOCK_BYTES, fast: bool = True, prefetch: bool | None = None) -> Iterator[DocBatch]:
    """The documents of one work item, in file order, as batches (none empty); skips go to ``skips``.

    Exactly the planned bytes or rows are read, and an input that changed while it was read raises
    InputDataError once its item is exhausted.  ``fast`` False reads every block line by line (the
    policy's definition; tests compare the two); ``prefetch`` reads one block ahead in a thread (None:
    where reads wait, ``inputs.blocks.reads_wait``).  Once the item is read, the suspicious-input warning.
    """
    pieces = _blocks(inp, item, opts, block_bytes, prefetch)
    yield from _watched(inp, item, skips, _batches(inp, item, opts, skips, fast, ReadCount(), pieces))


def piece_batches(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, count: ReadCount, *,
                  block_bytes: int = BLOCK_BYTES) -> Iterator[DocBatch]:
    """:func:`item_batches` of a part of an item (``item`` its range): the lines and documents read go to
    ``count``, and the suspicious-input warning is left to the caller, who judges the whole item from its
    parts' counts (``job.parallel``)."""
    yield from _batches(inp, item, opts, skips, True, count, _blocks(inp, item, opts, block_bytes, None))


def _watched(inp: InputFile, item: WorkItem, skips: SkipLog, batches: Iterator[DocBatch]) -> Iterator[DocBatch]:
    """``batches``, then the item's suspicious-input warning (``inputs.health``) from the documents kept."""
    guard = ItemWatch(skips)
    documents = 0
    for batch in batches:
        documents += batch.docs
        yield batch
    guard.finish(inp, item, documents, skips)


def _reads_ahead(inp: InputFile, prefetch: bool | None) -> bool:
    """Whether ``inp``'s blocks are read one ahead in a thread: as asked, or (None) where its reads wait."""
    return bool(prefetch) or (prefetch is None and reads_wait(inp.path))


def _blocks(inp: InputFile, item: WorkItem, opts: ReadOptions, block_bytes: int,
            prefetch: bool | None) -> Iterator[Piece] | None:
    """A text item's blocks (read ahead where asked or where reads wait); None for a table (read by rows)."""
    if inp.tabular:
        return None
    pieces = item_blocks(inp, item.start, item.end, opts.max_doc_bytes, block_bytes=block_bytes)
    return prefetched(pieces) if _reads_ahead(inp, prefetch) else pieces


def _batches(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, fast: bool, count: ReadCount,
             pieces: Iterator[Piece] | None) -> Iterator[DocBatch]:
    """The item's non-empty batches, from ``pieces`` (its blocks) for text; counted into ``count``."""
    for batch in _read(inp, item, opts, skips, fast, count, pieces):
        if batch.docs:
            count.documents += batch.docs
            batch.input = item.input
            yield batch


def _read(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, fast: bool, count: ReadCount,
          pieces: Iterator[Piece] | None) -> Iterator[DocBatch]:
    if pieces is None:
        from shardprep.inputs.tabular import arrow_batches, parquet_batches

        end = item.end if item.end is not None or inp.rows is None else inp.rows
        read = parquet_batches if inp.format == "parquet" else arrow_batches
        yield from rows_then_check(inp, read(inp, item.start, end, opts.text_field, opts.max_doc_bytes, skips))
    elif inp.format == "txt" and opts.txt_mode == "paragraph":
        yield from _paragraph_batches(pieces, inp.path, item.first_line, opts.max_doc_bytes, skips, count)
    else:
        yield from _line_batches(pieces, inp, item.first_line, opts, skips, fast, count)


def _long_line(piece: LongLine, path: str, lineno: int | None, limit: int, skips: SkipLog,
               count: ReadCount) -> int | None:
    count.lines += 1
    skips.nul_bytes += piece.nul_bytes
    skips.skip("too_long", path, lineno, f"longer than {limit} bytes", byte=piece.start)
    return None if lineno is None else lineno + 1


def _count_nuls(block: TextBlock, skips: SkipLog) -> None:
    if b"\0" in block.data:
        skips.nul_bytes += block.data.count(b"\0")


def _lines_in(block: TextBlock) -> int:
    return block.data.count(b"\n") + (0 if block.terminated else 1)


def _line_batches(pieces: Iterator[Piece], inp: InputFile, lineno: int | None, opts: ReadOptions,
                  skips: SkipLog, fast: bool, count: ReadCount) -> Iterator[DocBatch]:
    """One document per line (txt line mode, jsonl): a batch per block."""
    jsonl, path, limit = inp.format == "jsonl", inp.path, opts.max_doc_bytes
    for piece in pieces:
        if isinstance(piece, LongLine):
            lineno = _long_line(piece, path, lineno, limit, skips, count)
            continue
        _count_nuls(piece, skips)
        done = None
        if fast and piece.terminated:
            done = (jsonl_block(piece.data, piece.start, lineno, limit, opts.text_field, path, skips) if jsonl
                    else txt_block(piece.data, piece.start, lineno, limit, path, skips))
        if done is None:
            lines = block_lines(piece.data, piece.start, lineno, limit, piece.terminated, path, skips)
            docs = list(jsonl_docs(lines, path, opts.text_field, skips) if jsonl else txt_line_docs(lines, path, skips))
            done = DocBatch.placed(docs), _lines_in(piece)
        batch, n_lines = done
        count.lines += n_lines
        if lineno is not None:
            lineno += n_lines
        yield batch


def _paragraph_batches(pieces: Iterator[Piece], path: str, lineno: int | None, limit: int,
                       skips: SkipLog, count: ReadCount) -> Iterator[DocBatch]:
    """Blank-line separated documents (txt paragraph mode): paragraphs span blocks, so line by line."""

    def lines() -> Iterator[tuple[int | None, int, bytes]]:
        nonlocal lineno
        for piece in pieces:
            if isinstance(piece, LongLine):
                lineno = _long_line(piece, path, lineno, limit, skips, count)
                continue
            _count_nuls(piece, skips)
            yield from block_lines(piece.data, piece.start, lineno, limit, piece.terminated, path, skips)
            n = _lines_in(piece)
            count.lines += n
            if lineno is not None:
                lineno += n

    batch: list[Placed] = []
    size = 0
    for doc in paragraph_docs(lines(), path, limit, skips):
        batch.append(doc)
        size += len(doc[2])
        if size >= PARAGRAPH_BATCH_CHARS:
            yield DocBatch.placed(batch)
            batch, size = [], 0
    if batch:
        yield DocBatch.placed(batch)
