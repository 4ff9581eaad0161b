"""A sidecar's informational records: which backend wrote the shard and how its ids were checked against
``hf``, and what the task cost.

Informational means they differ between two runs of the same plan (versions, timings, hosts) and no
reader decides anything on them; they are typed all the same, so ``report``, ``inspect`` and ``doctor``
read fields, not ``.get("...")`` on dicts whose keys only the writer knew.  The check record is built by
``tokenizer.verify_backend`` and ``tokenizer.backend``; job.json's plan-time check record (``PlanCheck``, made by
``tokenizer.plan_check``) shares its ``Mismatch``.  Serialised in the key order sidecars have
always had; a key whose value is absent is left out, as before (``records.dump``, by each field's metadata).
``SkipExample``, a skipped document's place, is here too: the input readers make it, but it is a sidecar
record, and a reader of sidecars must not load the input readers to parse one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shardprep.records import OMIT_NONE, PRINTABLE, Fields, Record, record


@dataclass(frozen=True)
class Mismatch(Record):
    """The first document whose ids differed: where, and the ids either side of the difference."""

    case: str
    text: str
    token: int
    expected: tuple[int, ...]
    got: tuple[int, ...]

    @classmethod
    def parse(cls, f: Fields) -> Mismatch:
        return cls(f.str("case"), f.str("text"), f.int("token"), f.ints("expected"), f.ints("got"))


@dataclass(frozen=True)
class CheckRecord(Record):
    """The ``auto`` check of a fast backend against ``hf`` (sidecar ``backend.check``; docs/format.md)."""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "candidate", "passed", "reference", "hard_cases", "hard_cases_checked", "sample_documents", "sample_chars",
        "elapsed_s", "spread_documents", "spread_chars", "plan_check_ignored", "reason", "mismatch")

    passed: bool
    candidate: str | None = field(default=None, metadata=OMIT_NONE)
    reference: str | None = field(default=None, metadata=OMIT_NONE)
    hard_cases: int | None = field(default=None, metadata=OMIT_NONE)
    hard_cases_checked: str | None = field(default=None, metadata=OMIT_NONE)       # plan | task
    sample_documents: int | None = field(default=None, metadata=OMIT_NONE)   # evenly spaced, of the first batch
    sample_chars: int | None = field(default=None, metadata=OMIT_NONE)
    elapsed_s: float | None = field(default=None, metadata=OMIT_NONE)
    spread_documents: int | None = field(default=None, metadata=OMIT_NONE)   # from every block, with the ids written
    spread_chars: int | None = field(default=None, metadata=OMIT_NONE)
    plan_check_ignored: str | None = field(default=None, metadata=OMIT_NONE)
    reason: str | None = field(default=None, metadata=OMIT_NONE)
    mismatch: Mismatch | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def parse(cls, f: Fields) -> CheckRecord:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class PlanCheck(Record):
    """The plan's hard-case check (job.json ``backend_check``, made by ``tokenizer.plan_check``): who was
    compared, on what, and how it went."""

    candidate: str
    reference: str
    tokenizer_fingerprint: str
    allow_special_tokens: bool
    load_dependent: bool
    hard_cases: int
    passed: bool
    reason: str | None = field(default=None, metadata=OMIT_NONE)
    mismatch: Mismatch | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def parse(cls, f: Fields) -> PlanCheck:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class BackendRecord(Record):
    """Which backend wrote the shard (sidecar ``backend``): its name and version, the ``--backend`` asked
    for, the check that let a fast backend write, and why ``auto`` fell back to ``hf`` when it did."""

    name: str | None
    version: str | None = field(default=None, metadata=OMIT_NONE)
    requested: str | None = None
    check: CheckRecord | None = None
    fallback_reason: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def parse(cls, f: Fields) -> BackendRecord:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class RemoteReads(Record):
    """What reading a task's remote inputs cost (sidecar ``stats.remote``): the requests sent, the retries
    after transient errors among them, and the body bytes received."""

    requests: int
    retries: int
    bytes: int

    @classmethod
    def parse(cls, f: Fields) -> RemoteReads:
        return record(cls, f)


@dataclass(frozen=True)
class TaskStats(Record):
    """What the task cost and where it ran (sidecar ``stats``)."""

    elapsed_s: float | None = None
    tokens_per_s: float | None = None
    threads: int | None = None
    peak_rss_bytes: int | None = None
    host: str | None = None
    slurm_job: str | None = None
    remote: RemoteReads | None = field(default=None, metadata=OMIT_NONE)   # only a task that read remote inputs

    @classmethod
    def parse(cls, f: Fields) -> TaskStats:
        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class SkipExample(Record):
    """Where a skipped document was (a shard's sidecar keeps the first few): the 1-based line (the row for
    parquet and arrow; None inside a split range, where lines are not counted) or the byte offset."""

    reason: str
    file: str = field(metadata=PRINTABLE)
    line: int | None
    byte: int | None
    detail: str = field(default="", metadata=PRINTABLE)
