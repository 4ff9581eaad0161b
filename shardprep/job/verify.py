"""``verify``: re-hash and re-parse every shard of an output against index.json and its sidecar.

Independent of how the shards were produced: it trusts nothing but the bytes, so it is the check to run
after copying a dataset between file systems or buckets.  One path for every location (a directory, an
``s3://`` prefix, any URL fsspec knows), through the location's ``Store``: the same checks, the same
problems and the same exit code for a local output and for its copy in a bucket.  Each shard is read once,
front to back in large ranged reads, and both hashed and walked as a tar on the way.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from shardprep.errors import ConfigError, IncompleteError, InputDataError, RecordError, ShardprepError
from shardprep.job.finalize import check_against_plan
from shardprep.shard.format import INDEX_FILE
from shardprep.shard.index import Index, IndexShard, sidecar_mismatches
from shardprep.shard.reader import walk_tar
from shardprep.shard.sidecar import ChunkTable, Sidecar
from shardprep.storage.locations import StorageOptions, join, store_for
from shardprep.storage.store import HashingSource, SourceFile, Store

log = logging.getLogger(__name__)

@dataclass
class ShardCheck:
    name: str
    problems: list[str]


@dataclass
class Output:
    """An output being verified: where it is, the store that reads it, its index and its files' sizes."""

    root: str
    store: Store
    index: Index
    sizes: Mapping[str, int] = field(default_factory=dict)

    def location(self, name: str) -> str:
        return join(self.root, name)


def check_shard(out: Output, entry: IndexShard) -> ShardCheck:
    """All problems of one shard (empty list: good)."""
    size = out.sizes.get(entry.name)
    if size is None:
        return ShardCheck(entry.name, ["missing"])
    problems = [] if size == entry.bytes else [f"size {size} != index {entry.bytes}"]
    sidecar, unreadable = _read_sidecar(out, entry)
    try:
        digest, found = _read_shard(out, entry, size, sidecar)
    except FileNotFoundError:
        return ShardCheck(entry.name, ["missing"])
    if digest != entry.sha256:
        problems.append("sha256 differs from index")
    if sidecar is None:
        return ShardCheck(entry.name, problems + [f"sidecar unreadable: {unreadable}"])
    problems += [f"sidecar {key} {got!r} != index {want!r}" for key, got, want in
                 sidecar_mismatches(out.index, entry, sidecar)]
    return ShardCheck(entry.name, problems + found + _origins_problems(sidecar))


def _origins_problems(sidecar: Sidecar) -> list[str]:
    """The sidecar's document origins decoded and checked (one per document, inputs among the task's)."""
    try:
        sidecar.origins     # noqa: B018 - decoded on first use
    except RecordError as e:
        return [f"sidecar origins unreadable: {e}"]
    return []


def _read_sidecar(out: Output, entry: IndexShard) -> tuple[Sidecar | None, str]:
    where = out.location(entry.sidecar)
    try:
        return Sidecar.parse(out.store.read_bytes(where), where), ""
    except FileNotFoundError:
        return None, f"{where}: no such file"
    except (OSError, RecordError) as e:
        return None, str(e)


def _read_shard(out: Output, entry: IndexShard, size: int, sidecar: Sidecar | None) -> tuple[str, list[str]]:
    """(sha256, problems of the tar against the sidecar) from one front-to-back read of the shard."""
    where = out.location(entry.name)
    problems: list[str] = []
    with contextlib.closing(HashingSource(out.store.open(where), size)) as src:
        try:
            if sidecar is not None:
                docs, tokens, trained = _check_samples(where, SourceFile(src, size), sidecar.chunks,
                                                       out.index.tokenizer.vocab_size, problems)
                if docs != entry.documents or tokens != entry.tokens:
                    problems.append(f"counts {docs} docs/{tokens} tokens != index {entry.documents}/{entry.tokens}")
                if sidecar.trained_tokens is not None and trained != sidecar.trained_tokens:
                    problems.append(f"trained ranges hold {trained} tokens, the sidecar says {sidecar.trained_tokens}")
        except (ShardprepError, FileNotFoundError):   # the store failed after its retries, or the shard went
            raise
        except Exception as e:      # tarfile raises several types on truncated or corrupt archives
            problems.append(f"cannot parse: {e}")
        try:
            return src.sha256(), problems
        except FileNotFoundError:
            raise
        except (EOFError, OSError):
            return "unreadable", problems      # shorter than listed: it cannot match its index anyway


