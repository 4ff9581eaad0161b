"""A sidecar's informational records: which backend wrote the shard and how its ids were checked against
``hf``, and what the task cost.

Informational means they differ between two runs of the same plan (versions, timings, hosts) and no
reader decides anything on them; they are typed all the same, so ``report``, ``inspect`` and ``doctor``
read fields, not ``.get("...")`` on dicts whose keys only the writer knew.  The check record is built by
``tokenizer.verify_backend`` and ``tokenizer.backend``; job.json's plan-time check record (``PlanCheck``, made by
``tokenizer.plan_check``) shares its ``Mismatch``.  Serialised in the key order sidecars have
always had; a key whose value is absent is left out, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from shardprep.records import Fields, record


@dataclass(frozen=True)
class Mismatch:
    """The first document whose ids differed: where, and the ids either side of the difference."""

    case: str
    text: str
    token: int
    expected: tuple[int, ...]
    got: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "text": self.text, "token": self.token, "expected": list(self.expected),
                "got": list(self.got)}

    @classmethod
    def parse(cls, f: Fields) -> Mismatch:
        return cls(f.str("case"), f.str("text"), f.int("token"), f.ints("expected"), f.ints("got"))


@dataclass(frozen=True)
class CheckRecord:
    """The ``auto`` check of a fast backend against ``hf`` (sidecar ``backend.check``; docs/format.md)."""

    passed: bool
    candidate: str | None = None
    reference: str | None = None
    hard_cases: int | None = None
    hard_cases_checked: str | None = None       # plan | task
    sample_documents: int | None = None         # evenly spaced documents of the first batch
    sample_chars: int | None = None
    elapsed_s: float | None = None
    spread_documents: int | None = None         # documents from every block, with the ids written
    spread_chars: int | None = None
    plan_check_ignored: str | None = None
    reason: str | None = None
    mismatch: Mismatch | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.candidate is not None:
            out["candidate"] = self.candidate
        out["passed"] = self.passed
        for f in fields(self)[2:-1]:
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        if self.mismatch is not None:
            out["mismatch"] = self.mismatch.to_dict()
        return out

    @classmethod
    def parse(cls, f: Fields) -> CheckRecord:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class PlanCheck:
    """The plan's hard-case check (job.json ``backend_check``, made by ``tokenizer.plan_check``): who was
    compared, on what, and how it went."""

    candidate: str
    reference: str
    tokenizer_fingerprint: str
    allow_special_tokens: bool
    load_dependent: bool
    hard_cases: int
    passed: bool
    reason: str | None = None
    mismatch: Mismatch | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate": self.candidate, "reference": self.reference,
                               "tokenizer_fingerprint": self.tokenizer_fingerprint,
                               "allow_special_tokens": self.allow_special_tokens, "load_dependent": self.load_dependent,
                               "hard_cases": self.hard_cases, "passed": self.passed}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.mismatch is not None:
            out["mismatch"] = self.mismatch.to_dict()
        return out

    @classmethod
    def parse(cls, f: Fields) -> PlanCheck:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class BackendRecord:
    """Which backend wrote the shard (sidecar ``backend``): its name and version, the ``--backend`` asked
    for, the check that let a fast backend write, and why ``auto`` fell back to ``hf`` when it did."""

    name: str | None
    version: str | None = None
    requested: str | None = None
    check: CheckRecord | None = None
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.version is not None:
            out["version"] = self.version
        out["requested"] = self.requested
        out["check"] = None if self.check is None else self.check.to_dict()
        if self.fallback_reason is not None:
            out["fallback_reason"] = self.fallback_reason
        return out

    @classmethod
    def parse(cls, f: Fields) -> BackendRecord:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class RemoteReads:
    """What reading a task's remote inputs cost (sidecar ``stats.remote``): the requests sent, the retries
    after transient errors among them, and the body bytes received."""

    requests: int
    retries: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def parse(cls, f: Fields) -> RemoteReads:
        return record(cls, f)


@dataclass(frozen=True)
class TaskStats:
    """What the task cost and where it ran (sidecar ``stats``)."""

    elapsed_s: float | None = None
    tokens_per_s: float | None = None
    threads: int | None = None
    peak_rss_bytes: int | None = None
    host: str | None = None
    slurm_job: str | None = None
    remote: RemoteReads | None = None       # only a task that read remote inputs has it

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "remote"}
        if self.remote is not None:
            out["remote"] = self.remote.to_dict()
        return out

    @classmethod
    def parse(cls, f: Fields) -> TaskStats:
        return record(cls, f, defaults=True)
