"""Which special tokens end (EOS), begin (BOS) and pad a document, and where that choice came from.

A bare ``tokenizer.json`` does not say which token ends a document: ``transformers`` keeps that in
``tokenizer_config.json``, which users often do not copy.  So every kind is resolved by a fixed
precedence, first answer wins:

1. ``option``: ``--eos-token`` / ``--bos-token`` (what the user said always wins);
2. ``tokenizer_config``: ``eos_token`` / ``bos_token`` / ``pad_token`` of ``tokenizer_config.json`` or
   ``special_tokens_map.json`` beside the file (a string or an AddedToken dict), or what ``transformers``
   read from them;
3. ``post_processor``: what the tokenizer itself adds around a single sequence.  ``TemplateProcessing``
   ``$A <x>`` makes ``<x>`` the EOS and ``<y> $A`` makes ``<y>`` the BOS, but only when the pair template
   also ends (starts) with that token: a token between ``$A`` and ``$B`` is a separator, not the end of a
   document (Cohere's ``<BOS_TOKEN> $A <EOP_TOKEN> $B``: EOP ends the prompt; its EOS is ``<EOS_TOKEN>``).
   ``RobertaProcessing`` / ``BertProcessing``: ``sep`` is the EOS.  Their ``cls`` is not taken as a BOS:
   encoder processors put a classification slot there, and taking it would change the recorded BOS, and so
   the fingerprint and every sidecar, of CLIP jobs planned before (issue 14 keeps those bytes);
4. ``added_tokens``: first the names that earlier versions looked for, in the same order (so tokenizers
   that worked before keep their choice), then any *special* added token whose name says end (begin) of
   text or sentence once case, ``<>|[]｜`` and ``▁ - space`` are normalised (``<｜end▁of▁sentence｜>``,
   ``<EOS_TOKEN>``, ``<|end_of_text|>``...).  ``<|startoftext|>`` is not guessed as a BOS (see 3.).

Pad tokens come only from 1, 2 and the legacy names (they matter for pad mode only, and the loader falls
back to the EOS).  The source is printed by ``plan`` and shown by ``doctor``; it is not stored in job.json,
sidecars or index.json, whose bytes stay what they were for tokenizers that resolved before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import orjson

from shardprep.errors import TokenizerError

KINDS = ("eos", "bos", "pad")
SOURCES = ("option", "tokenizer_config", "post_processor", "added_tokens")

# Names of earlier versions, in their order of preference; matched against every added token.
_LEGACY = {
    "eos": ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]", "<|im_end|>"),
    "bos": ("<|begin_of_text|>", "<s>", "<bos>", "[CLS]"),
    "pad": ("<pad>", "[PAD]", "<|pad|>"),
}
# Normalised names of special added tokens, in order of preference (after the legacy names).
_NAMES = {
    "eos": ("eos", "eos_token", "end_of_text", "endoftext", "end_of_sentence", "end_of_document", "eod"),
    "bos": ("bos", "bos_token", "begin_of_text", "beginning_of_text", "begin_of_sentence",
            "beginning_of_sentence"),
}
_STRIP = re.compile(r"[<>|\[\]｜]")
_SEPARATORS = re.compile(r"[▁\-\s]+")


@dataclass(frozen=True)
class SpecialChoice:
    """One kind's token, the precedence step that chose it and a sentence saying why."""

    token: str | None
    source: str | None
    why: str

    def describe(self, kind: str, token_id: int | None) -> str:
        """``EOS '</s>' = 1 (post_processor: ...)`` or ``BOS none (...)``, for plan and doctor."""
        if self.token is None:
            return f"{kind.upper()} none ({self.why})"
        return f"{kind.upper()} {self.token!r} = {token_id} ({self.source}: {self.why})"


def normalized_name(content: str) -> str:
    """``<｜end▁of▁sentence｜>`` -> ``end_of_sentence``; ``<EOS_TOKEN>`` -> ``eos_token``."""
    return _SEPARATORS.sub("_", _STRIP.sub("", content).strip().lower()).strip("_")


def special_from_config(directory: Path) -> dict[str, str]:
    """eos/bos/pad token strings from special_tokens_map.json / tokenizer_config.json, when present.

    The value is a string or an AddedToken dict (``{"content": ...}``); tokenizer_config.json wins when
    both name a kind, as in ``transformers``.
    """
    out: dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        p = directory / name
        if not p.is_file():
            continue
        try:
            cfg = orjson.loads(p.read_bytes())
        except orjson.JSONDecodeError as e:
            raise TokenizerError(f"{p}: invalid JSON: {e}") from None
        if not isinstance(cfg, dict):
            raise TokenizerError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
        for kind in KINDS:
            v = cfg.get(f"{kind}_token")
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str) and v:
                out[kind] = v
    return out


