"""The ``auto`` check's fixed hard cases, run once per job at plan time instead of once per task.

Why: the hard cases (``verify_backend.hard_cases``) are the same texts for every task of a job, so
their outcome depends only on the frozen tokenizer, ``--allow-special-tokens`` and the versions of the
two libraries.  Encoding them cost each array task ~30 ms of CPU (very long words are slow in both
libraries); the plan runs them once and records the outcome in job.json (``backend_check``, not
fingerprinted: informational, like ``lustre``).

What a task trusts, and why that loses no safety:

* The record is used only when it describes exactly what the task is about to run: the same candidate
  and ``hf`` versions (``describe()`` of the task's own loads), the same tokenizer fingerprint (the
  task has already checked its frozen ``tokenizer.json`` against that fingerprint) and the same
  ``allow_special_tokens``.  Otherwise the task runs the hard cases itself, as before, and its sidecar
  says why.
* gigatoken resolves a byte-level vocabulary's duplicate byte spellings differently from one load to
  the next (tests/test_byte_alphabet.py), so a pass seen by the plan's load says nothing about a task's
  load of such a vocabulary: for those (``load_dependent``) every task runs the hard cases itself.
* A recorded failure is trusted: falling back to ``hf`` never changes ids (an explicit fast backend
  still fails the task, exit 6).
* The task's own-sample check (its first batch) always runs in the task.
"""

from __future__ import annotations

from typing import Any

from shardprep.shard.provenance import Mismatch, PlanCheck
from shardprep.tokenizer.parsed import ParsedCache
from shardprep.tokenizer.verify_backend import _Encoder, byte_alphabet_outliers, compare_with_expected, hard_cases

# The hard cases of a tokenizer and the reference's ids of them, by (tokenizer JSON, special-token strings
# matched, the reference's name and version).  The reference is deterministic, so a process that plans the
# same tokenizer again (``plan`` then ``submit`` from Python, a notebook planning several jobs) encodes
# them once: ~20 ms of very long words a plan.  The candidate is encoded every time (it is what is checked).
_EXPECTED: ParsedCache[tuple[list[tuple[str, str]], bool, Any]] = ParsedCache()


def _label(backend: _Encoder | None, name: str) -> str:
    if backend is None:
        return name
    info = backend.describe()
    return f"{info['name']} {info.get('version', '')}".strip()


def check_at_plan(tokenizer_json: str, *, backend: str, allow_special_tokens: bool, fingerprint: str,
                  reference: _Encoder | None = None) -> PlanCheck | None:
    """The plan-time record for ``job.json`` (None for ``--backend hf``, which has nothing to check);
    ``reference``: the plan's hf backend when it already has one.

    A candidate that cannot load here is recorded as a failure without a version: no task trusts it
    (its installed version differs from "none"), so each task tries the candidate itself as before.
    """
    from shardprep.tokenizer.backend import AUTO_CANDIDATES, BACKENDS

    if backend == "hf" or (backend != "auto" and backend not in BACKENDS):
        return None
    name = AUTO_CANDIDATES[0] if backend == "auto" else backend
    ref = reference or BACKENDS["hf"](tokenizer_json, allow_special_tokens)

    def expected() -> tuple[list[tuple[str, str]], bool, Any]:
        fixed = hard_cases(tokenizer_json)
        return fixed, bool(byte_alphabet_outliers(tokenizer_json)), ref.encode_batch([t for _, t in fixed])

    fixed, load_dependent, ids = _EXPECTED.get((tokenizer_json, allow_special_tokens, _label(ref, "hf")), expected)
    candidate: _Encoder | None = None
    try:
        candidate = BACKENDS[name](tokenizer_json, allow_special_tokens)
    except Exception as e:  # not installed, or cannot represent this tokenizer
        difference: tuple[str, Mismatch | None] | None = (f"{name} did not load at plan time: {e}", None)
    else:
        difference = compare_with_expected(candidate, fixed, ids)
    reason, mismatch = difference if difference is not None else (None, None)
    return PlanCheck(_label(candidate, name), _label(ref, "hf"), fingerprint, allow_special_tokens,
                     load_dependent, len(fixed), difference is None, reason, mismatch)


def usable_plan_check(record: PlanCheck | None, candidate: _Encoder, reference: _Encoder, *,
                      fingerprint: str | None, allow_special_tokens: bool) -> tuple[PlanCheck | None, str]:
    """``(record, "")`` when this task may take the plan's hard-case outcome, else ``(None, why not)``."""
    if record is None or fingerprint is None:
        return None, ""
    wanted = {"candidate": _label(candidate, ""), "reference": _label(reference, ""),
              "tokenizer_fingerprint": fingerprint, "allow_special_tokens": allow_special_tokens}
    for key, value in wanted.items():
        if getattr(record, key) != value:
            return None, f"the plan's check used {key} {getattr(record, key)!r}, this task has {value!r}"
    if record.passed and record.load_dependent:
        return None, "this vocabulary's duplicate byte spellings resolve per load, so every load is checked"
    return record, ""
