"""``shardprep inspect``: summarise one shard and decode a few documents, at any location.

One path for a local file and a URL: the summary comes from the shard's sidecar, and only the byte ranges
of the documents decoded are read; a shard without a sidecar (copied on its own) is walked as a tar.  Each
decoded document names where it came from (its input, byte offset or row, and line) when the sidecar
records it (format 3, ``job.sources.shard_origin``: the path ``trace`` reads it by too).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from shardprep.cli._s3 import add_s3_arguments, storage_from_args
from shardprep.cli.args import count_arg
from shardprep.errors import IncompleteError, InputDataError, ShardprepError, TokenizerError
from shardprep.job.sources import ShardOrigin, shard_origin
from shardprep.shard.format import TOKENIZER_FILE
from shardprep.shard.reader import read_chunk, read_trained, split_docs, walk_tar
from shardprep.shard.sidecar import Sidecar
from shardprep.shard.trained import Trained
from shardprep.storage.locations import join, split, store_for
from shardprep.storage.store import SourceFile, Store
from shardprep.tokenizer.parsed import shared_tokenizer

NAME = "inspect"
HELP = "print a shard's summary and decode its first documents"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shard", metavar="SHARD", help="path or URL (s3://, gs://, az://, https://, hf://...) of "
                   "shard-NNNNN.tar")
    p.add_argument("--decode", type=count_arg(0), default=0, metavar="N", help="decode and print the first N documents")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json for decoding (default: the frozen one beside the shard)")
    p.add_argument("--max-chars", type=count_arg(1), default=300, help="truncate each decoded document to this many characters")
    add_s3_arguments(p)


def run(args: argparse.Namespace) -> int:
    shard = str(args.shard)
    store = store_for(shard, storage_from_args(args))
    parent, name = split(shard)
    try:
        size = store.sizes(parent).get(name)
    except (FileNotFoundError, NotADirectoryError):
        size = None
    if size is None:
        raise InputDataError(f"shard {shard} does not exist")
    decoder = _decoder(store, parent, args.tokenizer) if args.decode else None
    ids = IdCheck(shard, decoder)
    sidecar = _sidecar(store, shard)
    if sidecar is None:       # the tar itself, read front to back (the whole shard)
        samples, n_docs, n_tokens, docs = _walk(store, shard, size, args.decode, ids)
        print(f"{shard}: {size:,} bytes, {samples} sample(s), {n_docs:,} documents, {n_tokens:,} tokens")
    else:                     # the sidecar, and only the byte ranges of the documents decoded
        docs = _first_documents(store, shard, sidecar, args.decode, ids)
        print(f"{shard}: {sidecar.bytes:,} bytes, {sidecar.samples} sample(s), {sidecar.documents:,} documents, "
              f"{sidecar.tokens:,} tokens")
        print_sidecar(sidecar, sidecar.bytes, sidecar.tokens)
    if docs:
        origins = [shard_origin(sidecar, i) for i in range(len(docs))] if sidecar is not None else None
        print_documents(docs, decoder, args.max_chars, origins)
    return 0


def _sidecar(store: Store, shard: str) -> Sidecar | None:
    """The sidecar beside ``shard`` (``shard-NNNNN.json``), or None when there is none."""
    where = shard[:-len(".tar")] + ".json" if shard.endswith(".tar") else shard + ".json"
    try:
        return Sidecar.parse(store.read_bytes(where), where)
    except FileNotFoundError:
        return None


class IdCheck:
    """The loader's token id check (``loader.reader.check_token_ids``) on every sample whose documents are
    decoded, against the vocabulary of the tokenizer decoding them.

    Why: ``tokenizers`` decodes an id past its vocabulary as nothing, so a corrupt shard (a flipped byte)
    used to print as clean text.  Such a shard is refused as ``verify`` refuses it: one line naming the
    shard, the sample and the id, exit 5."""

    def __init__(self, shard: str, decoder: Any):
        self.shard = shard
        vocab = decoder.get_vocab(with_added_tokens=True) if decoder is not None else None
        self.vocab_size = max(vocab.values()) + 1 if vocab else None     # as tokenizer.load counts it

    def __call__(self, tokens: np.ndarray, key: str) -> None:
        from shardprep.loader.reader import check_token_ids

        try:
            check_token_ids(tokens, self.vocab_size, self.shard, key)
        except InputDataError as e:
            raise IncompleteError(e.args[0], hint=e.hint) from None


Doc = tuple[np.ndarray, "np.ndarray | None"]     # a document's ids, and a chat document's trained mask


def _with_masks(tokens: np.ndarray, lens: np.ndarray, trained: Trained | None) -> list[Doc]:
    masks = split_docs(trained.mask(lens), lens) if trained is not None else [None] * len(lens)
    return list(zip(split_docs(tokens, lens), masks))


def _first_documents(store: Store, shard: str, sidecar: Sidecar, n: int, ids: IdCheck) -> list[Doc]:
    """The first ``n`` documents, each sample read with the chunk table's ranged reads (and its ids checked)."""
    docs: list[Doc] = []
    if n:
        with contextlib.closing(store.open(shard)) as src:
            for chunk in sidecar.chunks.chunks():
                if len(docs) >= n:
                    break
                tokens, lens = read_chunk(src, chunk, sidecar.dtype)
                ids(tokens, chunk.key)
                docs.extend(_with_masks(tokens, lens, read_trained(src, chunk, lens))[: n - len(docs)])
    return docs


