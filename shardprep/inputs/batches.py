"""One work item -> batches of documents for the encoder: the task's reading, fast where the input is clean.

Text inputs are read as blocks of whole lines (``inputs.blocks``); each block goes through the fast path
(``inputs.fastpath``: no Python per document) when it is clean and through the per-line policy
(``inputs.readers``) when it is not, so counters, examples and line numbers never depend on the path.
Parquet and Arrow inputs are read a record batch at a time (``inputs.tabular``).  Once an item is read,
``inputs.health`` warns when it looks binary or mis-encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from shardprep.inputs.blocks import (BLOCK_BYTES, LongLine, Piece, TextBlock, item_blocks, prefetched,
                                     reads_wait)
from shardprep.inputs.discover import InputFile
from shardprep.inputs.fastpath import DocBatch, jsonl_block, txt_block
from shardprep.inputs.health import ItemWatch
from shardprep.inputs.planned import rows_then_check
from shardprep.inputs.readers import (ReadOptions, SkipLog, WorkItem, block_lines, jsonl_docs, paragraph_docs,
                                      txt_line_docs)

PARAGRAPH_BATCH_CHARS = 1 << 20


@dataclass
class ReadCount:
    """What an item's reading went through: lines of a text input (rows are counted by the caller)."""

    lines: int = 0
    documents: int = 0


def item_batches(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, *,
                 block_bytes: int = BLOCK_BYTES, fast: bool = True, prefetch: bool | None = None,
                 watch: bool = True, count: ReadCount | None = None) -> Iterator[DocBatch]:
    """The documents of one work item, in file order, as batches (none empty); skips go to ``skips``.

    Exactly the planned bytes or rows are read, and an input that changed while it was read raises
    InputDataError once its item is exhausted.  ``fast`` False reads every block line by line (the
    policy's definition; tests compare the two); ``prefetch`` reads one block ahead in a thread (None:
    where reads wait, ``inputs.blocks.reads_wait``);
    ``watch`` False leaves the suspicious-input warning to the caller (who reads an item in pieces);
    ``count`` receives the lines and documents read.
    """
    guard = ItemWatch(skips) if watch else None
    count = count if count is not None else ReadCount()
    for batch in _batches(inp, item, opts, skips, block_bytes, fast, prefetch, count):
        if batch.docs:
            count.documents += batch.docs
            yield batch
    if guard is not None:
        guard.finish(inp, item, count.documents, skips)


def _batches(inp: InputFile, item: WorkItem, opts: ReadOptions, skips: SkipLog, block_bytes: int, fast: bool,
             prefetch: bool | None, count: ReadCount) -> Iterator[DocBatch]:
    if inp.tabular:
        from shardprep.inputs.tabular import arrow_batches, parquet_batches

        end = item.end if item.end is not None or inp.rows is None else inp.rows
        read = parquet_batches if inp.format == "parquet" else arrow_batches
        yield from rows_then_check(inp, read(inp, item.start, end, opts.text_field, opts.max_doc_bytes, skips))
        return
    pieces: Iterator[Piece] = item_blocks(inp, item.start, item.end, opts.max_doc_bytes, block_bytes=block_bytes)
    if prefetch or (prefetch is None and reads_wait(inp.path)):
        pieces = prefetched(pieces)
    if inp.format == "txt" and opts.txt_mode == "paragraph":
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
            done = DocBatch(len(docs), strs=docs), _lines_in(piece)
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

    batch: list[str] = []
    size = 0
    for doc in paragraph_docs(lines(), path, limit, skips):
        batch.append(doc)
        size += len(doc)
        if size >= PARAGRAPH_BATCH_CHARS:
            yield DocBatch(len(batch), strs=batch)
            batch, size = [], 0
    if batch:
        yield DocBatch(len(batch), strs=batch)
