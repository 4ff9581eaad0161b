"""Encoding backends behind one small interface.

A backend turns a batch of texts into ``(flat_ids, lengths)``: all ids concatenated as one uint32 array
plus each document's length.  That shape avoids a Python list per document on the hot path and is what
the shard writer consumes.  Backends never add special tokens: BOS/EOS are applied once, by
``add_boundary_tokens``, so every backend is held to exactly the same ids (see docs/architecture.md).

``hf`` (Hugging Face ``tokenizers``) is the reference and always available.  Faster backends register
in ``BACKENDS``.  A task opens one with ``open_backend`` and may publish what it wrote only once
``tokenizer.exactness`` has compared it with ``hf``; ``select_backend`` checks a candidate up front
(``doctor``, tools).
"""

from __future__ import annotations

import array
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from shardprep.shard.provenance import BackendRecord, CheckRecord

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.fastpath import DocBatch
    from shardprep.shard.provenance import PlanCheck

log = logging.getLogger(__name__)

# The ``array`` type code of a 4-byte unsigned integer ("I" on every platform we know of).
_UINT32 = next(code for code in "IL" if array.array(code).itemsize == 4)


class Backend(Protocol):
    name: str
    block_bytes: int          # text per encode call the task's reader should aim for

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Return (flat uint32 ids, int64 lengths), no special tokens added."""
        ...

    def encode(self, batch: DocBatch) -> tuple[np.ndarray, np.ndarray]:
        """``encode_batch`` of a reader's batch (``inputs.fastpath.DocBatch``)."""
        ...

    def describe(self) -> dict:
        """Name and version, recorded in the shard sidecar."""
        ...


class HFBackend:
    """Hugging Face ``tokenizers`` with ``encode_batch_fast`` (no offsets: they cost ~30%)."""

    name = "hf"
    block_bytes = 1 << 20     # text per reader batch: stops within a second or so at hf speed
    # Text per encode_batch_fast call and thread.  Larger calls are slower, not faster: every document's
    # Encoding holds a dozen fields per token until its ids are copied out, and a call of 8,192 documents
    # encoded at ~0.6x the speed of calls of 128-512 (docs/benchmarks.md, "hf backend").
    call_chars = 128 << 10

    def __init__(self, tokenizer_json: str, *, allow_special_tokens: bool = False, threads: int = 1):
        """The process's shared tokenizer of ``tokenizer_json`` (``tokenizer.parsed``: parsed once, with no
        truncation, no padding, and special-token strings in the text matched only with
        ``allow_special_tokens``: raw text must not inject control tokens).  ``threads``: how many threads
        tokenizers' pool has, so that each call gives every one of them ``call_chars`` (the pool itself is
        sized once per process, before first use: ``job.resources.set_tokenizer_threads``)."""
        import tokenizers

        from shardprep.tokenizer.parsed import shared_tokenizer

        self._version = tokenizers.__version__
        self.tok = shared_tokenizer(tokenizer_json, match_specials=allow_special_tokens)
        self._threads = max(1, threads)

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encs = self.tok.encode_batch_fast(texts, add_special_tokens=False)
        # ``Encoding.ids`` is the only way out of tokenizers: a Python list per document.  Appending
        # each list to one C ``unsigned int`` array costs ~35 ns per token, half of ``np.fromiter``
        # over the chained lists (the encode itself is ~1500 ns per token).
        lengths = np.fromiter(map(len, encs), dtype=np.int64, count=len(encs))
        flat = array.array(_UINT32)
        for enc in encs:
            flat.extend(enc.ids)
        return np.frombuffer(flat, dtype=np.uint32), lengths

    def encode(self, batch: DocBatch) -> tuple[np.ndarray, np.ndarray]:
        texts = batch.texts()
        parts, size, first = [], 0, 0
        per_call = self.call_chars * self._threads
        for i, text in enumerate(texts):
            size += len(text)
            if size >= per_call:
                parts.append(self.encode_batch(texts[first:i + 1]))
                first, size = i + 1, 0
        if first < len(texts) or not parts:
            parts.append(self.encode_batch(texts[first:]))
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([f for f, _ in parts]), np.concatenate([n for _, n in parts])

    def describe(self) -> dict:
        return {"name": self.name, "version": self._version}


