"""Names and constants of the on-disk format (docs/format.md is the spec; keep both in step)."""

from __future__ import annotations

import re

FORMAT_VERSION = 1          # shards, sidecars, index.json (and, unchanged since, the plan fingerprint's body)
CHAT_FORMAT_VERSION = 2     # the same, with each chunk's trained ranges (chat/SFT data, shard.trained): a reader
                            # that knows only 1 refuses such a shard instead of training on every token
ORIGINS_FORMAT_VERSION = 3  # what tasks write now: every sidecar has each document's origin (shard.origins),
                            # text and chat alike (a chat shard's chunk table holds trained ranges, as in 2)
FORMAT_VERSIONS = (FORMAT_VERSION, CHAT_FORMAT_VERSION, ORIGINS_FORMAT_VERSION)     # what this shardprep reads
PLAN_FORMAT_VERSION = 3     # job.json + plan/: 3 = always sealed (issue 31); 2 = per-task records in plan/
                            # (issue 16), sealed only by later releases; 1 had them inline
JOB_FILE = "job.json"
PLAN_DIR = "plan"
REPAIR_DIR = "repair"      # `repair` rebuilds shards in .repair.<host>.<pid>.tmp/ (job.repair)
PLAN_RECORDS_FILE = "plan/tasks.jsonl"
PLAN_TABLE_FILE = "plan/tasks.idx"
INDEX_FILE = "index.json"
TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.json"   # a chat job's frozen template and the special tokens it sees
LOG_DIR = "logs"
SHARD_RE = re.compile(r"^shard-(\d{5,})\.tar$")
LAYOUTS = ("pack", "doc")
DEFAULT_CHUNK_TOKENS = 1 << 18

# numpy dtype strings (little-endian), kept as strings so this module does not import numpy (CLI start-up)
DTYPES = {"uint16": "<u2", "uint32": "<u4"}
EXT_FOR_DTYPE = {"uint16": "u16", "uint32": "u32"}
DTYPE_FOR_EXT = {v: k for k, v in EXT_FOR_DTYPE.items()}


def format_version(chat: bool, *, origins: bool = True) -> int:
    """The format version a task writes: 3 (each document's origin in the sidecar), chat data or not; without
    ``origins`` (a synthesized shard) 2 for chat data, else 1.  The shard's own bytes are those of 1 (2)."""
    if origins:
        return ORIGINS_FORMAT_VERSION
    return CHAT_FORMAT_VERSION if chat else FORMAT_VERSION


def chat_in_version(version: int) -> bool | None:
    """Whether shards of ``version`` are chat data: 1 never, 2 always, None from 3 on (their chunk table,
    or index.json's ``totals.trained_tokens``, says)."""
    return {FORMAT_VERSION: False, CHAT_FORMAT_VERSION: True}.get(version)


def has_origins(version: int) -> bool:
    """Whether sidecars of ``version`` hold every document's origin (``origins``, from format 3)."""
    return version >= ORIGINS_FORMAT_VERSION


def shard_name(task: int) -> str:
    """``shard-NNNNN.tar`` for a task index (at least five digits, more when needed)."""
    return f"shard-{task:05d}.tar"


def sidecar_name(task: int) -> str:
    return f"shard-{task:05d}.json"


def shard_names(n: int) -> list[str]:
    """:func:`shard_name` of tasks ``0..n-1`` (index.json's entries are exactly these: a hundred thousand
    are checked on every read, so without a call per name)."""
    return [f"shard-{task:05d}.tar" for task in range(n)]


def sidecar_names(n: int) -> list[str]:
    """:func:`sidecar_name` of tasks ``0..n-1``."""
    return [f"shard-{task:05d}.json" for task in range(n)]


def sample_key(task: int, sample: int) -> str:
    """Sample keys are unique across a dataset and contain no dot (webdataset splits keys at the first dot)."""
    return f"{task:05d}_{sample:09d}"


def dtype_for_vocab(vocab_size: int) -> str:
    """uint16 when every id fits, else uint32."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"
