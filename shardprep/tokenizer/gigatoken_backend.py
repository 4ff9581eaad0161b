"""The ``gigatoken`` backend: a Rust BPE encoder that is 10-60x faster per core than ``tokenizers``.

Why it is safe to use: it is never trusted blindly.  ``select_backend`` only picks it after
``verify_backend`` reproduced the ``hf`` ids on hard cases and on the task's own documents, and the shard
bytes are then identical whichever backend wrote them.

Two details make the ids match the reference:

* Special tokens.  shardprep encodes special-token strings that occur in raw text (``<|endoftext|>``) as
  plain text unless ``--allow-special-tokens``; ``tokenizers`` does that with ``encode_special_tokens``.
  gigatoken has no such switch, so the special entries are removed from ``added_tokens`` of the JSON it
  loads: the pre-tokenizer then splits the string like any other text, exactly as ``tokenizers`` does.
  Non-special added tokens stay (``tokenizers`` still matches them in text).
* Threads.  gigatoken can fan a batch out on its process-global rayon pool, but in a task that does not
  pay: encoding is ~20% of an ``auto`` task's time, and 2 threads gave at most 1.2x on the encode calls
  for 50% more CPU (0.6x at 1 MiB batches; docs/benchmarks.md).  So it encodes on the calling thread
  and a job scales with more tasks (processes), one CPU each.  ``threads > 1`` remains available to
  callers that only encode.

gigatoken's ``encode_batch`` returns an awkward ``ListOffsetArray``; its ``offsets`` and ``content``
buffers already are the ``(flat ids, lengths)`` pair the shard writer wants, so they are taken as numpy
views without a copy.  But building that result imports awkward (and with it fsspec and pyarrow): ~0.1 s
of CPU per process, a third of a small array task's fixed cost.  A task with less than
``PER_DOCUMENT_BELOW`` bytes of input therefore encodes document by document (``encode``, one numpy
array each, the same Rust encoder and pretoken cache) and never imports awkward; a larger task keeps
the batch call, whose lower per-document overhead (1.2x on 1-6 KB documents, 2.6x on 45-byte ones)
outweighs the import.  The choice is made when the backend is built, before the ``auto`` check, so
the check compares the very path that writes the shard.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import orjson

from shardprep._extras import require
from shardprep.tokenizer.verify_backend import added_tokens_span

log = logging.getLogger(__name__)


class BackendUnavailable(RuntimeError):
    """gigatoken cannot load this tokenizer (the reason is the message); not installed is ``MissingExtra``."""


def plain_text_specials_json(tokenizer_json: str) -> str:
    """The tokenizer JSON without its *special* added tokens, so their strings encode as plain text.

    Only the ``added_tokens`` array is replaced (re-serialising the whole 1-4 MB document would cost
    ~30 ms per task); anything unexpected takes the fully parsed path.  A wrong edit could only make the
    candidate fail ``verify_backend``, never change the ids written.
    """
    span = added_tokens_span(tokenizer_json)
    if span is not None:
        added, start, end = span
        kept = [t for t in added if not t.get("special")]
        if len(kept) == len(added):
            return tokenizer_json
        return tokenizer_json[:start] + json.dumps(kept, ensure_ascii=False) + tokenizer_json[end:]
    data = orjson.loads(tokenizer_json)
    added = data.get("added_tokens") or []
    kept = [t for t in added if not t.get("special")]
    if len(kept) == len(added):
        return tokenizer_json
    data["added_tokens"] = kept
    return orjson.dumps(data).decode("utf-8")


def _installed_version(module: ModuleType) -> str:
    """The package version from its ``dist-info`` beside it (``importlib.metadata`` scans every installed
    distribution, ~0.1 s per task on a full environment)."""
    if module.__file__ is not None:   # None: a namespace package, no file to look beside
        site = Path(module.__file__).resolve().parent.parent
        for info in site.glob("gigatoken-*.dist-info"):
            return info.name[len("gigatoken-"):-len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gigatoken")
    except PackageNotFoundError:  # pragma: no cover - vendored or source install
        return getattr(module, "__version__", "unknown")


_forked = False


def _mark_forked() -> None:
    global _forked
    _forked = True


# A rayon pool that existed before os.fork() has no threads in the child: handing it work there hangs.
# After a fork we therefore always encode on the calling thread (shardprep's own executors use spawn).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


# Input bytes of a task below which it encodes document by document (see the module docstring): the
# awkward import costs about what 16 MB of 45-byte documents lose to per-call overhead.
PER_DOCUMENT_BELOW = 16 << 20


class GigatokenBackend:
    """Backend protocol implementation on top of ``gigatoken.Tokenizer``."""

    name = "gigatoken"
    # Larger batches than the task default: each call pays ~2 ms to build the awkward result.
    batch_chars = 4 << 20
    batch_docs = 32768

    def __init__(self, tokenizer_json: str, *, allow_special_tokens: bool = False, threads: int = 1,
                 per_document: bool = False):
        gigatoken = require("gigatoken", feature="the gigatoken backend")
        self._version = _installed_version(gigatoken)
        source = tokenizer_json if allow_special_tokens else plain_text_specials_json(tokenizer_json)
        try:
            # The raw Rust object: skips the Python wrapper's per-call worker-process detection.
            self._tok = gigatoken.Tokenizer.from_json(source).backend
        except Exception as e:  # Rust errors arrive as RuntimeError/ValueError with a multi-line message
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BackendUnavailable(f"gigatoken cannot load this tokenizer: {first}") from None
        self.threads = max(1, threads)
        self._parallel = self.threads > 1
        self.per_document = per_document and not self._parallel

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat uint32 ids, int64 lengths): views into gigatoken's result buffers, or per document."""
        if not texts:
            return np.empty(0, np.uint32), np.empty(0, np.int64)
        if self.per_document:
            docs = list(map(self._tok.encode, texts))
            lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            return np.concatenate(docs).astype(np.uint32, copy=False), lengths
        return flat_and_lengths(self._tok.encode_batch(texts, parallel=self._parallel and not _forked))

    def describe(self) -> dict:
        return {"name": self.name, "version": self._version}


def flat_and_lengths(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy ``(content, lengths)`` of an awkward list-of-uint32 array.

    gigatoken builds a ``ListOffsetArray`` whose content starts at offset 0; any other layout (a future
    version might return a ``ListArray``) goes through awkward's own flatten, which copies but is correct.
    """
    layout = array.layout
    offsets = getattr(layout, "offsets", None)
    content = getattr(layout, "content", None)
    data = getattr(content, "data", None)
    if offsets is not None and isinstance(data, np.ndarray):
        off = np.asarray(offsets.data, dtype=np.int64)
        flat = data[off[0]:off[-1]]
        if flat.dtype != np.uint32:
            flat = flat.astype(np.uint32)
        return flat, np.diff(off)
    import awkward as ak

    lengths = np.asarray(ak.num(array, axis=1), dtype=np.int64)
    flat = np.asarray(ak.flatten(array, axis=1), dtype=np.uint32)
    return flat, lengths
