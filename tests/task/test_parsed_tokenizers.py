"""Tokenizers parsed once per process (``tokenizer.parsed``): the same JSON gives the same shared object
with the settings its key names, an edited file is read again, and only the last few are kept."""

from __future__ import annotations

import pytest

from shardprep.tokenizer import parsed
from shardprep.tokenizer.backend import HFBackend
from shardprep.tokenizer.load import resolve_tokenizer


def test_the_same_json_is_one_tokenizer_per_special_token_setting(sample_tokenizer):
    parsed.clear()
    text, tok = parsed.tokenizer_file(sample_tokenizer)
    assert parsed.tokenizer_file(sample_tokenizer)[1] is tok
    assert parsed.shared_tokenizer(text, match_specials=False) is tok
    matching = parsed.shared_tokenizer(text, match_specials=True)
    assert matching is not tok
    assert tok.encode_special_tokens and not matching.encode_special_tokens
    assert tok.truncation is None and tok.padding is None
    eos = "<|endoftext|>"
    assert matching.encode(eos, add_special_tokens=False).ids == [tok.token_to_id(eos)]
    assert len(tok.encode(eos, add_special_tokens=False).ids) > 1        # plain text: no control token
    assert HFBackend(text).tok is tok and HFBackend(text, allow_special_tokens=True).tok is matching


def test_an_edited_file_is_parsed_again_and_a_copy_is_not(tmp_path, sample_tokenizer):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(sample_tokenizer.read_bytes())
    before = resolve_tokenizer(str(path))
    spec = before.json.replace('"<|endoftext|>"', '"<|end|>"')
    assert spec != before.json
    path.write_text(spec, encoding="utf-8")
    after = resolve_tokenizer(str(path), eos_token="<|end|>")
    assert after.info.fingerprint != before.info.fingerprint and after.loaded is not before.loaded
    assert after.info.eos_token == "<|end|>"
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())
    assert resolve_tokenizer(str(copy), eos_token="<|end|>").loaded is after.loaded


def test_only_the_last_few_are_kept():
    cache: parsed.ParsedCache[int] = parsed.ParsedCache(keep=2)
    built: list[str] = []

    def build(key: str):
        return lambda: built.append(key) or len(built)

    assert [cache.get(k, build(k)) for k in "aab"] == [1, 1, 2]
    cache.get("c", build("c"))                      # "a" is the least recently used: dropped
    assert len(cache) == 2 and cache.get("b", build("b")) == 2
    assert cache.get("a", build("a")) == 4 and built == ["a", "b", "c", "a"]


def test_keep_per_cache_resizes_the_caches_made_and_those_to_come():
    made = parsed.ParsedCache()
    for k in "abc":
        made.get(k, lambda: 0)
    assert len(made) == 3                   # this session keeps more than KEEP (conftest)
    before = made._keep
    try:
        parsed.keep_per_cache(2)
        later = parsed.ParsedCache()
        for k in "abc":
            later.get(k, lambda: 0)
        assert len(made) == 2 and len(later) == 2
        with pytest.raises(ValueError, match="at least 1"):
            parsed.keep_per_cache(0)
    finally:
        parsed.keep_per_cache(before)