def _walk(store: Store, shard: str, size: int, n: int, ids: IdCheck) -> tuple[int, int, int, list[Doc]]:
    """(samples, documents, tokens, the first ``n`` documents) of a shard without a sidecar: its tar walked."""
    docs: list[Doc] = []
    samples = n_docs = n_tokens = 0
    try:
        with contextlib.closing(store.open(shard)) as src:
            for s in walk_tar(shard, SourceFile(src, size)):
                samples += 1
                n_docs += int(s.lengths.size)
                n_tokens += int(s.tokens.size)
                if len(docs) < n:
                    ids(s.tokens, s.key)
                    docs.extend(_with_masks(s.tokens, s.lengths, s.trained)[: n - len(docs)])
    except ShardprepError:
        raise
    except Exception as e:
        raise InputDataError(f"{shard}: not a readable shard: {e}") from None
    return samples, n_docs, n_tokens, docs


def _decoder(store: Store, parent: str, given: str | None) -> Any:
    """The tokenizer to decode with (``--tokenizer``, else the plan's frozen copy beside the shard), checked
    before the shard is read: a shard copied on its own has no tokenizer.json next to it."""
    if given:
        path = Path(given)
        if not path.is_file():
            raise TokenizerError(f"cannot decode: {path} does not exist",
                                 hint="pass the tokenizer.json the shard was made with: --tokenizer PATH")
        text, where = path.read_text(encoding="utf-8", errors="replace"), str(path)
    else:
        where = join(parent, TOKENIZER_FILE)
        try:
            text = store.read_bytes(where).decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise TokenizerError(f"cannot decode: {where} does not exist (the frozen {TOKENIZER_FILE} of the plan "
                                 f"is not beside the shard)",
                                 hint="pass the tokenizer.json the shard was made with: --tokenizer PATH") from None
    try:
        return shared_tokenizer(text, match_specials=False)
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or foreign JSON
        raise TokenizerError(f"cannot decode: {where} is not a tokenizer.json ({e})") from None


def print_sidecar(sidecar: Sidecar, size: int, n_tokens: int) -> None:
    """Layout, size ratio, checksum, backend and skipped input of a shard, from its sidecar."""
    itemsize = 2 if sidecar.dtype == "uint16" else 4
    print(f"  layout {sidecar.layout}, dtype {sidecar.dtype}, {size / max(1, n_tokens * itemsize):.3f}x raw "
          f"token bytes, sha256 {sidecar.sha256[:16]}..., backend {sidecar.backend.name}")
    if sidecar.trained_tokens is not None:
        print(f"  chat: {sidecar.documents:,} conversations, {sidecar.trained_tokens:,} of {n_tokens:,} tokens trained "
              f"({sidecar.trained_tokens / max(1, n_tokens):.1%})")
    if sidecar.origins_record is None:
        print(f"  document origins: not recorded (format {sidecar.format_version} shard); the task read: "
              + ", ".join(i.path for i in sidecar.inputs))
    skipped = {k: v for k, v in sidecar.skipped.items() if v}
    print(f"  skipped: {skipped or 'none'}")
    for ex in sidecar.skipped_examples[:5]:
        print(f"    {ex.reason}: {ex.file}:{ex.line if ex.line is not None else '@' + str(ex.byte)}")


TRAINED_OPEN, TRAINED_CLOSE = "\u00ab", "\u00bb"      # around the trained text of a chat document


def print_documents(docs: list[Doc], tok: Any, max_chars: int,
                    origins: list[ShardOrigin | None] | None = None) -> None:
    """Each document decoded with ``tok`` (a ``tokenizers.Tokenizer``), cut at ``max_chars`` characters, after
    its origin where one is given; in a chat document the trained text is between \u00ab and \u00bb, the rest
    (prompts, role headers) is masked."""
    if any(mask is not None for _, mask in docs):
        print(f"(chat: trained text between {TRAINED_OPEN} and {TRAINED_CLOSE}; the rest has no label)")
    for i, (d, mask) in enumerate(docs):
        text = _decoded(tok, d, mask)
        if len(text) > max_chars:
            text = text[:max_chars] + "..."
        trained = "" if mask is None else f", {int(mask.sum())} trained"
        origin = origins[i] if origins else None
        where = "" if origin is None else f" from {origin_text(origin)}"
        print(f"--- document {i} ({d.size} tokens{trained}){where}\n{text}")


def origin_text(origin: ShardOrigin) -> str:
    """``PATH byte B line L`` (``row R`` in a parquet or Arrow input; no line where lines are not counted)."""
    line = "" if origin.line is None else f" line {origin.line}"
    return f"{origin.location} {origin.kind} {origin.offset}{line}"


def _decoded(tok: Any, ids: np.ndarray, mask: np.ndarray | None) -> str:
    if mask is None:
        return str(tok.decode(ids.tolist(), skip_special_tokens=False))
    cuts = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    parts = []
    for seg, m in zip(np.split(ids, cuts), np.split(mask, cuts)):
        text = tok.decode(seg.tolist(), skip_special_tokens=False)
        parts.append(f"{TRAINED_OPEN}{text}{TRAINED_CLOSE}" if m.size and m[0] else text)
    return "".join(parts)
