"""Inputs -> tasks: which pieces of which input files each task reads (the planner's cutting rule).

One file per task; or, with ``--target-task-bytes``, small files packed together and large files split
on document boundaries (``iter_tasks``); or, under the default rule (``job.sizing``), a number of tasks
of equal bytes chosen so the executor's slots run full waves (``iter_balanced``).  Split points are found
by reading only around each boundary, never a whole file, so planning 1 TB costs what planning 1 MB does.
"""

from __future__ import annotations

import math
from functools import partial
from typing import IO, Iterator

from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import OpenInput, parquet_file
from shardprep.inputs.readers import WorkItem
from shardprep.inputs.remote import in_parallel, is_input_url
from shardprep.job.options import TokenizeOptions


# -- splitting ------------------------------------------------------------------------------------------
def _line_length(f: IO[bytes]) -> tuple[int, bool]:
    """Consume one line (in bounded pieces); return its length and whether it was blank."""
    n, blank = 0, True
    while True:
        piece = f.readline(1 << 20)
        n += len(piece)
        blank = blank and not piece.strip()
        if not piece or piece.endswith(b"\n"):
            return n, blank


def aligned_boundary(inp: InputFile, offset: int, paragraph: bool) -> int:
    """First document boundary at or after ``offset``: the start of the next line (in paragraph mode,
    the line after the next blank line).  Reads only around the boundary, never the whole file (a remote
    object: ranged requests of 64 KiB from ``offset - 1``, held to its planned version)."""
    if offset <= 0:
        return 0
    with OpenInput(inp) as opened, opened.buffered() as f:
        f.seek(offset - 1)
        pos = offset - 1 + _line_length(f)[0]   # finish the line that contains byte offset-1
        while paragraph:
            n, blank = _line_length(f)
            pos += n
            if n == 0 or blank:
                break
        return pos


def _split_text(idx: int, inp: InputFile, parts: int, paragraph: bool) -> list[WorkItem]:
    """``parts`` pieces of about equal bytes, cut on document boundaries.  A long document moves a cut
    forward; the next cut is then placed at least half a step further, so no piece but the last (which
    may be short) is under half a step."""
    step = inp.size / parts
    bounds = [0]
    for k in range(1, parts):
        cut = aligned_boundary(inp, max(round(k * step), bounds[-1] + round(step / 2)), paragraph)
        if cut >= inp.size:
            break
        bounds.append(cut)
    bounds.append(inp.size)
    return [WorkItem(idx, s, e, "bytes", 1 if s == 0 else None) for s, e in zip(bounds, bounds[1:]) if e > s]


def _split_parquet(idx: int, inp: InputFile, parts: int) -> list[WorkItem]:
    """Row ranges on row-group boundaries, balanced by compressed bytes."""
    with OpenInput(inp) as opened:
        md = parquet_file(opened).metadata
    groups = [(md.row_group(g).num_rows, md.row_group(g).total_byte_size) for g in range(md.num_row_groups)]
    total = sum(b for _, b in groups) or 1
    items: list[WorkItem] = []
    start, row, acc = 0, 0, 0
    for rows, nbytes in groups:
        row += rows
        acc += nbytes
        if acc >= total / parts * (len(items) + 1) and row < md.num_rows:
            items.append(WorkItem(idx, start, row, "rows", start + 1))
            start = row
    items.append(WorkItem(idx, start, md.num_rows, "rows", start + 1))
    return items


def _split_arrow(idx: int, inp: InputFile, parts: int, text_field: str) -> list[WorkItem]:
    """Row ranges balanced by the bytes of the text column (cuts may fall inside a record batch)."""
    from shardprep.inputs.arrow import split_rows

    return [WorkItem(idx, s, e, "rows", s + 1) for s, e in split_rows(inp.path, parts, text_field)]


def _split(i: int, inp: InputFile, parts: int, opts: TokenizeOptions) -> list[WorkItem]:
    """``inp`` cut into about ``parts`` pieces of equal bytes (rows for parquet/arrow)."""
    if inp.format == "arrow":
        return _split_arrow(i, inp, parts, opts.text_field)
    if inp.format == "parquet":
        return _split_parquet(i, inp, parts)
    return _split_text(i, inp, parts, opts.txt_mode == "paragraph")


def _whole(i: int, inp: InputFile) -> WorkItem:
    return WorkItem(i, 0, None, "rows" if inp.tabular else "bytes", 1)


