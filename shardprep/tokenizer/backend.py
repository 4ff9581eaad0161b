"""Encoding backends behind one small interface.

A backend turns a batch of texts into ``(flat_ids, lengths)``: all ids concatenated as one uint32 array
plus each document's length.  That shape avoids a Python list per document on the hot path and is what
the shard writer consumes.  Backends never add special tokens: BOS/EOS are applied once, by
``add_boundary_tokens``, so every backend is held to exactly the same ids (see docs/architecture.md).

``hf`` (Hugging Face ``tokenizers``) is the reference and always available.  Faster backends register
in ``BACKENDS`` and are chosen by ``select_backend`` (``auto`` verifies them against ``hf`` first).
"""

from __future__ import annotations

import array
import logging
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

# The ``array`` type code of a 4-byte unsigned integer ("I" on every platform we know of).
_UINT32 = next(code for code in "IL" if array.array(code).itemsize == 4)


class Backend(Protocol):
    name: str

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Return (flat uint32 ids, int64 lengths), no special tokens added."""
        ...

    def describe(self) -> dict:
        """Name and version, recorded in the shard sidecar."""
        ...


class HFBackend:
    """Hugging Face ``tokenizers`` with ``encode_batch_fast`` (no offsets: they cost ~30%)."""

    name = "hf"

    def __init__(self, tokenizer_json: str, *, allow_special_tokens: bool = False):
        import tokenizers

        self._version = tokenizers.__version__
        self.tok = tokenizers.Tokenizer.from_str(tokenizer_json)
        self.tok.no_truncation()
        self.tok.no_padding()
        # Raw text must not inject control tokens: encode "<|endoftext|>" in text as plain text.
        self.tok.encode_special_tokens = not allow_special_tokens

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

    def describe(self) -> dict:
        return {"name": self.name, "version": self._version}


class BackendFactory(Protocol):
    def __call__(self, tokenizer_json: str, allow_special: bool, task_bytes: int | None = None) -> Backend:
        """``task_bytes``: the input bytes of the task about to encode, when known (a size hint)."""
        ...


def _hf_backend(tokenizer_json: str, allow_special: bool, task_bytes: int | None = None) -> Backend:
    return HFBackend(tokenizer_json, allow_special_tokens=allow_special)


def _gigatoken_backend(tokenizer_json: str, allow_special: bool, task_bytes: int | None = None) -> Backend:
    # imported lazily: gigatoken is an optional dependency (shardprep[fast])
    from shardprep.tokenizer.gigatoken_backend import PER_DOCUMENT_BELOW, GigatokenBackend

    per_document = task_bytes is not None and task_bytes < PER_DOCUMENT_BELOW
    return GigatokenBackend(tokenizer_json, allow_special_tokens=allow_special, per_document=per_document)


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


def select_backend(name: str, tokenizer_json: str, *, allow_special_tokens: bool,
                   sample_texts: list[str] | None = None, plan_check: dict | None = None,
                   fingerprint: str | None = None, task_bytes: int | None = None) -> tuple[Backend, dict]:
    """Return the backend to use and a record of how it was chosen (stored in the shard sidecar).

    ``hf`` is the reference and is used as is.  A fast backend is used only after it reproduced the
    ``hf`` ids exactly on fixed hard cases plus ``sample_texts`` (the task's first batch):
    ``auto`` falls back to ``hf`` and logs why when it cannot load or differs; an explicitly requested
    fast backend fails the task instead, because ids must never silently differ from the reference.
    ``plan_check`` (job.json's ``backend_check``) replaces the hard cases when it matches this task's
    libraries and the tokenizer ``fingerprint`` (``plan_check.usable_plan_check``); ``task_bytes`` lets
    the backend fit how it encodes to the task's size.
    """
    from shardprep.errors import ConfigError, TokenizerError
    from shardprep.tokenizer.plan_check import usable_plan_check
    from shardprep.tokenizer.verify_backend import verify_backend

    if name != "auto" and name not in BACKENDS:
        raise ConfigError(f"--backend={name!r} is not available (available: auto, {', '.join(sorted(BACKENDS))})")
    reference = BACKENDS["hf"](tokenizer_json, allow_special_tokens)
    if name == "hf":
        return reference, {**reference.describe(), "requested": name, "check": None}

    candidates = AUTO_CANDIDATES if name == "auto" else (name,)
    check: dict | None = None
    for candidate in candidates:
        try:
            backend = BACKENDS[candidate](tokenizer_json, allow_special_tokens, task_bytes)
        except Exception as e:  # not installed, or cannot represent this tokenizer
            check = {"passed": False, "candidate": candidate, "reason": str(e)}
            if name != "auto":
                raise TokenizerError(f"--backend={name}: {e}", hint="use --backend auto or --backend hf") from None
            log.warning("backend %s not used, falling back to hf: %s", candidate, e)
            continue
        planned, ignored = usable_plan_check(plan_check, backend, reference, fingerprint=fingerprint,
                                             allow_special_tokens=allow_special_tokens)
        check = {"candidate": f"{candidate} {backend.describe().get('version', '')}".strip(),
                 **verify_backend(backend, reference, tokenizer_json, sample_texts or [], planned=planned,
                                  planned_ignored=ignored)}
        if check["passed"]:
            return backend, {**backend.describe(), "requested": name, "check": check}
        if name != "auto":
            raise TokenizerError(f"--backend={name} does not reproduce the hf ids: {check['reason']}",
                                 hint="use --backend auto (falls back to hf) or --backend hf")
        log.warning("backend %s does not reproduce the hf ids (%s); falling back to hf", candidate, check["reason"])
    record = {**reference.describe(), "requested": name, "check": check}
    if check is not None:
        record["fallback_reason"] = check["reason"]
    return reference, record
