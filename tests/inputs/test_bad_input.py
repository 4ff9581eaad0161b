"""Bad input gets its documented outcome: counted and skipped by default (with file and line), an error
naming the file and line under --strict, and a meaningful exit code.  Never an empty success."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.errors import EXIT_INCOMPLETE, EXIT_INPUT, EXIT_PLAN_CONFLICT, EXIT_TOKENIZER, EXIT_USAGE


def _submit(inp, out, tok, *extra, check=True):
    return run_cli("submit", "--one-file-per-task", "-i", inp, "-o", out, "-t", tok, "--no-progress", *extra, check=check)


def _sidecar(out: Path, task: int = 0) -> dict:
    return orjson.loads((out / f"shard-{task:05d}.json").read_bytes())


@pytest.fixture
def messy(tmp_path) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_bytes(b"good one\n\xff\xfe bad utf8\n   \nanother good\n" + b"x" * 300 + b"\nlast\n")
    (raw / "b.jsonl").write_text('{"text": "fine"}\n{"text": broken\n[1, 2]\n{"other": "no text"}\n'
                                 '{"text": ""}\n{"text": "also fine"}\n')
    return raw


def test_bad_documents_are_counted_and_located(tmp_path, messy, sample_tokenizer):
    out = tmp_path / "o"
    _submit(messy, out, sample_tokenizer, "--max-doc-bytes", "200")
    a, b = _sidecar(out, 0), _sidecar(out, 1)
    assert a["documents"] == 3 and b["documents"] == 2
    assert {k: v for k, v in a["skipped"].items() if v} == {"invalid_utf8": 1, "empty": 1, "too_long": 1}
    assert {k: v for k, v in b["skipped"].items() if v} == {"malformed_json": 2, "missing_field": 1, "empty": 1}
    where = {(e["reason"], e["line"]) for e in a["skipped_examples"] + b["skipped_examples"]}
    assert {("invalid_utf8", 2), ("empty", 3), ("too_long", 5), ("malformed_json", 2), ("malformed_json", 3),
            ("missing_field", 4), ("empty", 5)} <= where
    assert all(e["file"].endswith(("a.txt", "b.jsonl")) for e in a["skipped_examples"] + b["skipped_examples"])
    index = orjson.loads((out / "index.json").read_bytes())
    assert index["totals"]["skipped"]["malformed_json"] == 2


@pytest.mark.parametrize("name,content,needle", [
    ("bad.txt", b"ok\n\xc3\x28 broken\n", "bad.txt:2: invalid utf8"),
    ("bad.jsonl", b'{"text": "ok"}\n{"text": \n', "bad.jsonl:2: malformed json"),
    ("bad2.jsonl", b'{"text": "ok"}\n{"txt": "x"}\n', "bad2.jsonl:2: missing field"),
])
def test_strict_mode_fails_naming_file_and_line(tmp_path, sample_tokenizer, name, content, needle):
    (tmp_path / name).write_bytes(content)
    # the local executor keeps the task's own exit code: 3, as docs/architecture.md and run-task say
    proc = _submit(tmp_path / name, tmp_path / "o", sample_tokenizer, "--strict", check=EXIT_INPUT)
    assert needle in proc.stderr
    assert not (tmp_path / "o" / "shard-00000.tar").exists() and not (tmp_path / "o" / "index.json").exists()
    # the task on its own (as a Slurm array task runs it) exits with the input-error code
    proc = run_cli("run-task", tmp_path / "o", "--task-id", "0", check=EXIT_INPUT)
    assert needle in proc.stderr


def test_binary_junk_is_skipped_not_fatal(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = random.Random(0)
    (raw / "junk.txt").write_bytes(bytes(rng.randrange(128, 256) for _ in range(5000)))
    (raw / "real.txt").write_text("a real document\nand another\n")
    out = tmp_path / "o"
    _submit(raw, out, sample_tokenizer)
    junk = next(s for s in (_sidecar(out, 0), _sidecar(out, 1)) if s["inputs"][0]["path"].endswith("junk.txt"))
    assert junk["documents"] == 0 and junk["skipped"]["invalid_utf8"] >= 1


def test_zero_document_job_is_an_error(tmp_path, sample_tokenizer):
    f = tmp_path / "blank-texts.jsonl"
    f.write_text('{"text": "  "}\n' * 3)
    proc = _submit(f, tmp_path / "o", sample_tokenizer, check=EXIT_INPUT)
    assert "zero documents" in proc.stderr and "--text-field" in proc.stderr and "--overwrite" in proc.stderr
    assert not (tmp_path / "o" / "index.json").exists()


def test_empty_files(tmp_path, sample_tokenizer):
    (tmp_path / "empty.txt").write_text("")
    proc = _submit(tmp_path / "empty.txt", tmp_path / "o", sample_tokenizer, check=EXIT_INPUT)
    assert "empty" in proc.stderr
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "empty.txt").write_text("")
    (raw / "full.txt").write_text("one document\n")
    _submit(raw, tmp_path / "o2", sample_tokenizer)  # an empty file among others is fine: 0 docs there
    assert _sidecar(tmp_path / "o2", 0)["documents"] == 0 and _sidecar(tmp_path / "o2", 1)["documents"] == 1


@pytest.mark.parametrize("spec,code,needle", [
    ("missing.txt", EXIT_INPUT, "does not exist"),
    ("notes.docx", EXIT_INPUT, "unknown file type"),
    ("nothing-*.txt", EXIT_INPUT, "matches no files"),
])
def test_missing_or_unknown_inputs(tmp_path, sample_tokenizer, spec, code, needle):
    (tmp_path / "notes.docx").write_text("x")
    proc = _submit(tmp_path / spec, tmp_path / "o", sample_tokenizer, check=code)
    assert needle in proc.stderr and spec.split("*")[0] in proc.stderr


@pytest.mark.parametrize("name,content", [
    ("broken.txt.gz", b"\x1f\x8b\x08\x00garbage-not-deflate" * 10),
    ("truncated.txt.gz", gzip.compress(b"a complete line\n" * 5000)[:-100]),
    ("fake.jsonl.zst", b'{"text": "plain json, not zstd"}\n'),
], ids=["garbage-gz", "truncated-gz", "fake-zst"])
def test_corrupt_compressed_input_names_the_file_with_the_input_exit_code(tmp_path, sample_tokenizer, name, content):
    (tmp_path / name).write_bytes(content)
    proc = _submit(tmp_path / name, tmp_path / "o", sample_tokenizer, check=EXIT_INPUT)
    assert name in proc.stderr and "cannot read input" in proc.stderr
    assert not (tmp_path / "o" / "shard-00000.tar").exists() and not list((tmp_path / "o").glob(".shard-*"))


@pytest.mark.requires("hf")
def test_slow_tokenizer_is_refused(tmp_path):
    d = tmp_path / "slow"
    d.mkdir()
    (d / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "<unk>": 3}))
    (d / "merges.txt").write_text("#version: 0.2\na b\n")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "CTRLTokenizer"}))
    (tmp_path / "in.txt").write_text("ab ab\n")
    proc = _submit(tmp_path / "in.txt", tmp_path / "o", d, check=EXIT_TOKENIZER)
    assert "slow (Python) tokenizer" in proc.stderr


def test_missing_tokenizer_and_missing_eos(tmp_path, sample_tokenizer):
    (tmp_path / "in.txt").write_text("hello\n")
    proc = _submit(tmp_path / "in.txt", tmp_path / "o", tmp_path / "nope" / "tokenizer.json", check=EXIT_TOKENIZER)
    assert "does not exist" in proc.stderr
    proc = _submit(tmp_path / "in.txt", tmp_path / "o", sample_tokenizer, "--eos-token", "<nope>", check=EXIT_TOKENIZER)
    assert "'<nope>' is not in the vocabulary" in proc.stderr


def test_mismatched_resubmit_is_refused_then_overwritten(tmp_path, sample_tokenizer):
    from shardprep.demo_data import build_sample_tokenizer

    other = build_sample_tokenizer(tmp_path / "other" / "tokenizer.json", vocab_size=500)
    (tmp_path / "in.txt").write_text("hello world\n")
    out = tmp_path / "o"
    _submit(tmp_path / "in.txt", out, sample_tokenizer)
    proc = _submit(tmp_path / "in.txt", out, other, check=EXIT_PLAN_CONFLICT)
    assert "different plan" in proc.stderr and "tokenizer differs" in proc.stderr and "--overwrite" in proc.stderr
    proc = _submit(tmp_path / "in.txt", out, sample_tokenizer, "--layout", "doc", check=EXIT_PLAN_CONFLICT)
    assert "options differ: layout" in proc.stderr
    _submit(tmp_path / "in.txt", out, other, "--overwrite")
    index = orjson.loads((out / "index.json").read_bytes())
    assert index["tokenizer"]["source"] == str(other) and index["tokenizer"]["vocab_size"] < 600


def test_changed_input_after_planning_is_refused(tmp_path, sample_tokenizer):
    f = tmp_path / "in.txt"
    f.write_text("hello world\n")
    run_cli("plan", "--one-file-per-task", "-i", f, "-o", tmp_path / "o", "-t", sample_tokenizer)
    f.write_text("hello world, changed\n")
    proc = run_cli("run-task", tmp_path / "o", "--task-id", "0", check=EXIT_INPUT)
    assert "changed since it was planned" in proc.stderr


def test_bad_option_values_name_the_option(tmp_path, sample_tokenizer):
    (tmp_path / "in.txt").write_text("x\n")
    proc = _submit(tmp_path / "in.txt", tmp_path / "o", sample_tokenizer, "--chunk-tokens", "0", check=EXIT_USAGE)
    assert "--chunk-tokens=0" in proc.stderr
    proc = _submit(tmp_path / "in.txt", tmp_path / "o", sample_tokenizer, "--max-doc-bytes", "lots", check=EXIT_USAGE)
    assert "lots" in proc.stderr


def test_verify_names_corrupt_and_truncated_shards(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"{i}.txt").write_text("\n".join(f"document {i}-{j} with some words" for j in range(50)) + "\n")
    out = tmp_path / "o"
    _submit(raw, out, sample_tokenizer)
    run_cli("verify", out)
    with open(out / "shard-00001.tar", "r+b") as f:  # flip one byte inside the token payload
        f.seek(600)
        b = f.read(1)
        f.seek(600)
        f.write(bytes([b[0] ^ 0xFF]))
    os.truncate(out / "shard-00002.tar", 700)
    proc = run_cli("verify", out, check=EXIT_INCOMPLETE)
    assert "BAD shard-00001.tar: sha256 differs" in proc.stderr
    assert "BAD shard-00002.tar: size 700" in proc.stderr
    assert "shard-00000.tar" not in proc.stderr