def _check_samples(where: str, stream: io.BufferedIOBase, table: ChunkTable, vocab_size: int,
                   problems: list[str]) -> tuple[int, int, int]:
    """Walk the tar against the chunk table, appending problems; return the documents, tokens and trained
    tokens seen (a chat shard's trained ranges are checked against their documents as they are parsed)."""
    docs = tokens = trained = 0
    for i, sample in enumerate(walk_tar(where, stream)):
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
        if (sample.trained is not None) != table.chat:
            problems.append(f"sample {sample.key}: {'no' if table.chat else 'a'} trained ranges member, but the "
                            f"sidecar's chunk table {'has' if table.chat else 'has no'} trained ranges")
        elif sample.trained is not None:
            trained += sample.trained.trained_tokens()
        docs += int(lens.size)
        tokens += int(sample.tokens.size)
    return docs, tokens, trained


def _read_index(root: str, store: Store) -> Index:
    """``root/index.json``; a missing, torn or foreign index is one IncompleteError naming the file and the
    field (exit 5: the output does not verify), never a traceback; so is one whose entries contradict its
    totals or the plan beside it (``IndexContractError``: ``Index.check``, ``job.finalize.check_against_plan``)."""
    where = join(root, INDEX_FILE)
    try:
        data = store.read_bytes(where)
    except NotADirectoryError:
        raise ConfigError(f"{root} is a file, not an output directory") from None
    except FileNotFoundError:
        raise IncompleteError(f"{root} has no {INDEX_FILE}", hint="run `shardprep finalize` first") from None
    hint = f"rewrite it with `shardprep finalize {root}`"
    try:
        index = Index.parse(data, where)
    except InputDataError as e:
        raise IncompleteError(str(e.args[0]), hint=hint) from None
    check_against_plan(index, root, store.read_bytes)
    return index


def open_output(output: str | Path, storage: StorageOptions | None = None, *, index: Index | None = None) -> Output:
    """An output to check: its store, its index (checked: ``IncompleteError`` when missing, torn or not
    the finalized dataset; ``index``: one already read and checked, as ``repair`` rebuilds it) and one listing
    of its files' sizes (``verify``, ``upload``; ``repair`` checks the shards it rebuilds with it)."""
    root = str(output)
    store = store_for(root, storage)
    out = Output(root, store, index or _read_index(root, store))
    out.sizes = store.sizes(root)       # one listing for every shard's size
    return out


def verify(output: str | Path, *, workers: int = 4, storage: StorageOptions | None = None) -> list[ShardCheck]:
    """Check every shard listed in index.json at ``output`` (a directory or a URL); return the bad ones
    (empty list: all good).  ``storage``: how to reach a remote output (default: the environment's)."""
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers {workers!r} is invalid: must be at least 1")
    return verify_output(open_output(output, storage), workers=workers)


def verify_output(out: Output, *, workers: int = 4) -> list[ShardCheck]:
    """``verify`` of an output already opened (``upload`` notes what it read first)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        checks = list(pool.map(lambda e: check_shard(out, e), out.index.shards))
    _warn_unlisted(out)
    return [c for c in checks if c.problems]


def _warn_unlisted(out: Output) -> None:
    listed = {e.name for e in out.index.shards}
    try:
        extra = sorted(n for n in out.sizes if fnmatch.fnmatch(n, "shard-*.tar") and n not in listed)
    except TypeError:       # a location that cannot be listed (HTTP): sizes are looked up by name only
        return
    if extra:
        log.warning("shards not listed in the index (ignored): %s", ", ".join(extra[:5]))
