"""Stages that let a stock ``webdataset`` pipeline read shardprep shards (docs/loader.md, "webdataset").

    import webdataset as wds
    import shardprep.wds as spw

    urls = spw.shard_urls("/fsx/shards")                     # from index.json, in index order
    ds = wds.WebDataset(urls, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker,
                        shardshuffle=False).compose(spw.decode(), spw.pack(2048, batch_size=8))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=4)

``decode()`` turns the tar members of a sample (raw little-endian ids ``tokens.u16|u32`` and, in the pack
layout, ``doclens.u16|u32``; docs/format.md) into numpy arrays; ``pack(seq_len)`` concatenates the samples it
receives and cuts rows exactly as ``ShardDataset(mode="pack")`` does, with the loader's own code
(``loader.batches.pack_arrays`` / ``to_tensors``), so one rank with one worker and ``shardshuffle=False``
yields the same tensors as ``ShardDataset(..., shuffle=False)``.  What webdataset itself cannot give
(equal steps per rank, splits below a shard, exact resume) is ``ShardDataset``'s job; docs/loader.md
compares the two.

``decode()`` refuses token ids at or above the vocabulary size, with the loader's own check
(``loader.reader.check_token_ids``): a flipped byte in a shard must not reach training through this path
either.  The vocabulary comes from ``vocab_size=``, else from ``index.json`` (``decode(index=ROOT)``, or
the one beside each shard, found from the sample's URL: a path, or the ``pipe:aws s3 cp`` form of
``shard_urls``), read once per directory; where no index.json can be read a warning says the ids go
unchecked.

Stages are small picklable classes (DataLoader workers may be spawned).  Nothing here imports webdataset
except ``webdataset_pipeline``, which needs the ``shardprep[wds]`` extra.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple

import numpy as np

from shardprep.errors import ConfigError, InputDataError, ShardprepError
from shardprep.loader.layout import Extras, Pack
from shardprep.shard.format import DTYPE_FOR_EXT, DTYPES

log = logging.getLogger(__name__)

_SHARD_NAME = re.compile(r"shard-\d{5,}\.tar")
if TYPE_CHECKING:  # pragma: no cover
    from shardprep.loader.order import EpochStream
    from shardprep.loader.reader import DecodedChunk


class _OneChunk(NamedTuple):
    """The chunk table of a window piece (``batches.DocStarts``): every piece is one chunk."""

    doc_start: np.ndarray


_ONE_CHUNK = _OneChunk(np.zeros(1, dtype=np.int64))


def shard_urls(root: str, *, endpoint_url: str | None = None) -> list[str]:
    """The shard URLs of a finalized output, in index order, for ``wds.WebDataset``.

    Local (or Lustre) outputs give paths.  webdataset cannot open ``s3://`` itself, so S3 outputs give its
    ``pipe:`` form streaming through the aws CLI (``--endpoint-url`` when given).  index.json is checked
    as the loader checks it (every listed shard present with its size).
    """
    from shardprep.loader.index import load_index
    from shardprep.storage.locations import StorageOptions, is_s3

    index = load_index(str(root), storage=StorageOptions.build(endpoint_url=endpoint_url))
    urls = [index.location(s.name) for s in index.shards]
    if not is_s3(str(root)):
        return urls
    endpoint = f" --endpoint-url {shlex.quote(endpoint_url)}" if endpoint_url else ""
    return [f"pipe:aws s3 cp --only-show-errors{endpoint} {shlex.quote(u)} -" for u in urls]


def _array(sample: dict, field: str, dtype_ext: str) -> np.ndarray:
    data = sample[f"{field}.{dtype_ext}"]
    dt = np.dtype(DTYPES[DTYPE_FOR_EXT[dtype_ext]])
    if len(data) % dt.itemsize:
        raise InputDataError(f"{sample.get('__url__')}: sample {sample.get('__key__')}: {field}.{dtype_ext} has "
                             f"{len(data)} bytes, not a multiple of {dt.itemsize}")
    return np.frombuffer(data, dtype=dt)


def _index_dir(url: str) -> tuple[str, str | None]:
    """(directory of the index.json beside the shard at webdataset ``url``, its S3 endpoint or None): a
    local path or URL, or the ``pipe:aws s3 cp [--endpoint-url E] s3://... -`` form ``shard_urls`` gives."""
    endpoint = None
    if url.startswith("pipe:"):
        words = shlex.split(url[len("pipe:"):])
        if "--endpoint-url" in words[:-1]:
            endpoint = words[words.index("--endpoint-url") + 1]
        url = next((w for w in reversed(words) if "://" in w and w != endpoint), url)
    if "://" in url:
        return url.rsplit("/", 1)[0], endpoint
    return os.path.dirname(url) or ".", endpoint


def _member_ext(sample: dict, field: str) -> str | None:
    return next((ext for ext in DTYPE_FOR_EXT if f"{field}.{ext}" in sample), None)


