"""Frozen option objects, validated at construction so a bad value fails before any work starts.

``TokenizeOptions`` is everything that changes the bytes a task writes; it is stored whole in
``job.json`` and hashed into the plan fingerprint.  ``PlanOptions`` only changes how work is split.
Errors name the option (as spelled on the command line), the value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from shardprep.errors import ConfigError
from shardprep.records import OMIT_NONE, Record
from shardprep.shard.format import DEFAULT_CHUNK_TOKENS, LAYOUTS

TXT_MODES = ("line", "paragraph")
TRAIN_ON = ("assistant", "all", "last")    # chat: which tokens carry a label (docs/chat.md)
BACKENDS = ("auto", "hf", "gigatoken")


def _require(cond: bool, option: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{option}={value!r} is invalid: {allowed}")


@dataclass(frozen=True)
class ChatOptions(Record):
    """Chat/SFT data (``--chat``): where the conversation is, the template that renders it (frozen beside
    the plan as ``chat_template.jinja``; its digest here, so a changed one is a different plan) and which
    tokens are trained."""

    template_sha256: str
    template_origin: str                   # where the template came from (for people; not compared)
    messages_field: str | None = None      # None: the first of messages, conversations, prompt+completion
    train_on: str = "assistant"            # assistant turns | all tokens | the last assistant turn
    train_thinking: bool = True            # thinking (<think>...</think>) inside trained turns

    def __post_init__(self) -> None:
        _require(self.train_on in TRAIN_ON, "--train-on", self.train_on, f"one of {TRAIN_ON}")
        _require(self.messages_field is None or bool(self.messages_field), "--messages-field", self.messages_field,
                 "must be a non-empty key")

    @classmethod
    def parse(cls, f: Any) -> "ChatOptions":
        from shardprep.records import record

        return record(cls, f, defaults=True)


@dataclass(frozen=True)
class TokenizeOptions(Record):
    """Every option that affects shard contents (recorded in job.json, part of the fingerprint)."""

    text_field: str = "text"          # jsonl key / parquet column / dataset column holding the text
    txt_mode: str = "line"            # txt: one document per line, or blank-line separated paragraphs
    add_eos: bool = True              # append the EOS id to every document (pretraining default)
    add_bos: bool = False             # prepend the BOS id
    eos_token: str | None = None      # None: the tokenizer's own EOS (error if it has none and add_eos)
    bos_token: str | None = None
    allow_special_tokens: bool = False  # False: "<|endoftext|>" in raw text is encoded as plain text
    strict: bool = False              # fail on the first bad document instead of counting and skipping
    max_doc_bytes: int = 16 << 20     # documents (lines) longer than this are "too_long"
    layout: str = "pack"              # pack (chunks of documents) or doc (one sample per document)
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    backend: str = "auto"             # tokenizer backend: auto | hf | gigatoken (ids identical by contract)
    chat: ChatOptions | None = field(default=None, metadata=OMIT_NONE)   # conversations in, trained ranges out

    def __post_init__(self) -> None:
        _require(bool(self.text_field), "--text-field", self.text_field, "must be a non-empty key")
        _require(self.txt_mode in TXT_MODES, "--txt-mode", self.txt_mode, f"one of {TXT_MODES}")
        _require(self.layout in LAYOUTS, "--layout", self.layout, f"one of {LAYOUTS}")
        _require(self.backend in BACKENDS, "--backend", self.backend, f"one of {BACKENDS}")
        _require(self.max_doc_bytes >= 1, "--max-doc-bytes", self.max_doc_bytes, "must be >= 1")
        _require(self.chunk_tokens >= 1, "--chunk-tokens", self.chunk_tokens, "must be >= 1")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TokenizeOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def content_dict(self) -> dict[str, Any]:
        """The options that determine shard bytes (the backend is excluded: ids are identical by contract)."""
        d = self.to_dict()
        d.pop("backend")
        if self.chat is not None:       # where the template came from does not change a byte; its digest does
            d["chat"] = {k: v for k, v in d["chat"].items() if k != "template_origin"}
        return d


@dataclass(frozen=True)
class PlanOptions:
    """How inputs are split into tasks (``job.sizing``: the default rule and why).

    Neither field set: the planner sizes tasks from the data (small files packed, large files split).
    """

    target_task_bytes: int | None = None   # explicit input bytes per task (pack smaller files, split larger)
    one_file_per_task: bool = False        # the literal shape: one task (and shard) per input file
    parallel_tasks: int | None = None      # tasks that can run at once (default: the executor's CPUs)

    def __post_init__(self) -> None:
        if self.target_task_bytes is not None:
            _require(self.target_task_bytes >= 1, "--target-task-bytes", self.target_task_bytes, "must be >= 1")
        if self.parallel_tasks is not None:
            _require(self.parallel_tasks >= 1, "--parallel-tasks", self.parallel_tasks, "must be >= 1")
        if self.one_file_per_task and self.target_task_bytes is not None:
            raise ConfigError("--one-file-per-task and --target-task-bytes cannot be combined; pick one")


def parse_size(text: str) -> int:
    """Parse ``512M``, ``4G``, ``1048576`` (binary units) into bytes; ConfigError on junk."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if s and s[-1] in mult:
            return int(float(s[:-1]) * mult[s[-1]])
        return int(s)
    except ValueError:
        raise ConfigError(f"invalid size {text!r}: use a number of bytes or a suffix K, M, G, T") from None
