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
* Threads.  gigatoken can fan a batch out on its process-global rayon pool, but that scales poorly
  (2 threads gave at most 1.2x for 50% more CPU; docs/benchmarks.md), and a call holds the GIL, so
  threads of one process cannot overlap two calls either.  So it encodes on the calling thread; a task
  given several CPUs runs that many worker processes (``job.parallel``).

Two details make it cheap:

* Its result.  ``encode_batch`` returns an awkward array, which its Rust code builds by calling
  ``awkward.unflatten(content, counts)`` on two numpy arrays: exactly the ``(flat ids, lengths)`` pair
  the shard writer wants.  Importing awkward (and with it fsspec and pyarrow) costs ~0.25-0.5 s per
  process, more than a 48 MB task spends encoding.  So for the duration of each call a tiny stand-in
  module answers to the name ``awkward`` and hands the two arrays back (``_FlatResult``).  It is used
  only for gigatoken versions it was tested with (``FLAT_RESULT_TESTED``) and only while awkward itself
  is not imported; any surprise (another awkward function called, another shape returned) switches the
  process to the real awkward for good, with a warning.  The ids are checked against ``hf`` either way.
* Input.  A block of text is handed over whole (``BytesSource`` with a separator), never as one Python
  object per document: gigatoken splits it in Rust.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import orjson

from shardprep._extras import require
from shardprep.tokenizer.parsed import ParsedCache
from shardprep.tokenizer.verify_backend import added_tokens_span

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.fastpath import DocBatch

log = logging.getLogger(__name__)

# gigatoken releases whose encode_batch builds its result with awkward.unflatten(content, counts) only
# (tests/test_backends.py checks it on the installed release).
FLAT_RESULT_TESTED = ("0.10.",)


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


def _installed_version(module: types.ModuleType) -> str:
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
# gigatoken's Rust tokenizers by (tokenizer JSON, special-token strings matched): loading one costs what
# parsing it costs tokenizers, and a process loads the same one for task after task.
_LOADED: ParsedCache[Any] = ParsedCache()


def _mark_forked() -> None:
    global _forked
    _forked = True


# A rayon pool that existed before os.fork() has no threads in the child: handing it work there hangs.
# After a fork we therefore always encode on the calling thread.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


class _Never:
    """What ``isinstance(x, awkward.Array)`` asks about: nothing we pass is one."""


def _unflatten(content: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return content, counts


class _FlatResult:
    """``encode_batch`` through the stand-in awkward (module docstring, "Its result")."""

    module = types.ModuleType("awkward", "shardprep's stand-in for awkward during one gigatoken call")
    module.Array = _Never                  # type: ignore[attr-defined]  # a module built at run time
    module.unflatten = _unflatten          # type: ignore[attr-defined]
    lock = threading.Lock()
    broken = False

    @classmethod
    def usable(cls, version: str) -> bool:
        return not cls.broken and version.startswith(FLAT_RESULT_TESTED) and "awkward" not in sys.modules

    @classmethod
    def call(cls, encode: Callable[[Any], Any], arg: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """(flat ids, lengths), or None when the stand-in did not do (then it is never tried again)."""
        with cls.lock:
            sys.modules["awkward"] = cls.module
            try:
                out = encode(arg)
            except (AttributeError, TypeError) as e:   # it asked awkward for more than unflatten
                cls._give_up(f"gigatoken needs the real awkward ({e})")
                return None
            finally:
                if sys.modules.get("awkward") is cls.module:
                    del sys.modules["awkward"]
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], np.ndarray)
                and int(np.sum(out[1])) == len(out[0])):
            cls._give_up("gigatoken returned an unexpected result through the awkward stand-in")
            return None
        return out[0], np.asarray(out[1], dtype=np.int64)

    @classmethod
    def _give_up(cls, why: str) -> None:
        cls.broken = True
        log.warning("%s; importing awkward (slower start-up, same ids)", why)


class GigatokenBackend:
    """Backend protocol implementation on top of ``gigatoken.Tokenizer``."""

    name = "gigatoken"
    block_bytes = 8 << 20     # text per encode call: amortises the call, still stops within ~50 ms

    def __init__(self, tokenizer_json: str, *, allow_special_tokens: bool = False, threads: int = 1):
        gigatoken = require("gigatoken", feature="the gigatoken backend")
        self._version = _installed_version(gigatoken)
        self._bytes_source = gigatoken.BytesSource

        def load() -> Any:
            source = tokenizer_json if allow_special_tokens else plain_text_specials_json(tokenizer_json)
            # The raw Rust object: skips the Python wrapper's per-call worker-process detection.
            return gigatoken.Tokenizer.from_json(source).backend

        try:    # loaded once per process, as tokenizers' are (tokenizer.parsed)
            self._tok = _LOADED.get((tokenizer_json, allow_special_tokens), load)
        except Exception as e:  # Rust errors arrive as RuntimeError/ValueError with a multi-line message
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BackendUnavailable(f"gigatoken cannot load this tokenizer: {first}") from None
        self.threads = max(1, threads)

    def _encode(self, arg: Any) -> tuple[np.ndarray, np.ndarray]:
        parallel = self.threads > 1 and not _forked

        def encode(x: Any) -> Any:
            return self._tok.encode_batch(x, parallel=parallel)

        if _FlatResult.usable(self._version):
            flat = _FlatResult.call(encode, arg)
            if flat is not None:
                return flat
        return flat_and_lengths(encode(arg))

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat uint32 ids, int64 lengths) of ``texts``."""
        if not texts:
            return np.empty(0, np.uint32), np.empty(0, np.int64)
        return self._encode(texts)

    def encode(self, batch: DocBatch) -> tuple[np.ndarray, np.ndarray]:
        """(flat uint32 ids, int64 lengths) of a reader's batch: a text buffer is handed over whole."""
        if batch.buffer is None:
            return self.encode_batch(batch.texts())
        flat, lengths = self._encode(self._bytes_source(batch.buffer, separator=batch.sep))
        if len(lengths) != batch.docs:
            raise RuntimeError(f"gigatoken returned {len(lengths)} documents for a batch of {batch.docs}")
        return flat, lengths

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