class decode:
    """Stage: raw shard samples -> ``{"__key__", "__url__", "tokens", "doclens"[, "doc_start"]}``.

    ``tokens`` keeps the shard dtype; ``doclens`` (int64) is one length per document (a doc-layout sample
    is one document).  With ``index`` (the output's root), ``doc_start`` is the global number of the
    sample's first document, the loader's ``doc_ids`` numbering; ``pack(doc_info=True)`` needs it.
    """

    def __init__(self, index: str | None = None, *, endpoint_url: str | None = None, vocab_size: int | None = None):
        self.root, self.endpoint_url = (None if index is None else str(index)), endpoint_url
        self.vocab_size = vocab_size
        self._index: Any = None
        self._positions: dict[str, int] = {}
        self._firsts: dict[int, dict[str, int]] = {}
        self._vocab: dict[tuple[str, str | None], int | None] = {}    # index directory -> its vocabulary size

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_index": None, "_firsts": {}, "_vocab": {}}   # workers reload what they touch

    def __call__(self, samples: Iterable[dict]) -> Iterator[dict]:
        for sample in samples:
            yield self.decode_one(sample)

    def decode_one(self, sample: dict) -> dict:
        key, url = sample.get("__key__"), sample.get("__url__")
        ext = _member_ext(sample, "tokens")
        if ext is None:
            raise InputDataError(f"{url}: sample {key} has no tokens.u16/tokens.u32 member (members: "
                                 f"{sorted(k for k in sample if not k.startswith('__'))}): not a shardprep shard")
        tokens = _array(sample, "tokens", ext)
        from shardprep.loader.reader import check_token_ids

        check_token_ids(tokens, self._vocab_size(str(url)), str(url), str(key))
        lens_ext = _member_ext(sample, "doclens")
        lens = (_array(sample, "doclens", lens_ext).astype(np.int64) if lens_ext
                else np.array([tokens.size], dtype=np.int64))
        if int(lens.sum()) != tokens.size:
            raise InputDataError(f"{url}: sample {key}: document lengths sum to {int(lens.sum())} for "
                                 f"{tokens.size} tokens", hint="run `shardprep verify` on the output")
        out = {"__key__": key, "__url__": url, "tokens": tokens, "doclens": lens}
        if self.root is not None:
            out["doc_start"] = self._doc_start(self.root, str(url), str(key))
        return out

    def _vocab_size(self, url: str) -> int | None:
        """The vocabulary the shard at ``url`` was written with (see the module docstring); None: unknown."""
        if self.vocab_size is not None:
            return self.vocab_size
        where = (self.root, self.endpoint_url) if self.root is not None else _index_dir(url)
        if where not in self._vocab:
            from shardprep.shard.index import read_index
            from shardprep.storage.locations import StorageOptions

            try:
                vocab = read_index(where[0], storage=StorageOptions.build(endpoint_url=where[1])).tokenizer.vocab_size
            except (ShardprepError, OSError) as e:
                log.warning("token ids of the shards in %s are not checked against the vocabulary: no readable "
                            "index.json there (%s); pass decode(index=ROOT) or decode(vocab_size=N)", where[0], e)
                vocab = None
            self._vocab[where] = vocab if vocab is not None and vocab > 0 else None
        return self._vocab[where]

    def _doc_start(self, root: str, url: str, key: str) -> int:
        from shardprep.loader.index import load_index
        from shardprep.storage.locations import StorageOptions

        if self._index is None:
            self._index = load_index(root, storage=StorageOptions.build(endpoint_url=self.endpoint_url))
            self._positions = {s.name: i for i, s in enumerate(self._index.shards)}
        names = _SHARD_NAME.findall(url)
        shard = self._positions.get(names[-1]) if names else None
        if shard is None:
            raise InputDataError(f"{url}: not a shard listed in {root}/index.json")
        firsts = self._firsts.get(shard)
        if firsts is None:
            table = self._index.chunk_table(shard)
            firsts = self._firsts[shard] = dict(zip(table.key, table.doc_start.tolist()))
        if key not in firsts:
            raise InputDataError(f"{url}: sample {key} is not in its sidecar's chunk table")
        return int(self._index.shard_doc_start[shard]) + firsts[key]


