"""The ``auto`` check and byte-level vocabularies with entries outside the byte alphabet (Cohere: '™' = 266
beside its byte-level spelling 'âĦ¢' = 11538).  gigatoken resolves such duplicates differently from one
load to the next, so the check must decide for every such entry: a load that passes has to be exact."""

from __future__ import annotations

import json

import pytest
from test_tokenizer_specials import shared_tokenizer

from shardprep.tokenizer.verify_backend import _outliers_parsed, byte_alphabet_outliers, hard_cases


def _bpe_json(vocab: dict[str, int], *, compact: bool = True) -> str:
    doc = {"version": "1.0", "added_tokens": [], "pre_tokenizer": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":") if compact else None,
                      indent=None if compact else 2)


def test_outliers_are_read_from_the_vocabulary_text_like_a_full_parse():
    vocab = {"a": 0, "Ġb": 1, '"™"': 2, "x\\\"🙂": 3, "âĦ¢": 4, "™": 5, "Ńok": 6}
    text = _bpe_json(vocab)
    assert byte_alphabet_outliers(text) == ['"™"', 'x\\"🙂', "™"] == _outliers_parsed(text)
    assert byte_alphabet_outliers(_bpe_json(vocab, compact=False)) == ['"™"', 'x\\"🙂', "™"]
    no_merges = text.replace('"merges"', '"mergez"')          # unexpected layout: parsed instead
    assert byte_alphabet_outliers(no_merges) == ['"™"', 'x\\"🙂', "™"]
    assert byte_alphabet_outliers(text.replace("ByteLevel", "Metaspace")) == []   # not byte-level: none
    labels = [label for label, _ in hard_cases(text)]
    assert "vocabulary entries outside the byte alphabet (glued, group 0)" in labels


def test_gigatoken_on_cohere_is_used_only_where_it_is_exact():
    from shardprep.tokenizer.backend import select_backend
    from shardprep.tokenizer.load import resolve_tokenizer

    pytest.importorskip("gigatoken")
    tok_json = resolve_tokenizer(str(shared_tokenizer("bpe-bytelevel-75k-cohere"))).json
    outliers = byte_alphabet_outliers(tok_json)
    assert len(outliers) == 1410 and "™" in outliers
    texts = [" ".join(outliers[i:i + 40]) + " and " + "".join(outliers[i:i + 7]) for i in range(0, 1410, 40)]
    from shardprep.tokenizer.backend import HFBackend

    ref_flat, ref_lengths = HFBackend(tok_json).encode_batch(texts)
    for _ in range(5):  # each select_backend loads gigatoken afresh, i.e. draws its resolution again
        backend, record = select_backend("auto", tok_json, allow_special_tokens=False, sample_texts=[])
        flat, lengths = backend.encode_batch(texts)
        assert flat.tolist() == ref_flat.tolist() and lengths.tolist() == ref_lengths.tolist(), record