class _Packer:
    """Tasks of at least half the target (``job.sizing``: no tiny shards), in input order.

    Small files go into a pack, closed before a file would take it past the target once it holds half
    the target.  A large file's pieces are tasks of their own; a pack still under half the target when
    one arrives joins its first piece.  The last task made is held back, so the final pack, when under
    half the target, joins it instead of becoming a tiny task.  Documents keep their input order.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.current: list[WorkItem] = []
        self.current_bytes = 0
        self.held: list[WorkItem] | None = None

    def _emit(self, task: list[WorkItem]) -> Iterator[list[WorkItem]]:
        """Hold ``task``; yield the one held before."""
        if self.held is not None:
            yield self.held
        self.held = task

    def _close(self) -> list[WorkItem]:
        pack, self.current, self.current_bytes = self.current, [], 0
        return pack

    def add(self, item: WorkItem, size: int) -> Iterator[list[WorkItem]]:
        """Add one small file to the current pack (closing the pack first when it is full)."""
        if self.current and self.current_bytes + size > self.target and 2 * self.current_bytes >= self.target:
            yield from self._emit(self._close())
        self.current.append(item)
        self.current_bytes += size

    def large(self, pieces: list[WorkItem]) -> Iterator[list[WorkItem]]:
        """One task per piece of a large file; an open pack goes before it (on its own when big enough)."""
        first = [pieces[0]]
        if self.current and 2 * self.current_bytes >= self.target:
            yield from self._emit(self._close())
        elif self.current:
            first = self._close() + first
        yield from self._emit(first)
        for piece in pieces[1:]:
            yield from self._emit([piece])

    def finish(self) -> Iterator[list[WorkItem]]:
        if self.current and self.held is not None and 2 * self.current_bytes < self.target:
            self.held = self.held + self._close()
        elif self.current:
            yield from self._emit(self._close())
        if self.held is not None:
            yield self.held


def iter_tasks(inputs: list[InputFile], target: int | None, opts: TokenizeOptions) -> Iterator[list[WorkItem]]:
    """Assign work items to tasks at a target of input bytes per task, one task at a time, in input order.

    ``target`` None: one input file per task.  Otherwise files larger than the target are split
    into equal pieces (text on line/paragraph boundaries, parquet on row groups, arrow on rows; compressed
    files cannot be split and stay whole), and smaller files are packed together into packs of half the
    target to the target (``_Packer``).
    """
    if target is None:
        yield from ([_whole(i, inp)] for i, inp in enumerate(inputs))
        return
    packer = _Packer(target)
    for i, inp in enumerate(inputs):
        if inp.size > target and (inp.splittable or inp.tabular):
            yield from packer.large(_split(i, inp, math.ceil(inp.size / target), opts))
        elif inp.size > target:
            yield from packer.large([_whole(i, inp)])       # compressed: one task, whatever its size
        else:
            yield from packer.add(_whole(i, inp), inp.size)
    yield from packer.finish()


def split_into_tasks(inputs: list[InputFile], target: int | None, opts: TokenizeOptions) -> list[list[WorkItem]]:
    """``iter_tasks`` as a list (for small plans and tests)."""
    return list(iter_tasks(inputs, target, opts))


# -- balanced: n tasks of equal bytes (the default rule) ----------------------------------------------------
def _pieces_at(i: int, inp: InputFile, offsets: list[int], opts: TokenizeOptions) -> list[WorkItem]:
    """``inp`` cut at the first document boundary at or after each of ``offsets`` (bytes into the file);
    a tabular file into as many equal pieces; a compressed file stays whole."""
    if not offsets:
        return [_whole(i, inp)]
    if inp.tabular:
        return _split(i, inp, len(offsets) + 1, opts)
    if not inp.splittable:
        return [_whole(i, inp)]
    paragraph = opts.txt_mode == "paragraph"
    probe = partial(aligned_boundary, inp, paragraph=paragraph)
    bounds = [0]
    # a remote object's cuts are probed several at once (one ranged read each): one round trip per
    # CONCURRENCY cuts of a large object, not one per cut
    for cut in (in_parallel(probe, offsets) if is_input_url(inp.path) else map(probe, offsets)):
        if bounds[-1] < cut < inp.size:
            bounds.append(cut)
    bounds.append(inp.size)
    return [WorkItem(i, s, e, "bytes", 1 if s == 0 else None) for s, e in zip(bounds, bounds[1:]) if e > s]


def _merge_small(tasks: list[list[tuple[WorkItem, int]]], step: float) -> list[list[tuple[WorkItem, int]]]:
    """Join every task under half a step to its smaller neighbour (input order is kept)."""
    def size(t: list[tuple[WorkItem, int]]) -> int:
        return sum(n for _, n in t)

    while len(tasks) > 1:
        small = [k for k, t in enumerate(tasks) if size(t) < step / 2]
        if not small:
            break
        k = min(small, key=lambda j: size(tasks[j]))
        if k == 0 or (k + 1 < len(tasks) and size(tasks[k + 1]) < size(tasks[k - 1])):
            tasks[k:k + 2] = [tasks[k] + tasks[k + 1]]
        else:
            tasks[k - 1:k + 1] = [tasks[k - 1] + tasks[k]]
    return tasks


def iter_balanced(inputs: list[InputFile], n: int, opts: TokenizeOptions) -> Iterator[list[WorkItem]]:
    """About ``n`` tasks of equal input bytes, in input order (the default rule: full waves of tasks).

    Task k ends at the first document boundary after k/n of all bytes.  A piece that cannot be cut (a
    compressed file, a parquet row group) goes to the task that holds its middle; a task left under half
    a step then joins its smaller neighbour, so no shard falls below the sizing floor.
    """
    total = sum(inp.size for inp in inputs)
    step = total / max(1, n)
    tasks: list[list[tuple[WorkItem, int]]] = []
    current: list[tuple[WorkItem, int]] = []
    current_k, at = 0, 0
    for i, inp in enumerate(inputs):
        first = math.floor(at / step) + 1 if step else 1
        offsets = [round(k * step) - at for k in range(first, n) if at < k * step < at + inp.size]
        for piece in _pieces_at(i, inp, offsets, opts):
            size = _piece_bytes(piece, inp)
            k = min(n - 1, int((at + size / 2) / step)) if step else 0
            if k != current_k and current:
                tasks.append(current)
                current = []
            current_k = k
            current.append((piece, size))
            at += size
    if current:
        tasks.append(current)
    for task in _merge_small(tasks, step):
        yield [w for w, _ in task]


def _piece_bytes(piece: WorkItem, inp: InputFile) -> int:
    if piece.unit != "bytes":       # rows: their share of the file's bytes
        rows = inp.rows or 1
        end = rows if piece.end is None else piece.end
        return round(inp.size * (end - piece.start) / rows)
    return (inp.size if piece.end is None else piece.end) - piece.start