class BackendFactory(Protocol):
    def __call__(self, tokenizer_json: str, allow_special: bool, *, threads: int = 1) -> Backend:
        """``threads``: the backend's own threads (a task runs a fast backend on one, in worker processes)."""
        ...


def _hf_backend(tokenizer_json: str, allow_special: bool, *, threads: int = 1) -> Backend:
    return HFBackend(tokenizer_json, allow_special_tokens=allow_special, threads=threads)


def _gigatoken_backend(tokenizer_json: str, allow_special: bool, *, threads: int = 1) -> Backend:
    # imported lazily: gigatoken is an optional dependency (shardprep[fast])
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

    return GigatokenBackend(tokenizer_json, allow_special_tokens=allow_special, threads=threads)


BACKENDS: dict[str, BackendFactory] = {"hf": _hf_backend, "gigatoken": _gigatoken_backend}
# Fast backends ``auto`` tries, in order of preference, before settling for ``hf``.
AUTO_CANDIDATES: tuple[str, ...] = ("gigatoken",)


def add_boundary_tokens(flat: np.ndarray, lengths: np.ndarray, bos_id: int | None,
                        eos_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Insert BOS before and/or EOS after every document, vectorised.

    The boundary slots are written by position and the body is copied through a boolean mask: one
    sequential pass, about 10x faster than scattering every token through an index array.
    """
    extra = (bos_id is not None) + (eos_id is not None)
    if not extra or len(lengths) == 0:
        return flat, lengths
    new_lengths = lengths + extra
    ends = np.cumsum(new_lengths)
    out = np.empty(int(ends[-1]), dtype=flat.dtype)
    body = np.ones(out.size, dtype=bool)
    if bos_id is not None:
        starts = ends - new_lengths
        out[starts] = bos_id
        body[starts] = False
    if eos_id is not None:
        out[ends - 1] = eos_id
        body[ends - 1] = False
    out[body] = flat
    return out, new_lengths


def _check_name(name: str) -> None:
    from shardprep.errors import ConfigError

    if name != "auto" and name not in BACKENDS:
        raise ConfigError(f"--backend={name!r} is not available (available: auto, {', '.join(sorted(BACKENDS))})")


@dataclass
class Opened:
    """The backend a task encodes with, and whether its ids must still be checked against ``hf``."""

    backend: Backend
    requested: str                      # the --backend asked for
    candidate: bool                     # a fast backend: its shard stands only once ``check_candidate`` passed
    load_failure: CheckRecord | None = None   # ``auto`` whose candidate did not load (``backend`` is then hf)


def open_backend(name: str, tokenizer_json: str, *, allow_special_tokens: bool, hf_threads: int = 1) -> Opened:
    """The backend to encode with: ``hf`` as is, else the first fast candidate that loads (unchecked).

    Nothing is compared here, so the task can start encoding at once; ``check_candidate`` compares the
    ids once the task has them.  ``auto`` falls back to ``hf`` when no candidate loads; an explicitly
    requested fast backend that does not load fails the task.  ``hf_threads``: ``hf``'s own threads (a
    fast backend runs on one: the task gives it worker processes instead, ``job.encode.Parallelism``).
    """
    from shardprep.errors import TokenizerError

    _check_name(name)
    if name == "hf":
        return Opened(BACKENDS["hf"](tokenizer_json, allow_special_tokens, threads=hf_threads), name, candidate=False)
    failure: CheckRecord | None = None
    for candidate in AUTO_CANDIDATES if name == "auto" else (name,):
        try:
            return Opened(BACKENDS[candidate](tokenizer_json, allow_special_tokens), name, candidate=True)
        except Exception as e:  # not installed, or cannot represent this tokenizer
            if name != "auto":
                raise TokenizerError(f"--backend={name}: {e}", hint="use --backend auto or --backend hf") from None
            log.warning("backend %s not used, falling back to hf: %s", candidate, e)
            failure = CheckRecord(False, candidate=candidate, reason=str(e))
    return Opened(BACKENDS["hf"](tokenizer_json, allow_special_tokens, threads=hf_threads), name, candidate=False,
                  load_failure=failure)


def check_candidate(opened: Opened, tokenizer_json: str, *, allow_special_tokens: bool,
                    sample_texts: list[str] | None = None, recorded: list | None = None,
                    plan_check: PlanCheck | None = None, fingerprint: str | None = None,
                    reference: Backend | None = None) -> CheckRecord:
    """The ``backend.check`` record of an opened candidate: hard cases (unless ``plan_check``, job.json's
    ``backend_check``, applies: ``plan_check.usable_plan_check``), ``sample_texts`` and ``recorded``
    documents (label, text, the ids the candidate gave them) compared with ``hf`` (``reference``, when
    the caller loaded it already)."""
    from shardprep.tokenizer.plan_check import usable_plan_check
    from shardprep.tokenizer.verify_backend import verify_backend

    backend = opened.backend
    reference = reference or BACKENDS["hf"](tokenizer_json, allow_special_tokens)
    planned, ignored = usable_plan_check(plan_check, backend, reference, fingerprint=fingerprint,
                                         allow_special_tokens=allow_special_tokens)
    check = verify_backend(backend, reference, tokenizer_json, sample_texts or [], planned=planned,
                           planned_ignored=ignored, recorded=recorded)
    return replace(check, candidate=f"{backend.name} {backend.describe().get('version', '')}".strip())


def backend_record(opened: Opened, check: CheckRecord | None) -> BackendRecord:
    """The sidecar's ``backend``: what wrote the shard, what was asked for, and the check.

    A candidate whose ``check`` failed fails here when it was asked for by name (ids must never
    silently differ from the reference); under ``auto`` the record names ``hf`` and why, and the
    caller re-encodes with ``hf``.
    """
    from shardprep.errors import TokenizerError

    if not opened.candidate:
        failure = opened.load_failure
        return BackendRecord(opened.backend.name, opened.backend.describe().get("version"), opened.requested,
                             failure, failure.reason if failure else None)
    assert check is not None
    if check.passed:
        return BackendRecord(opened.backend.name, opened.backend.describe().get("version"), opened.requested, check)
    if opened.requested != "auto":
        raise TokenizerError(f"--backend={opened.requested} does not reproduce the hf ids: {check.reason}",
                             hint="use --backend auto (falls back to hf) or --backend hf")
    log.warning("backend %s does not reproduce the hf ids (%s); falling back to hf", opened.backend.name, check.reason)
    import tokenizers

    return BackendRecord("hf", tokenizers.__version__, opened.requested, check, check.reason)


def select_backend(name: str, tokenizer_json: str, *, allow_special_tokens: bool,
                   sample_texts: list[str] | None = None, plan_check: PlanCheck | None = None,
                   fingerprint: str | None = None) -> tuple[Backend, BackendRecord]:
    """The backend to use and its record, checked up front on hard cases and ``sample_texts``
    (``doctor`` and tools; a task checks while it encodes instead: ``open_backend``)."""
    opened = open_backend(name, tokenizer_json, allow_special_tokens=allow_special_tokens)
    check = None
    if opened.candidate:
        check = check_candidate(opened, tokenizer_json, allow_special_tokens=allow_special_tokens,
                                sample_texts=sample_texts, plan_check=plan_check, fingerprint=fingerprint)
    record = backend_record(opened, check)
    if record.name == opened.backend.name:
        return opened.backend, record
    return BACKENDS["hf"](tokenizer_json, allow_special_tokens), record
