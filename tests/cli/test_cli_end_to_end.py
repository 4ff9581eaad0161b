"""The real CLI, end to end, on every input format: the shard tokens equal, document by document, what the
tokenizer gives for each document on its own."""

from __future__ import annotations

import gzip
import json
import subprocess
import tarfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from helpers import eos_id, plan_inputs, plan_tasks, reference_ids, run_cli, shard_documents

from shardprep.demo_data import sample_documents

HARD = [
    "한국어 문장은 토크나이저에게 어려운 경우입니다.",
    "日本語と中文の混在テキスト。",
    "Emoji 👩‍👩‍👧‍👦 and flags 🏳️‍🌈 with skin tone 👍🏽",
    "special token string <|endoftext|> inside raw text stays text",
    "tabs\tand   runs of     spaces",
]


def _write_all_formats(root: Path) -> list[str]:
    """Write one file per format; return the documents in the order the plan visits them (path order)."""
    docs = sample_documents(60, seed=7) + HARD
    groups = [docs[i::6] for i in range(6)]
    expected: dict[str, list[str]] = {}

    def put(name: str, texts: list[str]) -> Path:
        expected[str(root / name)] = texts
        return root / name

    put("a.txt", groups[0]).write_text("\n".join(groups[0]) + "\n", encoding="utf-8")
    put("b.jsonl", groups[1]).write_text("".join(json.dumps({"text": t, "n": 1}) + "\n" for t in groups[1]))
    with gzip.open(put("c.txt.gz", groups[2]), "wt", encoding="utf-8") as f:
        f.write("\n".join(groups[2]) + "\n")
    put("d.jsonl.zst", groups[3]).write_bytes(zstandard.ZstdCompressor().compress(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in groups[3]).encode()))
    pq.write_table(pa.table({"text": groups[4]}), put("e.parquet", groups[4]), row_group_size=4)
    sub = root / "sub"
    sub.mkdir()
    put("sub/f.txt", groups[5]).write_text("\r\n".join(groups[5]), encoding="utf-8")  # CRLF, no final newline
    (root / "README.md").write_text("not an input: ignored in directory walks")
    return [t for path in sorted(expected) for t in expected[path]]


@pytest.mark.requires("hf")
def test_every_format_matches_independent_tokenization(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    texts = _write_all_formats(raw)
    out = tmp_path / "shards"
    proc = run_cli("submit", "--one-file-per-task", "--input", raw, "--output", out, "--tokenizer", sample_tokenizer, "--no-progress")
    assert "6 shard(s)" in proc.stdout
    assert shard_documents(out) == reference_ids(sample_tokenizer, texts, eos_id(sample_tokenizer))
    inputs = plan_inputs(out)
    assert [Path(i.path).name for i in inputs] == ["a.txt", "b.jsonl", "c.txt.gz", "d.jsonl.zst", "e.parquet", "f.txt"]
    assert all(i.size > 0 and i.mtime_ns > 0 for i in inputs)
    job = orjson.loads((out / "job.json").read_bytes())
    assert job["tokenizer"]["fingerprint"] and job["options"]["add_eos"] is True and job["summary"]["inputs"] == 6

    run_cli("verify", out)
    status = run_cli("status", out)
    assert "missing:  0" in status.stdout and "tokens" in status.stdout
    # a standard tar: `tar tf` lists it and stock webdataset iterates it
    listing = subprocess.run(["tar", "tf", out / "shard-00000.tar"], capture_output=True, text=True, check=True)
    assert listing.stdout.splitlines()[0].endswith(".tokens.u16")
    import webdataset as wds

    samples = list(wds.WebDataset(str(out / "shard-00001.tar"), shardshuffle=False))
    assert samples and {"tokens.u16", "doclens.u16"} <= set(samples[0])


def test_paragraph_mode_and_special_tokens_policy(tmp_path, sample_tokenizer):
    raw = tmp_path / "p.txt"
    paras = ["first para line one\nline two", "second <|endoftext|> para", "third\nwith\nthree lines"]
    raw.write_text("\n\n".join(paras) + "\n\n\n", encoding="utf-8")
    eos = eos_id(sample_tokenizer)
    out = tmp_path / "o1"
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer, "--txt-mode", "paragraph", "--no-progress")
    docs = shard_documents(out)
    assert docs == reference_ids(sample_tokenizer, paras, eos)
    assert docs[1].count(eos) == 1  # the literal string in text did not become a control token

    out2 = tmp_path / "o2"
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out2, "-t", sample_tokenizer, "--txt-mode", "paragraph",
            "--allow-special-tokens", "--no-eos", "--bos", "--bos-token", "<|pad|>", "--no-progress")
    docs2 = shard_documents(out2)
    assert docs2[1].count(eos) == 1 and docs2[1][-1] != eos  # now the in-text string is the special id
    assert all(d[0] == 1 for d in docs2)  # BOS (<|pad|> has id 1 in the sample tokenizer)


