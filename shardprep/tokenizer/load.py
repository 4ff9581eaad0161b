"""Resolve a tokenizer spec (``tokenizer.json``, a directory, or a Hugging Face hub id) to a frozen,
fingerprinted fast tokenizer.

Why freeze: array tasks run on compute nodes, often without network, possibly days after planning.
``plan`` serialises the Rust tokenizer to ``<output>/tokenizer.json`` once; every task loads that file,
so all tasks use the identical tokenizer and none touches the hub.  The fingerprint is the sha256 of that
serialisation plus the special-token choices, so "same fingerprint" means "same ids".
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from shardprep._extras import require
from shardprep.errors import TokenizerError
from shardprep.records import Record
from shardprep.shard.format import dtype_for_vocab
from shardprep.tokenizer.parsed import ParsedCache, shared_tokenizer, tokenizer_file
from shardprep.tokenizer.specials import KINDS, SpecialChoice, choose_specials, special_from_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenizerInfo(Record):
    """What job.json and index.json record about the tokenizer."""

    source: str
    fingerprint: str
    vocab_size: int
    dtype: str
    eos_token: str | None
    eos_id: int | None
    bos_token: str | None
    bos_id: int | None
    pad_token: str | None
    pad_id: int | None


@dataclass(frozen=True)
class ResolvedTokenizer:
    json: str            # Rust tokenizer serialisation (what tasks load)
    info: TokenizerInfo
    # how each of eos/bos/pad was chosen (printed by plan and doctor, never stored: see specials.py)
    choices: dict[str, SpecialChoice] = field(default_factory=dict)
    # the process's shared tokenizers.Tokenizer of json (tokenizer.parsed: read it, never change its settings)
    loaded: Any = field(default=None, compare=False, repr=False)
    _references: dict[bool, Any] = field(default_factory=dict, compare=False, repr=False)

    def reference(self, allow_special_tokens: bool) -> Any:
        """The ``hf`` backend of this tokenizer, parsed once per plan however many planning steps encode
        with it (the shard-ratio sample, the plan-time check): a 128k vocabulary takes ~0.3 s to parse."""
        if allow_special_tokens not in self._references:
            from shardprep.tokenizer.backend import HFBackend

            self._references[allow_special_tokens] = HFBackend(self.json, allow_special_tokens=allow_special_tokens)
        return self._references[allow_special_tokens]

    def describe_specials(self) -> dict[str, str]:
        """``{kind: line}``: token, id and why, e.g. ``EOS '</s>' = 1 (post_processor: ...)``."""
        ids = {"eos": self.info.eos_id, "bos": self.info.bos_id, "pad": self.info.pad_id}
        return {k: self.choices[k].describe(k, ids[k]) for k in KINDS if k in self.choices}


def _load_json_file(path: Path) -> tuple[str, Any]:
    """(the Rust serialisation, the process's shared ``tokenizers.Tokenizer``) of a tokenizer.json."""
    try:
        return tokenizer_file(path)
    except Exception as e:
        raise TokenizerError(
            f"{path} is not a fast-tokenizer JSON file ({e})",
            hint="pass a tokenizer.json saved by the `tokenizers` library, or the directory holding it",
        ) from None


# What transformers can build a fast tokenizer from, in a directory without tokenizer.json.
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
                   "vocab.json", "merges.txt", "vocab.txt", "special_tokens_map.json")
HUB_PROBE_S = 3.0


def _require_tokenizer_files(directory: Path) -> None:
    """A directory without tokenizer.json must hold something transformers can read: say what it lacks
    (transformers' own message lists the backends it tried, an empty list for an empty directory)."""
    if any((directory / name).is_file() for name in TOKENIZER_FILES):
        return
    held = sorted(p.name for p in directory.iterdir())[:8]
    raise TokenizerError(f"tokenizer directory {directory} holds no tokenizer files: no tokenizer.json, and none of "
                         f"{', '.join(TOKENIZER_FILES)} ({'it holds: ' + ', '.join(held) if held else 'it is empty'})",
                         hint="pass the directory a tokenizer was saved into (save_pretrained), or its tokenizer.json")


