"""Tokenizer backends: ``hf``, ``gigatoken`` and ``auto`` write byte-identical shards; ``auto`` falls back
to ``hf`` (and says why) when the fast backend cannot reproduce the reference ids; special-token strings
in text stay plain text under every backend; the hot-path rewrites keep behaviour."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
from conftest import examples
from helpers import reference_ids, run_cli, shard_documents

pytest.importorskip("gigatoken")

BACKEND_NAMES = ("hf", "gigatoken", "auto")
SPECIAL_LINES = [
    "a raw <|endoftext|> string is text, not a control token",
    "<|endoftext|><|endoftext|> glued <|pad|> and <s> too",
    "한국어 日本語 中文 👩‍👩‍👧‍👦 🏳️‍🌈 tabs\t\tand   spaces 1234567890",
    "control \x07 bell \x1b[31m escape \u200b zero-width",
    "x" * 3000,
]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _submit(raw: Path, out: Path, tokenizer: Path, backend: str, *extra: str) -> dict[str, dict]:
    run_cli("submit", "-i", raw, "-o", out, "-t", tokenizer, "--backend", backend, "--no-progress",
            "--workers", "1", *extra)
    return {p.name: orjson.loads(p.read_bytes()) for p in sorted(out.glob("shard-*.json"))}


def _assert_identical_outputs(outs: dict[str, Path]) -> None:
    shards = {b: sorted(o.glob("shard-*.tar")) for b, o in outs.items()}
    names = {b: [p.name for p in s] for b, s in shards.items()}
    assert len(set(map(tuple, names.values()))) == 1 and names["hf"], names
    for b, paths in shards.items():
        assert [_sha(p) for p in paths] == [_sha(p) for p in shards["hf"]], f"{b} shards differ from hf"


def _texts_of(raw: Path) -> list[str]:
    """Documents of a directory of .txt/.jsonl(.gz) files, in the planner's (sorted) order."""
    texts: list[str] = []
    for p in sorted(raw.iterdir()):
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            if ".jsonl" in p.name:
                texts.extend(json.loads(line)["text"] for line in f if line.strip())
            else:
                texts.extend(line.rstrip("\n") for line in f if line.strip())
    return texts


@pytest.mark.slow
def test_gpt2_backends_write_identical_shards(tmp_path, gpt2_tokenizer, shared_corpus):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = (shared_corpus / "wikitext2_valid.txt").read_text(encoding="utf-8").splitlines()
    (raw / "a_wiki.txt").write_text("\n".join(lines[:600]) + "\n", encoding="utf-8")
    (raw / "b_special.txt").write_text("\n".join(SPECIAL_LINES) + "\n", encoding="utf-8")
    outs = {b: tmp_path / f"out-{b}" for b in BACKEND_NAMES}
    sidecars = {b: _submit(raw, outs[b], gpt2_tokenizer, b) for b in BACKEND_NAMES}

    _assert_identical_outputs(outs)
    docs = shard_documents(outs["auto"])
    assert docs == reference_ids(gpt2_tokenizer, _texts_of(raw), eos=50256)
    assert all(d.count(50256) == 1 for d in docs[-len(SPECIAL_LINES):])  # only the appended EOS

    for sc in sidecars["hf"].values():
        assert sc["backend"]["name"] == "hf" and sc["backend"]["check"] is None
    for b in ("gigatoken", "auto"):
        for sc in sidecars[b].values():
            rec = sc["backend"]
            assert rec["name"] == "gigatoken" and rec["requested"] == b
            assert rec["check"]["passed"] is True and rec["check"]["reference"].startswith("hf ")
            assert rec["check"]["hard_cases"] >= 30 and rec["check"]["sample_documents"] >= 1
            assert "fallback_reason" not in rec


@pytest.mark.slow
def test_trained_tokenizer_backends_write_identical_shards(tmp_path, sample_tokenizer):
    from shardprep.demo_data import write_sample_corpus

    raw = write_sample_corpus(tmp_path / "raw", files=3, docs_per_file=150, seed=7)
    (raw / "z_special.txt").write_text("\n".join(SPECIAL_LINES) + "\n", encoding="utf-8")
    outs = {b: tmp_path / f"out-{b}" for b in BACKEND_NAMES}
    sidecars = {b: _submit(raw, outs[b], sample_tokenizer, b) for b in BACKEND_NAMES}

    _assert_identical_outputs(outs)
    eos = json.loads(sample_tokenizer.read_text())["added_tokens"][0]["id"]
    docs = shard_documents(outs["gigatoken"])
    assert docs == reference_ids(sample_tokenizer, _texts_of(raw), eos=eos)
    assert all(d.count(eos) == 1 for d in docs[-len(SPECIAL_LINES):])
    assert {sc["backend"]["name"] for sc in sidecars["auto"].values()} == {"gigatoken"}


# Tokenizers trained here, once per process (training takes up to a second; several tests use each): name ->
# the tokenizer.json bytes, written again wherever a test wants its file.
_TRAINED: dict[str, bytes] = {}


