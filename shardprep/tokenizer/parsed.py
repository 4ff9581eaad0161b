"""Tokenizers parsed once per process, keyed by their serialisation.

Why: a process often meets the same tokenizer more than once.  A local pool worker runs task after task
of one job, each loading the job's frozen ``tokenizer.json``; a plan resolves the tokenizer, samples with
it and checks the fast backend against it; a notebook plans several jobs.  Parsing a 100k-256k vocabulary
costs 0.1-0.3 s each time in ``tokenizers`` and as much again in gigatoken, more than a small task's
encoding.  The key is the JSON text itself (Python caches a string's hash, and equal keys are compared
byte for byte), so "same key" means "same tokenizer" and a changed file is a new entry.

What is handed out is shared: callers read it and encode with it, never change its settings.  The settings
every caller wants (no truncation, no padding, special-token strings matched or not) are part of the key.
Only the last few are kept: a process that walks through many tokenizers holds at most ``KEEP`` of each
kind, not all of them.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

KEEP = 4    # entries per cache: a job's tokenizer with and without special-token matching, and two more

_CACHES: weakref.WeakSet[ParsedCache[Any]] = weakref.WeakSet()
_keep = KEEP    # what a cache made without ``keep`` holds: keep_per_cache changes it


class ParsedCache(Generic[T]):
    """A small least-recently-used map from a key (holding the tokenizer JSON) to what was built from it."""

    def __init__(self, keep: int | None = None):
        self._keep = _keep if keep is None else keep
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.add(self)

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value kept for ``key``, else ``build()`` kept (built outside the lock: two threads asking for
        the same new key may both build it, and one of the two results is kept)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._keep:
                self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)

    def keep(self, keep: int) -> None:
        """Hold at most ``keep`` entries from now on (the least recently used go first)."""
        with self._lock:
            self._keep = keep
            while len(self._items) > keep:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_TOKENIZERS: ParsedCache[Any] = ParsedCache()
_FILES: ParsedCache[str] = ParsedCache()


def shared_tokenizer(tokenizer_json: str, *, match_specials: bool, parsed: Any = None) -> Any:
    """The ``tokenizers.Tokenizer`` of ``tokenizer_json`` with no truncation, no padding, and special-token
    strings in the text matched as the special tokens (``match_specials``, as a chat render needs) or
    encoded as plain text (raw text must not inject control tokens).  ``parsed``: the same tokenizer
    already parsed by the caller, taken over (its settings are changed) when the cache has none."""

    def build() -> Any:
        from tokenizers import Tokenizer

        tok = parsed if parsed is not None else Tokenizer.from_str(tokenizer_json)
        tok.no_truncation()
        tok.no_padding()
        tok.encode_special_tokens = not match_specials
        return tok

    return _TOKENIZERS.get((tokenizer_json, match_specials), build)


def tokenizer_file(path: Path) -> tuple[str, Any]:
    """``(serialisation, tokenizer)`` of a ``tokenizer.json``: the Rust serialisation (what a plan
    freezes) and the shared tokenizer parsed from it (special-token strings as plain text).  Keyed by the
    file's bytes (reading them costs a few ms where parsing costs a hundred): a copy of the same file is
    not parsed again, an edited one is."""
    from tokenizers import Tokenizer

    raw = path.read_bytes()
    first: list[Any] = []

    def parse() -> str:
        tok = Tokenizer.from_buffer(raw)
        first.append(tok)
        return str(tok.to_str())

    text = _FILES.get(raw, parse)
    return text, shared_tokenizer(text, match_specials=False, parsed=first[0] if first else None)


def keep_per_cache(keep: int) -> None:
    """Let every cache of parsed tokenizers in this process (these, the gigatoken loads, the vocabulary
    facts, the chat placement tables) hold ``keep`` entries instead of ``KEEP``.  For a process that goes
    through many tokenizers on purpose and has the memory for them (5-50 MB each): a test session over
    the twelve shared families, a notebook comparing them.  Caches made later hold as many."""
    global _keep
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    _keep = keep
    for cache in list(_CACHES):
        cache.keep(keep)


def clear() -> None:
    """Forget every parsed tokenizer (tests that count parses start from nothing)."""
    _TOKENIZERS.clear()
    _FILES.clear()