def test_split_large_file_and_pack_small_files(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    big_docs = sample_documents(3000, seed=1)
    (raw / "big.txt").write_text("\n".join(big_docs) + "\n", encoding="utf-8")
    small = []
    for i in range(40):
        d = sample_documents(3, seed=100 + i)
        small.extend(d)
        (raw / f"small-{i:03d}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in d))
    out = tmp_path / "out"
    size = (raw / "big.txt").stat().st_size
    run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--target-task-bytes", str(size // 4 + 1), "--force-small-tasks",
            "--no-progress", "--chunk-tokens", "4096")
    tasks = [t.items for t in plan_tasks(out)]
    big_tasks = [t for t in tasks if t[0].input.path.endswith("big.txt")]
    # four pieces of the big file; the 40 small files (~20 KB, under half the target) are not a tiny
    # task of their own: they join the task before them, after its piece, in input order
    assert len(tasks) == len(big_tasks) == 4 and all(len(t) == 1 for t in big_tasks[:3])
    assert [i.input.path.rsplit("/", 1)[1] for i in big_tasks[3][1:]] == [f"small-{i:03d}.jsonl" for i in range(40)]
    # the ranges tile the big file exactly, on line boundaries
    ranges = sorted((t[0].work.start, t[0].work.end) for t in big_tasks)
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    data = (raw / "big.txt").read_bytes()
    assert all(data[s - 1:s] == b"\n" for s, _ in ranges[1:])
    assert shard_documents(out) == reference_ids(sample_tokenizer, big_docs + small, eos_id(sample_tokenizer))
    index = orjson.loads((out / "index.json").read_bytes())
    assert index["totals"]["documents"] == 3000 + 120
    assert max(s["samples"] for s in index["shards"]) > 1  # chunking at 4096 tokens happened


def test_input_glob_and_list_file_and_doc_layout(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    docs = sample_documents(20, seed=3)
    for i in range(4):
        (raw / f"x{i}.txt").write_text("\n".join(docs[i * 5:(i + 1) * 5]) + "\n")
    (tmp_path / "list.txt").write_text("# inputs\nraw/x2.txt\nraw/x3.txt\n")
    out = tmp_path / "o"
    run_cli("submit", "--one-file-per-task", "-i", str(raw / "x[01].txt"), "-i", f"@{tmp_path / 'list.txt'}", "-o", out,
            "-t", sample_tokenizer, "--layout", "doc", "--no-progress")
    assert shard_documents(out) == reference_ids(sample_tokenizer, docs, eos_id(sample_tokenizer))
    with tarfile.open(out / "shard-00000.tar") as tf:
        assert len(tf.getnames()) == 5  # one member per document in the doc layout
    inspect = run_cli("inspect", out / "shard-00000.tar", "--decode", "2")
    assert "5 documents" in inspect.stdout and docs[0][:20] in inspect.stdout


def test_inspect_names_each_documents_origin(tmp_path, sample_tokenizer):
    """Format 3: each decoded document after its input and byte offset and line (a parquet input: its row);
    a format 1 shard says it records none and names the inputs its task read."""
    from loader_helpers import as_format_1

    raw = tmp_path / "raw"
    raw.mkdir()
    docs = sample_documents(8, seed=4)
    (raw / "a.txt").write_text("\n".join(docs[:4]) + "\n", encoding="utf-8")
    pq.write_table(pa.table({"text": docs[4:]}), raw / "b.parquet")
    out = tmp_path / "o"
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    data = (raw / "a.txt").read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 10][:3]
    text = run_cli("inspect", out / "shard-00000.tar", "--decode", "3", "--max-chars", "20").stdout.splitlines()
    heads = [line for line in text if line.startswith("--- document")]
    sizes = [int(h.split("(")[1].split()[0]) for h in heads]
    assert len(heads) == 3 and heads == [f"--- document {i} ({n} tokens) from {raw / 'a.txt'} byte {starts[i]} "
                                         f"line {i + 1}" for i, n in enumerate(sizes)]
    rows = run_cli("inspect", out / "shard-00001.tar", "--decode", "4").stdout
    assert [line.rsplit(" from ", 1)[1] for line in rows.splitlines() if line.startswith("--- document")] == \
        [f"{raw / 'b.parquet'} row {r}" for r in range(4)]
    old = run_cli("inspect", as_format_1(out, tmp_path / "old") / "shard-00000.tar", "--decode", "1").stdout
    assert f"  document origins: not recorded (format 1 shard); the task read: {raw / 'a.txt'}" in old
    assert " from " not in next(line for line in old.splitlines() if line.startswith("--- document"))


def test_plan_then_resubmit_is_idempotent_and_deterministic(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("\n".join(sample_documents(200, seed=5)) + "\n")
    (raw / "b.txt").write_text("\n".join(sample_documents(200, seed=6)) + "\n")
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    plan = run_cli("plan", "--one-file-per-task", "-i", raw, "-o", out1, "-t", sample_tokenizer)
    assert "2 task(s)" in plan.stdout and "to run: 2 tasks (ids 0-1)" in plan.stdout
    assert not list(out1.glob("shard-*.tar"))
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out1, "-t", sample_tokenizer, "--no-progress")
    mtimes = {p.name: p.stat().st_mtime_ns for p in out1.glob("shard-*")}
    again = run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out1, "-t", sample_tokenizer, "--no-progress")
    assert "2 done, to run: none" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out1.glob("shard-*")} == mtimes  # nothing redone
    run_cli("submit", "--one-file-per-task", "-i", raw, "-o", out2, "-t", sample_tokenizer, "--workers", "1", "--no-progress")
    for name in ("shard-00000.tar", "shard-00001.tar"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes()


def test_help_lists_every_option_with_defaults():
    for cmd in ("submit", "plan", "status", "finalize", "verify", "inspect", "demo", "run-task"):
        out = run_cli(cmd, "--help").stdout
        assert "usage: shardprep" in out
    submit = " ".join(run_cli("submit", "--help").stdout.split())
    for opt in ("--target-task-bytes", "--text-field", "--strict", "--layout", "--backend", "--executor"):
        assert opt in submit
    assert "(default: text)" in submit and "(default: pack)" in submit