def _hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached (one TCP connection, ``HUB_PROBE_S`` at most), or None.

    Why: without network the hub library retries each request with back-off, ~40 s before the error.  A
    proxy in the environment is the proxy's business: not probed (None)."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                       "all_proxy")):
        return None
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_S).close()
    except OSError as e:
        return f"{url.scheme}://{url.netloc} cannot be reached ({e.strerror or e})"
    return None


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _load_with_transformers(spec: str) -> tuple[str, dict[str, str], Any]:
    hub_id = not Path(spec).is_dir()
    unreachable = _hub_unreachable() if hub_id and not _hub_offline() else None
    AutoTokenizer = require("transformers", feature=f"loading tokenizer {spec!r} (a hub id, or a directory "
                            "without tokenizer.json)").AutoTokenizer
    try:    # unreachable: the local cache only (what the hub library falls back to after its retries)
        tok = AutoTokenizer.from_pretrained(spec, use_fast=True, local_files_only=bool(unreachable))
    except Exception as e:
        if unreachable:
            raise TokenizerError(f"cannot load tokenizer {spec!r}: it is not in the local Hugging Face cache and "
                                 f"the hub {unreachable}",
                                 hint="give a local tokenizer.json or directory (save one where the hub is "
                                      "reachable: AutoTokenizer.from_pretrained(ID).save_pretrained(DIR)), or set "
                                      "HF_ENDPOINT / HTTPS_PROXY") from None
        offline = _hub_offline()
        raise TokenizerError(
            f"cannot load tokenizer {spec!r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            hint="give a local tokenizer.json or directory" + ("" if offline else ", or check network/HF_TOKEN"),
        ) from None
    if not getattr(tok, "is_fast", False):
        raise TokenizerError(
            f"tokenizer {spec!r} is a slow (Python) tokenizer ({type(tok).__name__}); shardprep only runs fast "
            f"(Rust) tokenizers",
            hint="convert it once with transformers (AutoTokenizer.from_pretrained(..., use_fast=True)"
                 ".save_pretrained(dir)) or supply a tokenizer.json",
        )
    special = {k: getattr(tok, f"{k}_token") for k in KINDS if getattr(tok, f"{k}_token", None)}
    text = tok.backend_tokenizer.to_str()
    return text, special, shared_tokenizer(text, match_specials=False, parsed=tok.backend_tokenizer)


def tokenizer_fingerprint(tok_json: str, special: dict[str, str | None]) -> str:
    """sha256 of the frozen serialisation plus the chosen eos/bos/pad strings."""
    h = hashlib.sha256(tok_json.encode("utf-8"))
    h.update(orjson.dumps({k: special.get(k) for k in ("eos", "bos", "pad")}, option=orjson.OPT_SORT_KEYS))
    return h.hexdigest()


def check_frozen_tokenizer(tok_json: str, info: TokenizerInfo, path: object) -> None:
    """Refuse a frozen tokenizer.json that no longer matches the plan's fingerprint."""
    special = {"eos": info.eos_token, "bos": info.bos_token, "pad": info.pad_token}
    if tokenizer_fingerprint(tok_json, special) != info.fingerprint:
        raise TokenizerError(f"{path} was modified after planning (fingerprint mismatch)",
                             hint="re-plan into a new output directory")


def _looks_like_path(spec: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that does not exist is a missing local path."""
    return spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1


def _vocabulary(tok: Any) -> tuple[int, dict[str, bool], Any]:
    """(vocabulary size: the largest id + 1, {added token: special}, the post-processor's state)."""
    vocab = tok.get_vocab(with_added_tokens=True)
    added = {t.content: bool(t.special) for t in tok.get_added_tokens_decoder().values()}
    post = tok.post_processor.__getstate__() if tok.post_processor is not None else None
    return (max(vocab.values()) + 1 if vocab else 0), added, post


# What resolving reads of a vocabulary, by the tokenizer's JSON (tokenizer.parsed): listing 128k ids costs
# ~15 ms, and a process resolves the same tokenizer for plan after plan.
_VOCABULARIES: ParsedCache[tuple[int, dict[str, bool], Any]] = ParsedCache()


def resolve_tokenizer(spec: str, *, eos_token: str | None = None, bos_token: str | None = None) -> ResolvedTokenizer:
    """Load ``spec`` and describe it.  Raises TokenizerError with the spec and a next step on failure."""
    path = Path(spec)
    special: dict[str, str] = {}
    if path.is_file():
        tok_json, tok = _load_json_file(path)
        special = special_from_config(path.parent)
    elif path.is_dir():
        if (path / "tokenizer.json").is_file():
            tok_json, tok = _load_json_file(path / "tokenizer.json")
            special = special_from_config(path)
        else:
            _require_tokenizer_files(path)
            tok_json, special, tok = _load_with_transformers(str(path))
    elif _looks_like_path(spec):
        raise TokenizerError(f"tokenizer {spec} does not exist")
    else:
        tok_json, special, tok = _load_with_transformers(spec)
    vocab_size, added, post = _VOCABULARIES.get(tok_json, lambda: _vocabulary(tok))
    choices = choose_specials({"eos": eos_token, "bos": bos_token}, special, post, added)
    chosen = {kind: c.token for kind, c in choices.items()}
    ids: dict[str, int | None] = {}
    for kind, token in chosen.items():
        ids[kind] = tok.token_to_id(token) if token else None
        if token and ids[kind] is None:
            raise TokenizerError(f"{kind.upper()} token {token!r} is not in the vocabulary of {spec} (named by "
                                 f"{choices[kind].source}: {choices[kind].why})")
    info = TokenizerInfo(
        source=spec, fingerprint=tokenizer_fingerprint(tok_json, chosen), vocab_size=vocab_size, dtype=dtype_for_vocab(vocab_size),
        eos_token=chosen["eos"], eos_id=ids["eos"], bos_token=chosen["bos"], bos_id=ids["bos"],
        pad_token=chosen["pad"], pad_id=ids["pad"],
    )
    return ResolvedTokenizer(tok_json, info, choices, tok)
