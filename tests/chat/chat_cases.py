"""Shared pieces of the chat tests: the template/tokenizer pairs of /work/shared, tokenizer directories
written in tmp (tokenizer.json linked, tokenizer_config.json with the template and special tokens), the
conversations every pair is checked on, and transformers' reference."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED

CHAT = SHARED / "chat"
TOKENIZERS = SHARED / "tokenizers"
DS_BOS, DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

# name -> (tokenizer dir, template path under chat/, bos, eos)
PAIRS: dict[str, tuple[str, str, str | None, str | None]] = {
    "deepseek-v3": ("bpe-bytelevel-128k-deepseek-r1", "deepseek-v3-template/chat_template.jinja", DS_BOS, DS_EOS),
    "phi-3": ("bpe-spm-bytefallback-phi3-mini", "phi-3-template/chat_template.jinja", "<s>", "<|endoftext|>"),
    "qwen3-gpt2": ("gpt2", "qwen3-template/chat_template.jinja", None, None),
    "qwen3-dolma2": ("bpe-bytelevel-100k-cl100k-dolma2", "qwen3-template/chat_template.jinja", None, "<|endoftext|>"),
    "phi-3-markers": ("bpe-spm-bytefallback-phi3-mini", "trl-generation-markers/phi3_training.jinja", "<s>",
                      "<|endoftext|>"),
    "qwen3-markers": ("gpt2", "trl-generation-markers/qwen3_training.jinja", None, None),
}
MARKER_PAIRS = ("phi-3-markers", "qwen3-markers")
PLAIN_PAIRS = ("deepseek-v3", "phi-3", "qwen3-gpt2", "qwen3-dolma2")


def tokenizer_dir(tmp: Path, pair: str, template_text: str | None = None) -> Path:
    """A directory with the pair's tokenizer.json (a link) and a tokenizer_config.json naming the
    template and the special tokens; skips when /work/shared lacks them."""
    tok, template, bos, eos = PAIRS[pair]
    source = TOKENIZERS / tok / "tokenizer.json"
    if not source.is_file() or not (CHAT / template).is_file():
        pytest.skip(f"shared tokenizer or chat template missing under {SHARED}")
    directory = tmp / pair
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"chat_template": template_text if template_text is not None
                              else (CHAT / template).read_text(encoding="utf-8"),
                              "tokenizer_class": "PreTrainedTokenizerFast"}
    if bos:
        config["bos_token"] = bos
    if eos:
        config["eos_token"] = eos
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if not (directory / "tokenizer.json").exists():
        os.symlink(source, directory / "tokenizer.json")
    return directory


def directory_key(directory: Path) -> tuple:
    """What a tokenizer directory's loaders read: the tokenizer.json it links to and every other file's
    bytes (the same files in another tmp directory give the same key; a rewritten config another)."""
    files = tuple(sorted((f.name, f.read_bytes()) for f in directory.iterdir()
                         if f.is_file() and f.name != "tokenizer.json"))
    return str((directory / "tokenizer.json").resolve()), files


# transformers' tokenizer per directory contents: loading one takes up to seconds (a 128k vocabulary), and
# the chat tests compare against the same few many times; apply_chat_template leaves it as it was.
def chat_tokenizer(path: Path) -> dict[str, Any]:
    """``ChatEncoder``'s tokenizer arguments for a tokenizer.json: the process's shared tokenizer with special
    tokens matched, and the JSON it was parsed from (so the encoder's placement tables are built once per
    process, as a task's are: ``tokenizer.parsed``)."""
    from shardprep.tokenizer.parsed import shared_tokenizer, tokenizer_file

    text, _ = tokenizer_file(path)
    return {"tokenizer": shared_tokenizer(text, match_specials=True), "tokenizer_json": text}


_HF_TOKENIZERS: dict[tuple, Any] = {}


def hf_tokenizer(directory: Path) -> Any:
    key = directory_key(directory)
    if key not in _HF_TOKENIZERS:
        from transformers import PreTrainedTokenizerFast

        _HF_TOKENIZERS[key] = PreTrainedTokenizerFast.from_pretrained(str(directory))
    return _HF_TOKENIZERS[key]


def hf_reference(hf: Any, messages: list[dict], masks: bool) -> tuple[list[int], list[int] | None] | Exception:
    """transformers' ids (and assistant mask), or the exception it raised."""
    try:
        out = hf.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=masks)
    except Exception as e:  # the template refused: ours must refuse too
        return e
    return list(out["input_ids"]), (list(out["assistant_masks"]) if masks else None)


def _tool_call(name: str, arguments: str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS: dict[str, list[dict]] = {
    "system-multi-turn": [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is 4."},
    ],
    "no-system": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": " Green, with a leading space.\n"},
    ],
    "tool-calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [_tool_call("get_weather", '{"city": "Paris"}'),
                                                             _tool_call("get_weather", '{"city": "Rome"}')]},
        {"role": "tool", "content": "Paris: sunny"},
        {"role": "tool", "content": "Rome: rain"},
        {"role": "assistant", "content": "Paris is sunny; Rome has rain."},
    ],
    "tool-call-with-text": [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [_tool_call("search", '{"q": "x"}')]},
        {"role": "tool", "content": "found x"},
        {"role": "assistant", "content": "It is x."},
    ],
    "think-in-content": [
        {"role": "user", "content": "Solve a puzzle."},
        {"role": "assistant", "content": "<think>\nFirst idea.\n</think>\n\nThe answer is 7."},
        {"role": "user", "content": "And again?"},
        {"role": "assistant", "content": "<think>\nSecond try, longer.\n</think>\n\nStill 7."},
    ],
    "reasoning-content": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short wavelengths scatter."},
    ],
    "content-parts": [
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
        {"role": "assistant", "content": "Both parts read."},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français 🇫🇷."},
        {"role": "user", "content": "héllo 世界 🙂 — 한국어 \u200d👩‍👩‍👧"},
        {"role": "assistant", "content": "Bonjour 👋 世界! Ça va? «très bien»"},
    ],
    "content-none-tool-call": [
        {"role": "user", "content": "Call it."},
        {"role": "assistant", "content": None, "tool_calls": [_tool_call("f", "{}")]},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "Done."},
    ],
}
