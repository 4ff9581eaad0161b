"""Every shared real tokenizer through ``shardprep submit`` with default options: the shard ids equal an
independent per-document ``tokenizers`` encode plus the tokenizer's own EOS (issue 14, part 3).

Default options means ``--backend auto``: where gigatoken passes its check (GPT-2, DeepSeek, dolma2,
NeoX, RoBERTa, Phi-3) this also holds the fast backend to the reference on multilingual text.
"""

from __future__ import annotations

import orjson
import pytest
from helpers import reference_tokenizer, run_cli, shard_documents
from test_tokenizer_specials import EXPECTED, shared_tokenizer

pytestmark = pytest.mark.slow

# Short and long documents in many scripts; literal special-token strings must stay plain text.
DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Der Bär läuft über die Straße; façade, naïve, déjà vu — Ünïcödé!",
    "Москва — столица России. Добро пожаловать!",
    "中文文本同样需要被正确地切分。我们在北京大学学习自然语言处理。",
    "日本語のテキストも正しく処理されます。カタカナとひらがなと漢字。",
    "한국어 문장은 토크나이저에게 어려운 경우입니다. 서울특별시에서 만나요!",
    "مرحبا بالعالم — שלום עולם — नमस्ते दुनिया — สวัสดีชาวโลก",
    "Emoji 😀😃 🚀 ✨ ❤️ family 👩‍👩‍👧‍👦 coder 👨‍💻 flags 🇺🇸🇯🇵 skin 👍🏽",
    "Numbers 1234567890 3.14159 2026-11-23 1,000,000 ٠١٢٣ ０１２３",
    "def f(x):\n    return x**2  # code keeps its newlines\n\tif (a && b) { c->d[0] = 'e'; }",
    "Specials as text: <|endoftext|> </s> <s> [SEP] [CLS] <EOS_TOKEN> <｜end▁of▁sentence｜> <pad>",
    "   leading and trailing spaces   ",
    "a  b   c    d     e  (runs of spaces)\tand\ttabs",
    "x",
    " ".join(["Long document with many words to exceed any truncation length in the file."] * 60),
    "混合 mixed 言語 text with 😀 and Ελληνικά and עברית in one line",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("multilingual")
    path = d / "docs.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"text": t}) + b"\n" for t in DOCUMENTS))
    return path


def reference(tokenizer, eos: str) -> list[list[int]]:
    """Plain ``tokenizers``, one document at a time, no padding/truncation, specials in text as text."""
    tok = reference_tokenizer(tokenizer)
    eos_id = tok.token_to_id(eos)
    assert eos_id is not None, eos
    return [tok.encode(t, add_special_tokens=False).ids + [eos_id] for t in DOCUMENTS]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_submit_with_default_options_is_exact(name, corpus, tmp_path):
    tokenizer = shared_tokenizer(name)
    out = tmp_path / "out"
    run_cli("submit", "-i", corpus, "-o", out, "-t", tokenizer, "--no-progress", "--executor", "local")
    eos = EXPECTED[name][0]
    assert shard_documents(out) == reference(tokenizer, eos)
    index = orjson.loads((out / "index.json").read_bytes())
    assert index["tokenizer"]["eos_token"] == eos and index["totals"]["documents"] == len(DOCUMENTS)


@pytest.mark.parametrize("name, eos_source, backend", [
    ("wordpiece-bert-base-uncased", "post_processor", "hf"),     # gigatoken cannot run WordPiece
    ("bpe-bytelevel-128k-deepseek-r1", "added_tokens", "gigatoken"),
])
def test_doctor_shows_the_eos_choice_and_the_backend_with_why(name, eos_source, backend, tmp_path):
    import json

    tokenizer = shared_tokenizer(name)
    proc = run_cli("doctor", "--tokenizer", tokenizer, "--output", tmp_path / "o", "--json", check=False)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    tok = checks["tokenizer"]
    assert tok["verdict"] == "ok" and tok["details"]["eos_token"] == EXPECTED[name][0]
    assert tok["details"]["special_sources"]["eos"]["source"] == eos_source
    assert f"EOS {EXPECTED[name][0]!r} = {tok['details']['eos_id']} ({eos_source}: " in tok["message"]
    assert checks["backend"]["details"]["auto_picks"] == backend
    if backend == "hf":
        assert checks["backend"]["verdict"] == "warn"
        assert checks["backend"]["message"].startswith("tasks will use hf (the reference), not gigatoken")
        assert "WordPiece" in checks["backend"]["details"]["reason"]
