"""ShardWriter: streams tokenized documents into one deterministic tar shard, atomically.

Why a hand-rolled tar writer: ``tarfile`` pads to 10 KiB records and re-reads nothing we need, but we
must know each member's data offset (for the chunk table that lets readers do one ranged read per
sample) and hash the bytes as they are written.  The headers themselves come from ``tarfile.TarInfo``
so they are standard ustar that ``tar``, ``tarfile`` and webdataset all read.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np

from shardprep.shard import trained as trained_member
from shardprep.shard.format import DTYPES, EXT_FOR_DTYPE, LAYOUTS, sample_key
from shardprep.shard.origins import DocOrigins
from shardprep.shard.sidecar import ChunkTable, ShardTotals
from shardprep.shard.trained import Trained
from shardprep.storage.atomic import AtomicFile, HashingWriter, no_space_error, start_writeback

_BLOCK = 512
_WRITEBACK_EVERY = 32 << 20   # see ShardWriter._write_back_early


def narrow_ids(flat_ids: np.ndarray, dtype: str) -> np.ndarray:
    """``flat_ids`` as the shard's id type, refusing an id that does not fit (never a silent wrap)."""
    want = np.dtype(DTYPES[dtype])
    if flat_ids.dtype == want:
        return flat_ids
    if flat_ids.size and int(flat_ids.max()) > np.iinfo(want).max:
        raise OverflowError(f"token id {int(flat_ids.max())} does not fit {dtype}; the tokenizer's vocabulary "
                            f"size was under-reported")
    return flat_ids.astype(want)


@dataclass(frozen=True)
class ShardResult(ShardTotals):
    """What :meth:`ShardWriter.close` wrote: the shard's totals, where it is and its chunk table."""

    path: Path
    chunks: ChunkTable
    trained_tokens: int = 0       # a chat shard's tokens with a label (shard.trained)
    origins: DocOrigins | None = None     # each document's origin, when every batch came with them


