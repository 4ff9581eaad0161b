"""The real GPT-2 tokenizer on real English text (../shared), when present."""

from __future__ import annotations

import shutil

import orjson
from helpers import reference_tokenizer, run_cli, shard_documents


def _reference(tokenizer, texts):
    tok = reference_tokenizer(tokenizer)
    return [e.ids + [50256] for e in tok.encode_batch(texts, add_special_tokens=False)]


def test_gpt2_on_shared_corpus(tmp_path, gpt2_tokenizer, shared_corpus):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("wikitext2_valid.txt", "tinyshakespeare.txt"):
        shutil.copy(shared_corpus / name, raw / name)
    (raw / "special.txt").write_text("a raw <|endoftext|> string is text, not a control token\n")
    out = tmp_path / "out"
    run_cli("submit", "-i", raw, "-o", out, "-t", gpt2_tokenizer, "--no-progress", "--target-task-bytes", "600K", "--force-small-tasks")
    texts = []
    for p in sorted(raw.iterdir()):
        texts.extend(t for t in p.read_text(encoding="utf-8").split("\n") if t.strip())
    docs = shard_documents(out)
    assert docs == _reference(gpt2_tokenizer, texts)
    assert docs[-1].count(50256) == 1  # only the appended EOS
    index = orjson.loads((out / "index.json").read_bytes())
    assert index["tokenizer"]["vocab_size"] == 50257 and index["dtype"] == "uint16"
    assert index["totals"]["shards"] >= 4  # the 1.1 MB files were split by --target-task-bytes
    ratio = index["totals"]["bytes"] / (index["totals"]["tokens"] * 2)
    assert ratio < 1.10, ratio  # short lines (Shakespeare) cost a length each; still near raw payload