def _trained_once(name: str, path: Path, train: Callable[[Path], None]) -> Path:
    if name not in _TRAINED:
        train(path)
        _TRAINED[name] = path.read_bytes()
    else:
        path.write_bytes(_TRAINED[name])
    return path


def _no_regex_bpe(path: Path) -> Path:
    """A byte-level BPE whose pre-tokenizer does not split on the GPT-2 regex.  gigatoken loads it but
    always applies the regex, so its ids differ: a real case the check has to catch."""
    return _trained_once("no-regex-bpe", path, _train_no_regex_bpe)


def _train_no_regex_bpe(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from shardprep.demo_data import sample_documents

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample_documents(1500, seed=3), trainer=trainer)
    tok.save(str(path))


def _wordpiece(path: Path) -> Path:
    """A WordPiece tokenizer: a model type gigatoken cannot load at all."""
    return _trained_once("wordpiece", path, _train_wordpiece)


def _train_wordpiece(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from shardprep.demo_data import sample_documents

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(sample_documents(500, seed=4), trainer=trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[UNK]", "[SEP]"], show_progress=False))
    tok.save(str(path))


@pytest.mark.slow
def test_auto_falls_back_to_hf_and_records_why(tmp_path):
    from shardprep.demo_data import write_sample_corpus

    tokenizer = _no_regex_bpe(tmp_path / "noregex.json")
    raw = write_sample_corpus(tmp_path / "raw", files=1, docs_per_file=100, seed=5)
    out = tmp_path / "out"
    sidecars = _submit(raw, out, tokenizer, "auto")

    rec = next(iter(sidecars.values()))["backend"]
    assert rec["name"] == "hf" and rec["requested"] == "auto"
    assert rec["check"]["passed"] is False and rec["check"]["candidate"].startswith("gigatoken")
    assert "ids differ" in rec["check"]["reason"] and rec["fallback_reason"] == rec["check"]["reason"]
    mismatch = rec["check"]["mismatch"]
    assert mismatch["expected"] != mismatch["got"] and mismatch["text"]
    assert "falling back to hf" in (out / "logs" / "task-00000.log").read_text()
    eos = json.loads(tokenizer.read_text())["added_tokens"][0]["id"]
    assert shard_documents(out) == reference_ids(tokenizer, _texts_of(raw), eos=eos)

    # asked for explicitly, the fast backend refuses to write different ids
    explicit = tmp_path / "explicit"
    run_cli("plan", "-i", raw, "-o", explicit, "-t", tokenizer, "--backend", "gigatoken")
    proc = run_cli("run-task", explicit, "--task-id", "0", check=6)
    assert "--backend=gigatoken does not reproduce the hf ids" in proc.stderr
    assert not list(explicit.glob("shard-*.tar"))


def test_auto_falls_back_when_gigatoken_cannot_load(tmp_path):
    from shardprep.errors import TokenizerError
    from shardprep.tokenizer.backend import select_backend

    tok_json = _wordpiece(tmp_path / "wp.json").read_text()
    backend, rec = select_backend("auto", tok_json, allow_special_tokens=False, sample_texts=["some text"])
    assert backend.name == "hf" and rec.name == "hf"
    assert rec.to_dict()["check"] == {"candidate": "gigatoken", "passed": False, "reason": rec.fallback_reason}
    assert rec.fallback_reason and "cannot load" in rec.fallback_reason and "WordPiece" in rec.fallback_reason
    with pytest.raises(TokenizerError, match="--backend=gigatoken"):
        select_backend("gigatoken", tok_json, allow_special_tokens=False, sample_texts=["x"])


def test_check_uses_task_documents_and_reports_first_difference(tmp_path):
    """The verification compares on the task's own documents, not only on the fixed hard cases."""
    from shardprep.tokenizer.backend import HFBackend
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend
    from shardprep.tokenizer.verify_backend import compare_ids, sample_of, verify_backend

    tok_json = _no_regex_bpe(tmp_path / "noregex.json").read_text()
    reference, candidate = HFBackend(tok_json), GigatokenBackend(tok_json, threads=1)
    # "ab" has no regex boundary, so both agree; a space-separated sentence differs
    assert compare_ids(candidate, reference, [("same", "ab")]) is None
    diff = compare_ids(candidate, reference, [("same", "ab"), ("doc", "data shard token model")])
    assert diff is not None and diff[1] is not None
    assert diff[1].case == "doc" and diff[1].expected != diff[1].got and diff[0].startswith("ids differ on doc")
    record = verify_backend(candidate, reference, tok_json, ["the data"] * 5, max_sample_docs=3)
    assert record.passed is False and record.sample_documents == 3
    assert sample_of(["a" * 10] * 100, max_docs=10, max_chars=35) == [0, 10, 20]


def test_the_plan_check_encodes_the_reference_once_per_tokenizer_and_the_candidate_each_time(
        sample_tokenizer, monkeypatch):
    from shardprep.tokenizer.backend import HFBackend
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend
    from shardprep.tokenizer.plan_check import check_at_plan

    calls: list[str] = []
    for cls in (HFBackend, GigatokenBackend):
        def counted(self, texts, _encode=cls.encode_batch, _name=cls.name):
            calls.append(_name)
            return _encode(self, texts)
        monkeypatch.setattr(cls, "encode_batch", counted)
    tok_json = sample_tokenizer.read_text(encoding="utf-8") + " " * 11    # a key no other test planned
    first, second = (check_at_plan(tok_json, backend="auto", allow_special_tokens=False, fingerprint="f")
                     for _ in range(2))
    assert first == second and first is not None and first.passed and first.hard_cases > 10
    assert calls == ["hf", "gigatoken", "gigatoken"]
    special = check_at_plan(tok_json, backend="auto", allow_special_tokens=True, fingerprint="f")
    assert special is not None and special.allow_special_tokens and calls[3:] == ["hf", "gigatoken"]


@pytest.mark.parametrize("allow", [False, True])
def test_special_token_strings_under_both_backends(gpt2_tokenizer, allow):
    from shardprep.tokenizer.backend import HFBackend
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend
    from shardprep.tokenizer.verify_backend import hard_cases

    tok_json = gpt2_tokenizer.read_text()
    texts = ["x <|endoftext|> y", "<|endoftext|>"]
    for backend in (HFBackend(tok_json, allow_special_tokens=allow),
                    GigatokenBackend(tok_json, allow_special_tokens=allow, threads=1)):
        flat, lengths = backend.encode_batch(texts)
        assert (50256 in flat.tolist()) is allow, backend.name
        assert lengths.tolist() == ([4, 1] if allow else [9, 7]), backend.name
    assert any("<|endoftext|>" in text for _, text in hard_cases(tok_json))


def test_gigatoken_output_is_flat_ids_and_lengths(gpt2_tokenizer):
    from shardprep.tokenizer.backend import HFBackend
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

    tok_json = gpt2_tokenizer.read_text()
    texts = ["Hello world", "", "日本語", "a  b"]
    flat, lengths = GigatokenBackend(tok_json, threads=1).encode_batch(texts)
    assert flat.dtype == np.uint32 and lengths.dtype == np.int64
    ref_flat, ref_lengths = HFBackend(tok_json).encode_batch(texts)
    assert flat.tolist() == ref_flat.tolist() and lengths.tolist() == ref_lengths.tolist() == [2, 0, 6, 3]
    assert GigatokenBackend(tok_json, threads=1).encode_batch([])[1].size == 0


# -- hot path: the faster implementations keep the old behaviour ------------------------------------
def test_add_boundary_tokens_matches_per_document_reference():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from shardprep.tokenizer.backend import add_boundary_tokens

    @settings(max_examples=examples(200), deadline=None)
    @given(st.lists(st.lists(st.integers(0, 1000), max_size=6), max_size=8),
           st.sampled_from([(None, 7), (5, None), (5, 7), (None, None)]))
    def check(docs, boundary):
        bos, eos = boundary
        flat = np.array([t for d in docs for t in d], dtype=np.uint32)
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        out, new_lengths = add_boundary_tokens(flat, lengths, bos, eos)
        expected = [([bos] if bos is not None else []) + d + ([eos] if eos is not None else []) for d in docs]
        assert out.tolist() == [t for d in expected for t in d]
        assert new_lengths.tolist() == [len(d) for d in expected]

    check()


@pytest.mark.parametrize("block", [2, 3, 16])
def test_block_reader_gives_same_documents_and_skips_at_any_block_size(tmp_path, block):
    """Lines crossing block boundaries, CR/LF, blank and over-long lines, and a byte range all read the
    same with tiny blocks as with the default 8 MiB block, on the fast path and line by line."""
    from shardprep.inputs import readers
    from shardprep.inputs.batches import item_batches
    from shardprep.inputs.discover import discover_inputs
    from shardprep.job.options import TokenizeOptions

    data = (b"first line\r\n\r\n  \t\nsecond \xe4\xb8\xad line\n" + b"y" * 40 + b"\nbad \xff utf8\n"
            b"third\r\r\n\n" + b"z" * 41 + b"\nlast line no newline\r")
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    inp = discover_inputs([str(path)])[0]
    second = data.index(b"second")

    def read(item, mode, block=8 << 20, fast=True):
        skips = readers.SkipLog()
        docs = [d for b in item_batches(inp, item, TokenizeOptions(max_doc_bytes=40, txt_mode=mode), skips,
                                        block_bytes=block, fast=fast) for d in b.texts()]
        return docs, skips.counts, [(e.reason, e.line, e.byte) for e in skips.examples]

    items = [readers.WorkItem(0), readers.WorkItem(0, second, second + 60, "bytes", None)]
    expected = {(i, m): read(item, m) for i, item in enumerate(items) for m in ("line", "paragraph")}
    assert expected[(0, "line")][0] == ["first line", "second 中 line", "y" * 40, "third",
                                        "last line no newline\r"]
    assert expected[(0, "line")][1] == {**readers.SkipLog().counts, "too_long": 1, "empty": 3, "invalid_utf8": 1}
    assert expected[(1, "line")][0] == ["second 中 line", "y" * 40]
    for (i, m), want in expected.items():
        for fast in (True, False):
            assert read(items[i], m, block, fast) == want, (block, i, m, fast)
