"""``shardprep inspect``: summarise one shard and decode a few documents."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from shardprep.cli.args import count_arg
from shardprep.errors import InputDataError, TokenizerError
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.locations import is_url
from shardprep.shard.format import TOKENIZER_FILE
from shardprep.shard.reader import walk_tar

NAME = "inspect"
HELP = "print a shard's summary and decode its first documents"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shard", metavar="SHARD", help="path or URL (s3://, gs://, az://, https://, hf://...) of "
                   "shard-NNNNN.tar")
    p.add_argument("--decode", type=count_arg(0), default=0, metavar="N", help="decode and print the first N documents")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json for decoding (default: the frozen one beside the shard)")
    p.add_argument("--max-chars", type=count_arg(1), default=300, help="truncate each decoded document to this many characters")


def run(args: argparse.Namespace) -> int:
    if is_url(args.shard):
        from shardprep.cli._remote import inspect_remote
        return inspect_remote(args)
    path = Path(args.shard)
    if not path.is_file():
        raise InputDataError(f"shard {path} does not exist")
    decoder = _decoder(path, args.tokenizer) if args.decode else None
    sidecar_path = path.with_suffix(".json")
    sidecar = Sidecar.parse(sidecar_path.read_bytes(), sidecar_path) if sidecar_path.is_file() else None
    docs: list[np.ndarray] = []
    samples = n_docs = n_tokens = 0
    try:
        for s in walk_tar(path):
            samples += 1
            n_docs += int(s.lengths.size)
            n_tokens += int(s.tokens.size)
            if len(docs) < args.decode:
                docs.extend(s.documents()[: args.decode - len(docs)])
    except Exception as e:
        raise InputDataError(f"{path}: not a readable shard: {e}") from None
    size = path.stat().st_size
    print(f"{path}: {size:,} bytes, {samples} sample(s), {n_docs:,} documents, {n_tokens:,} tokens")
    if sidecar:
        print_sidecar(sidecar, size, n_tokens)
    if docs:
        print_documents(docs, decoder, args.max_chars)
    return 0


def _decoder(shard: Path, given: str | None) -> Any:
    """The tokenizer to decode with (``--tokenizer``, else the plan's frozen copy beside the shard), checked
    before the shard is read: a shard copied on its own has no tokenizer.json next to it."""
    from tokenizers import Tokenizer

    path = Path(given) if given else shard.parent / TOKENIZER_FILE
    if not path.is_file():
        where = "" if given else f" (the frozen {TOKENIZER_FILE} of the plan is not beside the shard)"
        raise TokenizerError(f"cannot decode: {path} does not exist{where}",
                             hint="pass the tokenizer.json the shard was made with: --tokenizer PATH")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or foreign JSON
        raise TokenizerError(f"cannot decode: {path} is not a tokenizer.json ({e})") from None


def print_sidecar(sidecar: Sidecar, size: int, n_tokens: int) -> None:
    """Layout, size ratio, checksum, backend and skipped input of a shard, from its sidecar."""
    itemsize = 2 if sidecar.dtype == "uint16" else 4
    print(f"  layout {sidecar.layout}, dtype {sidecar.dtype}, {size / max(1, n_tokens * itemsize):.3f}x raw "
          f"token bytes, sha256 {sidecar.sha256[:16]}..., backend {sidecar.backend.get('name')}")
    skipped = {k: v for k, v in sidecar.skipped.items() if v}
    print(f"  skipped: {skipped or 'none'}")
    for ex in sidecar.skipped_examples[:5]:
        print(f"    {ex['reason']}: {ex['file']}:{ex['line'] if ex['line'] is not None else '@' + str(ex.get('byte'))}")


def print_documents(docs: list[np.ndarray], tok: Any, max_chars: int) -> None:
    """Each document decoded with ``tok`` (a ``tokenizers.Tokenizer``), cut at ``max_chars`` characters."""
    for i, d in enumerate(docs):
        text = tok.decode(d.tolist(), skip_special_tokens=False)
        if len(text) > max_chars:
            text = text[:max_chars] + "..."
        print(f"--- document {i} ({d.size} tokens)\n{text}")
