"""Shared pieces of the chat job tests (``submit --chat`` through the real CLI): input files in every
format a chat job reads, the conversations and trained ranges read back from the shards, and the chat
core's own answer (``ChatEncoder``) on the same conversations, to compare them with."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from chat_cases import CONVERSATIONS, directory_key, tokenizer_dir
from helpers import run_cli

SIMPLE = ("system-multi-turn", "no-system", "unicode", "think-in-content")   # plain role/content messages


def records(count: int, names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """``count`` records ``{"messages": [...]}`` cycling through the shared conversations, each made
    distinct (its index in the first user turn), so order and loss are visible."""
    chosen = [CONVERSATIONS[n] for n in (names or tuple(CONVERSATIONS))]
    out = []
    for i in range(count):
        messages = json.loads(json.dumps(chosen[i % len(chosen)]))
        for m in messages:
            if m["role"] == "user" and isinstance(m["content"], str):
                m["content"] = f"[{i}] {m['content']}"
                break
        out.append({"messages": messages})
    return out


def write_jsonl(path: Path, rows: list[Any], lines: list[str] | None = None) -> Path:
    """One JSON line per row (``lines``: raw text lines appended as they are); gzip/zstd by the suffix."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "".join(x + "\n" for x in lines or [])
    data = text.encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data)
    elif path.suffix == ".zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    return path


def write_hf_dataset(path: Path, rows: list[dict[str, Any]]) -> Path:
    import datasets  # type: ignore[import-untyped]  # no stubs

    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def phi3_dir(tmp: Path, template_text: str | None = None) -> Path:
    """The Phi-3 tokenizer with its own template (or ``template_text``) in a tokenizer_config.json."""
    return tokenizer_dir(tmp, "phi-3", template_text)


def submit_chat(inputs: Path | list[Path], out: Path, tok: Path, *extra: str | Path,
                check: bool | int = True) -> subprocess.CompletedProcess:
    ins = inputs if isinstance(inputs, list) else [inputs]
    args: list[str | Path] = ["submit", "--chat", "-o", out, "-t", tok, "--no-progress"]
    for i in ins:
        args += ["-i", i]
    return run_cli(*args, *extra, check=check)


def sidecars(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("shard-*.json"))]


def shard_conversations(out: Path) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Every document of a finished chat output in index order: its ids and its trained ranges."""
    from shardprep.shard.index import read_index
    from shardprep.shard.reader import read_chunk, read_trained, split_docs
    from shardprep.shard.sidecar import Sidecar
    from shardprep.storage.local import LocalSource

    docs: list[tuple[list[int], list[tuple[int, int]]]] = []
    for entry in read_index(out).shards:
        sidecar = Sidecar.parse((out / entry.sidecar).read_bytes(), out / entry.sidecar)
        src = LocalSource(out / entry.name)
        try:
            for chunk in sidecar.chunks.chunks():
                tokens, lengths = read_chunk(src, chunk, sidecar.dtype)
                trained = read_trained(src, chunk, lengths)
                assert trained is not None, f"{entry.name}: chunk {chunk.key} has no trained ranges"
                bounds = np.concatenate([[0], np.cumsum(trained.counts)])
                for d, ids in enumerate(split_docs(tokens, lengths)):
                    rows = trained.ranges[int(bounds[d]):int(bounds[d + 1])]
                    docs.append((ids.tolist(), [(int(a), int(b)) for a, b in rows]))
        finally:
            src.close()
    return docs


# One ``ChatEncoder`` per tokenizer, tokenizer directory contents, template and options: building one (the
# tokenizer, its byte table, the compiled template) takes half a second, and a module compares many jobs
# against the same few.  The key holds everything the encoder is built from (a directory rewritten with
# another template gets its own; the same files in another tmp directory share it).
_ENCODERS: dict[tuple, Any] = {}


def _encoder(tok_dir: Path, template: Path | None, mode: str, thinking: bool) -> Any:
    from chat_cases import chat_tokenizer

    from shardprep.chat import ChatEncoder, load_chat_template

    return ChatEncoder(template=load_chat_template(tok_dir, template), mode=mode, thinking=thinking,
                       **chat_tokenizer(tok_dir / "tokenizer.json"))


def core_encoded(tok_dir: Path, conversations: list[list[dict]], *, template: Path | None = None,
                 mode: str = "assistant", thinking: bool = True) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """The chat core's ids and trained ranges for ``conversations`` (all accepted by the template)."""
    from shardprep.chat import EncodedConversation

    key = (directory_key(tok_dir), str(template) if template else None, mode, thinking)
    encoder = _ENCODERS.get(key)
    if encoder is None:
        encoder = _ENCODERS[key] = _encoder(tok_dir, template, mode, thinking)
    out = []
    for result in encoder.encode(conversations):
        assert isinstance(result, EncodedConversation), result
        out.append((result.ids.tolist(), [(int(a), int(b)) for a, b in result.trained]))
    return out


def trained_mask(ranges: list[tuple[int, int]], length: int) -> list[int]:
    mask = [0] * length
    for a, b in ranges:
        mask[a:b] = [1] * (b - a)
    return mask