class _Window:
    """Decoded samples not yet packed, shown to ``pack_arrays`` as the (stream, reader) pair it reads.

    Every buffered piece is one "shard" holding one chunk, in arrival order and unshuffled, so the
    loader's packing code runs unchanged.  Only the head piece is ever cut (after rows were taken from it);
    its first boundary then falls on a row start, where position ids restart anyway.
    """

    def __init__(self) -> None:
        self.chunks: list[DecodedChunk] = []
        self.doc_base: list[int] = []
        self.tokens = 0

    def add(self, tokens: np.ndarray, doclens: np.ndarray, doc_start: int) -> None:
        from shardprep.loader.reader import DecodedChunk

        if tokens.size == 0:
            return
        starts = np.zeros(len(doclens) + 1, dtype=np.int64)
        np.cumsum(doclens, out=starts[1:])
        self.chunks.append(DecodedChunk(tokens, starts, np.arange(len(doclens), dtype=np.int64), packed=True))
        self.doc_base.append(doc_start)
        self.tokens += tokens.size

    def stream(self) -> EpochStream:
        from shardprep.loader.order import EpochStream

        sizes = np.array([c.tokens.size for c in self.chunks], dtype=np.int64)
        return EpochStream(sizes, lambda s: sizes[s:s + 1], seed=0, epoch=0, shuffle=False)

    def chunk(self, shard: int, chunk: int) -> DecodedChunk:
        return self.chunks[shard]

    def table(self, shard: int) -> _OneChunk:
        return _ONE_CHUNK

    def drop(self, n: int) -> None:
        """Forget the first ``n`` tokens (rows already yielded)."""
        from shardprep.loader.reader import DecodedChunk

        self.tokens -= n
        while n:
            head = self.chunks[0]
            if head.tokens.size <= n:
                n -= head.tokens.size
                del self.chunks[0], self.doc_base[0]
                continue
            first = int(np.searchsorted(head.starts, n, side="right")) - 1     # document holding token n
            rest = head.starts[head.starts > n] - n
            starts = np.concatenate([[0], rest]).astype(np.int64)
            self.chunks[0] = DecodedChunk(head.tokens[n:], starts, np.arange(len(rest), dtype=np.int64), True)
            self.doc_base[0] += first
            n = 0


class pack:
    """Stage: decoded samples -> pack rows (``batch_size=None``) or batches of rows, as the loader's pack mode.

    ``layout`` is a ``loader.layout.Pack`` (or its ``seq_len`` as an int, turned into one here).
    Rows are ``seq_len`` consecutive tokens of the concatenated samples in arrival order: ``input_ids`` and
    ``labels`` (``LongTensor[seq_len]``, or ``[batch_size, seq_len]``), ``position_ids`` with
    ``position_ids=True``, ``cu_seqlens`` / ``doc_ids`` / ``unit_ids`` with ``doc_info=True`` (needs
    ``decode(index=...)``; ``unit_ids`` count this stage's rows).  What does not fill a last row (batch)
    is dropped, as the loader drops its tail; each DataLoader worker has its own tail.
    """

    def __init__(self, layout: Pack | int, *, batch_size: int | None = None, position_ids: bool = False,
                 doc_info: bool = False):
        if batch_size is not None and int(batch_size) < 1:
            raise ConfigError(f"batch_size={batch_size!r} is invalid: must be >= 1 or None (single rows)")
        self.layout = layout if isinstance(layout, Pack) else Pack(int(layout))
        self.seq_len, self.batch_size = self.layout.seq_len, None if batch_size is None else int(batch_size)
        self.extras = Extras(position_ids=position_ids, doc_info=doc_info)

    def __call__(self, samples: Iterable[dict]) -> Iterator[dict]:
        from shardprep.loader.batches import pack_arrays, to_tensors

        rows = self.batch_size or 1
        need = rows * self.seq_len
        window, emitted = _Window(), 0
        for sample in samples:
            if self.extras.doc_info and "doc_start" not in sample:
                raise ConfigError("pack(doc_info=True) needs global document numbers: use decode(index=ROOT)")
            window.add(sample["tokens"], sample["doclens"], int(sample.get("doc_start", 0)))
            if window.tokens < need:
                continue
            stream, doc_base = window.stream(), np.array(window.doc_base, dtype=np.int64)
            ready = window.tokens // need
            for j in range(ready):
                units = np.arange(j * rows, (j + 1) * rows, dtype=np.int64)
                arrays = pack_arrays(stream, window, units, self.seq_len, self.extras, doc_base,
                                     sample["tokens"].dtype)
                if self.extras.doc_info:
                    arrays["unit_ids"] = units + emitted
                yield to_tensors(arrays, self.layout, unbatched=self.batch_size is None)
            window.drop(ready * need)
            emitted += ready * rows


def webdataset_pipeline(root: str, seq_len: int, *, batch_size: int | None = None, shardshuffle: int | bool = False,
                        seed: int | None = None, position_ids: bool = False, doc_info: bool = False,
                        endpoint_url: str | None = None, **webdataset_kwargs: Any) -> Any:  # a wds.WebDataset
    """The stock recipe in one call: ``wds.WebDataset(shard_urls(root), nodesplitter=split_by_node,
    workersplitter=split_by_worker, shardshuffle=...)`` composed with ``decode`` and ``pack``.

    Extra keyword arguments go to ``wds.WebDataset`` (e.g. ``empty_check``, ``detshuffle``).  Iterate it
    through ``wds.WebLoader(ds, batch_size=None, num_workers=...)``; see docs/loader.md for its limits.
    """
    from shardprep._extras import require

    wds = require("webdataset", feature="shardprep.wds.webdataset_pipeline")
    ds = wds.WebDataset(shard_urls(root, endpoint_url=endpoint_url), nodesplitter=wds.split_by_node,
                        workersplitter=wds.split_by_worker, shardshuffle=shardshuffle, seed=seed,
                        **webdataset_kwargs)
    index = str(root) if doc_info else None
    return ds.compose(decode(index, endpoint_url=endpoint_url),
                      pack(seq_len, batch_size=batch_size, position_ids=position_ids, doc_info=doc_info))
