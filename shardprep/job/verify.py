"""``verify``: re-hash and re-parse every shard against index.json and its sidecar.

Independent of how the shards were produced: it trusts nothing but the bytes, so it is the check to run
after copying a dataset between file systems or buckets.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from shardprep.errors import ConfigError, IncompleteError, InputDataError, RecordError
from shardprep.shard.sidecar import ChunkTable, Sidecar
from shardprep.shard.index import Index, IndexShard, read_index
from shardprep.shard.format import INDEX_FILE
from shardprep.shard.reader import walk_tar
from shardprep.storage.atomic import sha256_file

log = logging.getLogger(__name__)


@dataclass
class ShardCheck:
    name: str
    problems: list[str]


def check_shard(output: Path, entry: IndexShard, vocab_size: int) -> ShardCheck:
    """All problems of one shard (empty list: good)."""
    path = output / entry.name
    problems: list[str] = []
    if not path.is_file():
        return ShardCheck(entry.name, ["missing"])
    size = path.stat().st_size
    if size != entry.bytes:
        problems.append(f"size {size} != index {entry.bytes}")
    if sha256_file(path) != entry.sha256:
        problems.append("sha256 differs from index")
    sidecar_path = output / entry.sidecar
    try:
        table = Sidecar.parse(sidecar_path.read_bytes(), sidecar_path).chunks
    except (OSError, RecordError) as e:
        return ShardCheck(entry.name, problems + [f"sidecar unreadable: {e}"])
    try:
        docs, tokens = _check_samples(path, table, vocab_size, problems)
    except Exception as e:  # tarfile raises several types on truncated or corrupt archives
        problems.append(f"cannot parse: {e}")
    else:
        if docs != entry.documents or tokens != entry.tokens:
            problems.append(f"counts {docs} docs/{tokens} tokens != index {entry.documents}/{entry.tokens}")
    return ShardCheck(entry.name, problems)


def _check_samples(path: Path, table: ChunkTable, vocab_size: int, problems: list[str]) -> tuple[int, int]:
    """Walk the tar against the chunk table, appending problems; return the documents and tokens seen."""
    docs = tokens = 0
    for i, sample in enumerate(walk_tar(path)):
        if i >= len(table):
            problems.append(f"sample {sample.key} not in the sidecar")
            break
        if sample.key != table.key[i] or sample.tokens_offset != table.tokens_offset[i]:
            problems.append(f"sample {i} ({sample.key}) does not match the sidecar's chunk table")
        if sample.tokens is None or sample.tokens.size != table.tokens[i]:
            problems.append(f"sample {sample.key}: token count differs from the sidecar")
            continue
        lens = sample.lengths
        if int(lens.sum()) != sample.tokens.size or lens.size != table.docs[i]:
            problems.append(f"sample {sample.key}: document lengths do not add up")
        if sample.tokens.size and int(sample.tokens.max()) >= vocab_size:
            problems.append(f"sample {sample.key}: token id {int(sample.tokens.max())} >= vocab size {vocab_size}")
        docs += int(lens.size)
        tokens += int(sample.tokens.size)
    return docs, tokens


def read_output_index(output: Path) -> Index:
    """``output/index.json``; a torn or foreign index is one IncompleteError naming the file and the field
    (exit 5: the output does not verify), never a traceback."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output} is a file, not an output directory")
    if not (output / INDEX_FILE).exists():
        raise IncompleteError(f"{output} has no {INDEX_FILE}", hint="run `shardprep finalize` first")
    try:
        index = read_index(str(output))
    except InputDataError as e:
        raise IncompleteError(str(e.args[0]), hint=f"rewrite it with `shardprep finalize {output}`") from None
    if index.tokenizer.vocab_size < 1:
        raise IncompleteError(f"{output / INDEX_FILE}: tokenizer.vocab_size is {index.tokenizer.vocab_size}, not a "
                              f"positive integer", hint=f"rewrite it with `shardprep finalize {output}`")
    return index


def verify(output: Path, *, workers: int = 4) -> list[ShardCheck]:
    """Check every shard listed in index.json; return the bad ones (empty list: all good)."""
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers {workers!r} is invalid: must be at least 1")
    output = Path(output)
    index = read_output_index(output)
    vocab = index.tokenizer.vocab_size
    with ThreadPoolExecutor(max_workers=workers) as pool:
        checks = list(pool.map(lambda e: check_shard(output, e, vocab), index.shards))
    listed = {e.name for e in index.shards}
    extra = sorted(p.name for p in output.glob("shard-*.tar") if p.name not in listed)
    if extra:
        log.warning("shards not listed in the index (ignored): %s", ", ".join(extra[:5]))
    return [c for c in checks if c.problems]