# ---------------------------------------------------------------------------------------- post-processor
def _template_token(item: dict, special_tokens: Mapping) -> str | None:
    """The token string of a template item ``{"SpecialToken": {"id": ...}}``, else None."""
    special = item.get("SpecialToken") if isinstance(item, dict) else None
    if not isinstance(special, dict):
        return None
    key = special.get("id")
    tokens = (special_tokens.get(key) or {}).get("tokens") if isinstance(special_tokens, dict) else None
    return tokens[0] if isinstance(tokens, list) and len(tokens) == 1 else key


def _from_template(proc: dict) -> dict[str, tuple[str, str]]:
    """EOS/BOS that a TemplateProcessing adds around ``$A``, confirmed by the pair template."""
    specials = proc.get("special_tokens") or {}
    single, pair = proc.get("single") or [], proc.get("pair") or []
    out: dict[str, tuple[str, str]] = {}
    if len(single) >= 2:
        last, first = _template_token(single[-1], specials), _template_token(single[0], specials)
        if last is not None and (not pair or _template_token(pair[-1], specials) == last):
            out["eos"] = (last, f"the template appends it to every sequence: $A {last}")
        if first is not None and (not pair or _template_token(pair[0], specials) == first):
            out["bos"] = (first, f"the template prepends it to every sequence: {first} $A")
    return out


def from_post_processor(state: bytes | str | None) -> dict[str, tuple[str, str]]:
    """``{kind: (token, why)}`` from a post-processor's JSON (``Tokenizer.post_processor.__getstate__()``)."""
    return _from_processor(orjson.loads(state)) if state else {}


def _from_processor(proc: object) -> dict[str, tuple[str, str]]:
    """TemplateProcessing, RobertaProcessing / BertProcessing (``sep``) and a Sequence of processors (the
    first that names a kind wins); anything else (ByteLevel, none) names nothing."""
    if not isinstance(proc, dict):
        return {}
    kind = proc.get("type")
    if kind == "Sequence":
        out: dict[str, tuple[str, str]] = {}
        for sub in proc.get("processors") or []:
            for k, v in _from_processor(sub).items():
                out.setdefault(k, v)
        return out
    if kind == "TemplateProcessing":
        return _from_template(proc)
    if kind in ("RobertaProcessing", "BertProcessing"):
        sep = proc.get("sep")
        if isinstance(sep, list) and sep and isinstance(sep[0], str):
            return {"eos": (sep[0], f"{kind} appends its sep token to every sequence")}
    return {}


# ------------------------------------------------------------------------------------------ added tokens
def from_added_tokens(kind: str, added: Mapping[str, bool]) -> tuple[str, str] | None:
    """``(token, why)`` by name among the added tokens (``{content: special}``), or None."""
    for name in _LEGACY[kind]:
        if name in added:
            return name, "a conventional " + kind.upper() + " name among the added tokens"
    wanted = _NAMES.get(kind, ())
    found = [(wanted.index(n), content) for content, special in added.items()
             if special and (n := normalized_name(content)) in wanted]
    if found:
        token = min(found)[1]
        return token, f"a special added token named as {'an end' if kind == 'eos' else 'a beginning'} of text/sentence"
    return None


# --------------------------------------------------------------------------------------------- choosing
def choose_specials(options: Mapping[str, str | None], config: Mapping[str, str], post_processor: bytes | None,
                    added: Mapping[str, bool]) -> dict[str, SpecialChoice]:
    """Apply the module's precedence to every kind; never raises for a kind that is simply absent."""
    processed = from_post_processor(post_processor)
    out: dict[str, SpecialChoice] = {}
    for kind in KINDS:
        if options.get(kind):
            out[kind] = SpecialChoice(options[kind], "option", f"--{kind}-token")
        elif config.get(kind):
            out[kind] = SpecialChoice(config[kind], "tokenizer_config", f"{kind}_token in the tokenizer's config")
        elif kind in processed:
            token, why = processed[kind]
            out[kind] = SpecialChoice(token, "post_processor", why)
        elif (named := from_added_tokens(kind, added)) is not None:
            out[kind] = SpecialChoice(named[0], "added_tokens", named[1])
        else:
            out[kind] = SpecialChoice(None, None, _none_why(kind))
    return out


def _none_why(kind: str) -> str:
    if kind == "pad":
        return "no pad token named; the loader pads with the EOS"
    flag = f"--{kind}-token"
    return f"no config, post-processor or added-token name gives one; name it with {flag}"
