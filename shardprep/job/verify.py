"""``verify``: re-hash and re-parse every shard against index.json and its sidecar.

Independent of how the shards were produced: it trusts nothing but the bytes, so it is the check to run
after copying a dataset between file systems or buckets.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson

from shardprep.errors import ConfigError, IncompleteError, InputDataError
from shardprep.loader.index import ShardEntry, read_index
from shardprep.storage.atomic import sha256_file
from shardprep.shard.format import INDEX_FILE
from shardprep.shard.reader import walk_tar

log = logging.getLogger(__name__)


@dataclass
class ShardCheck:
    name: str
    problems: list[str]


def check_shard(output: Path, entry: ShardEntry, vocab_size: int) -> ShardCheck:
    """All problems of one shard (empty list: good)."""
    path = output / entry.name
    problems: list[str] = []
    if not path.is_file():
        return ShardCheck(entry.name, ["missing"])
    size = path.stat().st_size
    if size != entry.bytes:
        problems.append(f"size {size} != index {entry.bytes}")
    digest = sha256_file(path)
    if digest != entry.sha256:
        problems.append("sha256 differs from index")
    try:
        sidecar = orjson.loads((output / entry.sidecar).read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        return ShardCheck(entry.name, problems + [f"sidecar unreadable: {e}"])
    table = sidecar["chunks"]
    docs = tokens = 0
    try:
        for i, sample in enumerate(walk_tar(path)):
            if i >= len(table["key"]):
                problems.append(f"sample {sample.key} not in the sidecar")
                break
            if sample.key != table["key"][i] or sample.tokens_offset != table["tokens_offset"][i]:
                problems.append(f"sample {i} ({sample.key}) does not match the sidecar's chunk table")
            if sample.tokens is None or sample.tokens.size != table["tokens"][i]:
                problems.append(f"sample {sample.key}: token count differs from the sidecar")
                continue
            lens = sample.lengths
            if int(lens.sum()) != sample.tokens.size or lens.size != table["docs"][i]:
                problems.append(f"sample {sample.key}: document lengths do not add up")
            if sample.tokens.size and int(sample.tokens.max()) >= vocab_size:
                problems.append(f"sample {sample.key}: token id {int(sample.tokens.max())} >= vocab size {vocab_size}")
            docs += int(lens.size)
            tokens += int(sample.tokens.size)
    except Exception as e:  # tarfile raises several types on truncated or corrupt archives
        problems.append(f"cannot parse: {e}")
    else:
        if docs != entry.documents or tokens != entry.tokens:
            problems.append(f"counts {docs} docs/{tokens} tokens != index {entry.documents}/{entry.tokens}")
    return ShardCheck(entry.name, problems)


def _read_index(output: Path) -> tuple[list[ShardEntry], int]:
    """(shards, vocab size) of ``output/index.json``; a torn or foreign index is one IncompleteError
    naming the file (exit 5: the output does not verify), never a traceback."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output} is a file, not an output directory")
    if not (output / INDEX_FILE).exists():
        raise IncompleteError(f"{output} has no {INDEX_FILE}", hint="run `shardprep finalize` first")
    try:
        raw, shards = read_index(str(output))
    except InputDataError as e:
        raise IncompleteError(str(e.args[0]), hint=f"rewrite it with `shardprep finalize {output}`") from None
    tok = raw.get("tokenizer")
    vocab = tok.get("vocab_size") if isinstance(tok, dict) else None
    if not isinstance(vocab, int) or vocab < 1:
        raise IncompleteError(f"{output / INDEX_FILE}: tokenizer.vocab_size is {vocab!r}, not a positive integer",
                              hint=f"rewrite it with `shardprep finalize {output}`")
    return shards, vocab


def verify(output: Path, *, workers: int = 4) -> list[ShardCheck]:
    """Check every shard listed in index.json; return the bad ones (empty list: all good)."""
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers {workers!r} is invalid: must be at least 1")
    output = Path(output)
    shards, vocab = _read_index(output)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        checks = list(pool.map(lambda e: check_shard(output, e, vocab), shards))
    listed = {e.name for e in shards}
    extra = sorted(p.name for p in output.glob("shard-*.tar") if p.name not in listed)
    if extra:
        log.warning("shards not listed in the index (ignored): %s", ", ".join(extra[:5]))
    return [c for c in checks if c.problems]