class ShardWriter:
    """Write documents (token arrays, BOS/EOS already applied) into ``path``.

    Data goes to a hidden temporary file; :meth:`close` fsyncs and renames it to ``path``.
    :meth:`abort` (or an exception inside ``with``) removes the temporary file.  A ``chat`` shard also
    stores each chunk's trained token ranges (``shard.trained``), passed with every batch.
    """

    def __init__(self, path: Path, *, task: int, layout: str, dtype: str, chunk_tokens: int, chat: bool = False):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if chat and layout != "pack":
            raise ValueError("chat shards use the pack layout (their trained ranges are stored per chunk)")
        self.chat = chat
        self._pending_trained: list[Trained] = []
        self.trained_tokens = 0
        self.path = Path(path)
        self.task = task
        self.layout = layout
        self.dtype_name = dtype
        self.dtype = np.dtype(DTYPES[dtype])
        self.chunk_tokens = max(1, int(chunk_tokens))
        self._atomic = AtomicFile(self.path, buffering=4 << 20)
        self._file = self._atomic.file
        self._out = HashingWriter(self._file)
        self._written_back = 0   # bytes handed to start_writeback so far
        self._rows: list[tuple[int | str, ...]] = []   # the chunk table, one row per sample
        self._pending_tokens: list[np.ndarray] = []
        self._pending_lens: list[np.ndarray] = []
        self._pending_count = 0
        self.documents = 0
        self.tokens = 0
        self._closed = False
        self._origins: list[DocOrigins] | None = []     # None once a batch came without them

    # -- public -------------------------------------------------------------------------------------
    def add(self, flat_ids: np.ndarray, lengths: np.ndarray, trained: Trained | None = None,
            origins: DocOrigins | None = None) -> None:
        """Add a batch of documents: ``flat_ids`` concatenated, ``lengths`` per document (sum matches), in
        a chat shard their ``trained`` ranges (one entry per document), and where each came from
        (``origins``, one per document: the shard's result has them when every batch had)."""
        if (trained is not None) != self.chat:
            raise ValueError("a chat shard takes trained ranges with every batch, any other shard none")
        if len(lengths) == 0:
            return
        self._add_origins(len(lengths), origins)
        ids = narrow_ids(flat_ids, self.dtype_name)
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.layout == "doc":
            self._write_docs(ids, lengths)
            return
        # pack: cut the batch at document boundaries whenever the chunk reaches chunk_tokens
        ends = np.cumsum(lengths)
        start_doc, start_tok = 0, 0
        while start_doc < len(lengths):
            room = self.chunk_tokens - self._pending_count
            # number of docs that fit (at least one, so a huge document forms its own chunk)
            base = ends[start_doc - 1] if start_doc else 0
            n = int(np.searchsorted(ends[start_doc:] - base, room, side="right"))
            if n == 0 and self._pending_count == 0:
                n = 1
            if n == 0:
                self._flush_chunk()
                continue
            stop_doc = start_doc + n
            stop_tok = int(ends[stop_doc - 1])
            self._pending_tokens.append(ids[start_tok:stop_tok])
            self._pending_lens.append(lengths[start_doc:stop_doc])
            if trained is not None:
                self._pending_trained.append(trained.docs(start_doc, stop_doc))
            self._pending_count += stop_tok - start_tok
            start_doc, start_tok = stop_doc, stop_tok
            if self._pending_count >= self.chunk_tokens:
                self._flush_chunk()

    def _add_origins(self, n: int, origins: DocOrigins | None) -> None:
        if origins is not None and len(origins) != n:
            raise ValueError(f"{len(origins)} document origins for a batch of {n} documents")
        if origins is None or self._origins is None:
            self._origins = None
        else:
            self._origins.append(origins)

    def release(self) -> None:
        """Copy what is held of the ids and lengths passed to :meth:`add` (the start of the next chunk,
        views into them until then), so the caller may reuse their memory."""
        self._pending_tokens = [np.array(t) if t.base is not None else t for t in self._pending_tokens]
        self._pending_lens = [np.array(n) if n.base is not None else n for n in self._pending_lens]
        self._pending_trained = [Trained(np.array(t.counts), np.array(t.ranges)) for t in self._pending_trained]

    def close(self) -> ShardResult:
        """Flush, terminate the tar, fsync, rename to the final name; return what was written."""
        if self.layout == "pack":
            self._flush_chunk()
        self._out.write(b"\0" * (2 * _BLOCK))
        self._atomic.commit()
        self._closed = True
        return ShardResult(
            path=self.path,
            bytes=self._out.bytes_written,
            sha256=self._out.sha256.hexdigest(),
            samples=len(self._rows),
            documents=self.documents,
            tokens=self.tokens,
            chunks=ChunkTable.from_rows(self._rows, chat=self.chat),
            trained_tokens=self.trained_tokens,
            origins=None if self._origins is None else DocOrigins.concat(self._origins),
        )

    def abort(self) -> None:
        """Drop everything written so far (no file under the final name)."""
        if self._closed:
            return
        self._closed = True
        self._atomic.abort()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.abort()
            full = no_space_error(self.path, exc)
            if full is not None:
                raise full from exc

    # -- internals ----------------------------------------------------------------------------------
    def _member(self, name: str, payload: bytes | memoryview) -> int:
        """Write one tar member; return the byte offset of its data."""
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        info.mtime = 0
        info.mode = 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        header = info.tobuf(format=tarfile.USTAR_FORMAT)
        self._out.write(header)
        offset = self._out.tell()
        self._out.write(payload)
        pad = (-len(payload)) % _BLOCK
        if pad:
            self._out.write(b"\0" * pad)
        return offset

    def _next_key(self) -> str:
        return sample_key(self.task, len(self._rows))

    def _flush_chunk(self) -> None:
        if not self._pending_count:
            return
        tokens = np.concatenate(self._pending_tokens) if len(self._pending_tokens) > 1 else self._pending_tokens[0]
        lens = np.concatenate(self._pending_lens)
        lens_dtype = np.dtype("<u2") if int(lens.max()) <= 0xFFFF else np.dtype("<u4")
        key = self._next_key()
        ext = EXT_FOR_DTYPE[self.dtype_name]
        tok_off = self._member(f"{key}.tokens.{ext}", np.ascontiguousarray(tokens).data.cast("B"))
        len_off = self._member(
            f"{key}.doclens.u{lens_dtype.itemsize * 8}", lens.astype(lens_dtype).tobytes()
        )
        row: tuple[int | str, ...] = (key, tok_off, int(tokens.size), int(lens.size), len_off, lens_dtype.itemsize)
        if self.chat:
            trained = Trained.concat(self._pending_trained)
            payload, itemsize = trained_member.encode(trained, lens)
            row += (self._member(f"{key}.trained.u{itemsize * 8}", payload), itemsize, len(trained.ranges))
            self.trained_tokens += trained.trained_tokens()
            self._pending_trained = []
        self._rows.append(row)
        self.documents += int(lens.size)
        self.tokens += int(tokens.size)
        self._pending_tokens, self._pending_lens, self._pending_count = [], [], 0
        self._write_back_early()

    def _write_back_early(self) -> None:
        """Start storage write-out every ``_WRITEBACK_EVERY`` bytes so the fsync in :meth:`close` is short.

        Without it a task's whole shard (hundreds of MB) is still dirty at the end and ``close`` waits
        ~0.45 s per 500 MB for the disk while its CPU sits idle; started as the task goes, the write-out
        overlaps the tokenizing.
        """
        written = self._out.bytes_written
        if written - self._written_back >= _WRITEBACK_EVERY:
            self._file.flush()
            start_writeback(self._file.fileno(), self._written_back, written - self._written_back)
            self._written_back = written

    def _write_docs(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        ext = EXT_FOR_DTYPE[self.dtype_name]
        pos = 0
        for n in lengths.tolist():
            key = self._next_key()
            off = self._member(f"{key}.tokens.{ext}", np.ascontiguousarray(ids[pos:pos + n]).data.cast("B"))
            self._rows.append((key, off, n, 1, -1, 0))
            pos += n
        self.documents += len(lengths)
        self.tokens += int(lengths.sum())
        self._write_back_early()
