"""Issue 20: the fast reading path changes no document, counter, example or line number, and a task's
shard is the same bytes whatever path read its input and however many processes encoded it.

The per-line policy (``fast=False``) is the definition; every test here compares the fast path, and the
task's multi-process encoding, with it on hostile inputs: invalid UTF-8, NUL bytes, empty,
whitespace-only (Unicode too) and over-long lines, malformed and non-object JSON, missing, null, empty
and non-string text fields, numbers beyond a double's range, CRLF and lone CRs, a last line without a
newline, gzip and zstd, whole files and ranges deep inside them.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from conftest import examples
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep.inputs import fastpath
from shardprep.inputs.batches import item_batches
from shardprep.inputs.discover import discover_inputs
from shardprep.inputs.readers import SkipLog, WorkItem
from shardprep.job.options import TokenizeOptions

TXT_PIECES = [b"hello world", b"plain text here", b"", b" ", b"\t", "\u3000".encode(), "\xa0 ".encode(), b"\r",
              b"abc\r", b"abc\r\r", b"a\x00b", b"\xff\xfe", b"\xed\xa0\x80", b"caf\xc3", b"x" * 50, b"\x1c",
              "\x85".encode(), b" \r ", "Ünïcödé ✓".encode(), b"e100 +123 1e999",
              "\ufeffmid-file BOM".encode(), "\ufeff".encode()]
JSON_PIECES = [b'{"text": "hello", "id": 5}', b'{"text": ""}', b'{"text": "   "}', b'{"text": null}', b'{"other": 1}',
               b'{"text": 5}', b"[1,2]", b'"str"', b'{"text": "a", "x": 1e999}', b'{"text": "a", "x": 1e10}',
               b'{"text": "b", "n": 123456789012345678901234567890}', b'{"text": "a"} {"text": "b"}',
               b'{"text": "a",', b"", b"  ", b"\r", b'{"text": "caf\xc3"}', b'{"text": "ok", "x": "\xff"}',
               b'{"text": "\\u3000"}', b'{"text": "x\\ny"}', b'{"text": "dup", "text": "last"}', b'{"a":[{"b":1}',
               b'{"c":2}]}', b'{"text":"x"},{"text":"y"}', b'{"text": "\\ud800"}', b'{"text": "q"}\r',
               b'{"text": "' + b"z" * 60 + b'"}', b'\x00{"text": "nul"}', b'{"text": "digits 12345 e+100"}',
               b'{"text":"a"}{"text":"b"}', b'{"a":{"b":1}', b'{"c":2}}', b' {"text": "lead"}', b'{"text": "end"} ',
               b'{"text": "}"', b'"}"}',
               b'\xef\xbb\xbf{"text": "BOM mid-file"}', b'{"text": "\xef\xbb\xbfinner BOM", "n": -2e308}']


def test_whitespace_is_pythons():
    assert set(fastpath.WHITESPACE) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}


def _read(path: Path, item: WorkItem, opts: TokenizeOptions, fast: bool, block: int = 8 << 20,
          prefetch: bool = False) -> tuple:
    inp = discover_inputs([str(path)])[0]
    skips = SkipLog(strict=opts.strict)
    try:
        docs = [d for b in item_batches(inp, item, opts, skips, fast=fast, block_bytes=block, prefetch=prefetch)
                for d in b.texts()]
    except Exception as e:          # --strict: the same first error, word for word
        return ("error", type(e).__name__, str(e))
    return docs, skips.counts, skips.examples, skips.nul_bytes, skips.warnings


def _write(path: Path, body: bytes, compression: str | None) -> Path:
    if compression == "gz":
        body = gzip.compress(body, mtime=0)
    elif compression == "zst":
        body = zstandard.ZstdCompressor().compress(body)
    path.write_bytes(body)
    return path


_clean_txt = st.sampled_from([b"hello world", b"plain text here", "Ünïcödé ✓".encode()])
_txt_line = st.one_of(_clean_txt, _clean_txt, st.sampled_from(TXT_PIECES))
_clean_json = st.sampled_from([b'{"text": "hello", "id": 5}', b'{"id": 7, "text": "more words here"}'])
_json_line = st.one_of(_clean_json, _clean_json, st.sampled_from(JSON_PIECES))


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), kind=st.sampled_from(["line", "paragraph", "jsonl"]),
       compression=st.sampled_from([None, None, "gz", "zst"]), newline_at_end=st.booleans(),
       limit=st.sampled_from([40, 1 << 20]), strict=st.booleans(), block=st.sampled_from([7, 64, 8 << 20]))
def test_fast_path_reads_exactly_what_the_per_line_policy_reads(tmp_path_factory, data, kind, compression,
                                                                newline_at_end, limit, strict, block):
    lines = data.draw(st.lists(_json_line if kind == "jsonl" else _txt_line, max_size=40))
    body = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    if data.draw(st.booleans()):            # a BOM at byte 0 (dropped), as well as the ones inside (text)
        body = b"\xef\xbb\xbf" + body
    suffix = "jsonl" if kind == "jsonl" else "txt"
    path = _write(tmp_path_factory.mktemp("hostile") / f"in.{suffix}{'.' + compression if compression else ''}",
                  body, compression)
    item = WorkItem(0)
    if compression is None and body and data.draw(st.booleans()):       # a range deep inside the file
        start = data.draw(st.integers(0, len(body)))
        start = 0 if start == 0 else body.find(b"\n", start - 1) + 1 if b"\n" in body[start - 1:] else len(body)
        end = data.draw(st.one_of(st.none(), st.integers(start, len(body))))
        item = WorkItem(0, start, end, "bytes", 1 if start == 0 else None)
    opts = TokenizeOptions(txt_mode="paragraph" if kind == "paragraph" else "line", max_doc_bytes=limit,
                           strict=strict)
    want = _read(path, item, opts, fast=False)
    assert _read(path, item, opts, fast=True) == want
    assert _read(path, item, opts, fast=True, block=block) == want
    assert _read(path, item, opts, fast=True, block=block, prefetch=True) == want       # read ahead in a thread


def test_blocks_are_read_ahead_only_where_reads_wait(monkeypatch):
    from shardprep.inputs import blocks
    from shardprep.storage.mounts import MountEntry

    table = [MountEntry("/dev/sda1", "/", "ext4", "rw"), MountEntry("10.0.0.1@tcp:/fsx", "/fsx", "lustre", "rw"),
             MountEntry("nfs:/home", "/home", "nfs4", "rw"), MountEntry("tmpfs", "/dev/shm", "tmpfs", "rw")]
    monkeypatch.setattr(blocks, "_mounts", lambda: table)
    assert [blocks.reads_wait(p) for p in ("/data/a.txt", "/fsx/raw/a.txt", "/home/u/a.txt", "/dev/shm/a")] == \
        [False, True, True, False]


def test_fast_path_takes_clean_blocks_and_handles_their_empty_lines(tmp_path, monkeypatch):
    """The comparison above is only worth something if the fast path runs: on typical blocks (blank and
    whitespace-only lines, CRLF, missing and empty text fields) it does, and it reports the skips itself."""
    calls = {"txt": 0, "jsonl": 0}
    for name in calls:
        real = getattr(fastpath, f"{name}_block")

        def counted(*args, real=real, name=name, **kw):
            out = real(*args, **kw)
            calls[name] += out is not None
            return out
        monkeypatch.setattr(f"shardprep.inputs.batches.{name}_block", counted)
    txt = _write(tmp_path / "a.txt", b"one\r\n\r\n  \t\ntwo \xe3\x80\x80\n\xe3\x80\x80\nthree\n", None)
    docs, counts, examples, _, _ = _read(txt, WorkItem(0), TokenizeOptions(), fast=True)
    assert docs == ["one", "two \u3000", "three"] and counts["empty"] == 3
    assert [(e.line, e.byte) for e in examples] == [(2, 5), (3, 7), (5, 19)]
    jsonl = _write(tmp_path / "a.jsonl", b'{"text": "a"}\n\n{"text": ""}\n{"x": 1}\n{"text": "b"}\r\n', None)
    docs, counts, examples, _, _ = _read(jsonl, WorkItem(0), TokenizeOptions(), fast=True)
    assert docs == ["a", "b"] and counts["empty"] == 2 and counts["missing_field"] == 1
    assert [(e.reason, e.line) for e in examples] == [("empty", 2), ("empty", 3), ("missing_field", 4)]
    assert calls == {"txt": 1, "jsonl": 1}


def test_parquet_record_batches_skip_exactly_as_the_row_policy(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardprep.inputs.readers import row_texts

    values = ["doc one", None, "", "  \t", "\x1c\u3000", "x" * 50, "ünï", "last one"] * 3
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": values}), path, row_group_size=5)
    inp = discover_inputs([str(path)])[0]
    for item in (WorkItem(0, 0, None, "rows", 1), WorkItem(0, 3, 17, "rows", 4)):
        skips = SkipLog()
        got = [(int(r), -1, d) for b in item_batches(inp, item, TokenizeOptions(max_doc_bytes=40), skips)
               for r, d in zip(b.offsets, b.texts())]
        want_skips = SkipLog()
        end = len(values) if item.end is None else item.end
        want = list(row_texts(str(path), ((r, values[r]) for r in range(item.start, end)), 40, want_skips))
        assert got == want and skips.counts == want_skips.counts and skips.examples == want_skips.examples


# -- the task: one process or several, the same bytes ---------------------------------------------------------
def _mixed_inputs(d: Path) -> Path:
    """Several inputs, each with something to skip, large enough to be cut into several pieces."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d.mkdir()
    words = [f"word{i % 97} text{i % 13}" for i in range(60_000)]
    lines = [f"{w} {w}" if i % 500 else ("" if i % 1000 else "bad \udcff") for i, w in enumerate(words)]
    (d / "a.txt").write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    rows = [orjson.dumps({"text": w} if i % 700 else {"other": i}) for i, w in enumerate(words)]
    (d / "b.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    (d / "c.txt.gz").write_bytes(gzip.compress(("\n".join(words[:5000]) + "\n").encode(), mtime=0))
    pq.write_table(pa.table({"text": words[:20_000] + [None, "  "]}), d / "d.parquet", row_group_size=4000)
    return d


def _sidecar(out: Path) -> dict:
    side = json.loads((out / "shard-00000.json").read_text())
    return {k: v for k, v in side.items() if k not in ("stats", "backend")}


@pytest.mark.slow
def test_a_task_on_several_processes_writes_the_same_shard_and_sidecar(tmp_path, gpt2_tokenizer, monkeypatch):
    from shardprep.api import plan_job
    from shardprep.job import parallel
    from shardprep.job.options import PlanOptions
    from shardprep.job.task import run_task

    monkeypatch.setattr(parallel, "MIN_PIECE", 64 << 10)        # small inputs, many pieces
    inputs = _mixed_inputs(tmp_path / "in")
    shards, peaks = {}, {}
    for threads in (1, 3):
        out = tmp_path / f"out{threads}"
        plan_job([inputs], out, gpt2_tokenizer, TokenizeOptions(), PlanOptions(target_task_bytes=1 << 30))
        result = run_task(out, 0, threads=threads)
        check = result.sidecar.backend.check
        assert result.sidecar.backend.name == "gigatoken" and check is not None and check.passed
        shards[threads] = ((out / "shard-00000.tar").read_bytes(), _sidecar(out))
        peaks[threads] = result.sidecar.stats.peak_rss_bytes
    assert shards[1][0] == shards[3][0]
    assert peaks[3] > peaks[1] > 0               # the workers' memory is counted with the task's
    assert shards[1][1] == shards[3][1]
    side = shards[1][1]
    assert side["skipped"]["missing_field"] > 0 and side["skipped"]["invalid_utf8"] > 0
    assert any(e["line"] and e["line"] > 1000 for e in side["skipped_examples"])   # absolute line numbers


def _corrupting(monkeypatch, after_calls: int) -> None:
    """gigatoken whose encode of a batch after the first ``after_calls`` returns one wrong id."""
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

    real = GigatokenBackend.encode
    seen = [0]

    def encode(self, batch):
        flat, lengths = real(self, batch)
        seen[0] += 1
        if seen[0] > after_calls and flat.size:
            flat = flat.copy()
            flat[0] = (int(flat[0]) + 1) % 50000
        return flat, lengths
    monkeypatch.setattr(GigatokenBackend, "encode", encode)


def test_ids_that_differ_late_in_the_task_redo_the_shard_with_hf(tmp_path, gpt2_tokenizer, monkeypatch):
    """The check covers documents from every block, not just the first: a wrong id in a later block makes
    ``auto`` write the shard again with hf (exactly hf's ids), and the sidecar says why."""
    from helpers import reference_ids, shard_documents

    from shardprep.api import plan_job
    from shardprep.job.finalize import finalize
    from shardprep.job.options import PlanOptions
    from shardprep.job.task import run_task
    from shardprep.tokenizer import gigatoken_backend

    monkeypatch.setattr(gigatoken_backend.GigatokenBackend, "block_bytes", 4096)     # many blocks
    texts = [f"document number {i} with some words" for i in range(800)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    out = tmp_path / "out"
    plan_job([src], out, gpt2_tokenizer, TokenizeOptions(), PlanOptions(one_file_per_task=True))
    _corrupting(monkeypatch, after_calls=3)
    result = run_task(out, 0, threads=1)
    backend = result.sidecar.backend
    assert backend.name == "hf" and backend.requested == "auto" and backend.check is not None
    assert "batch" in (backend.fallback_reason or "") and (backend.check.spread_documents or 0) >= 3 * 4
    finalize(out)
    eos = json.loads((out / "job.json").read_text())["tokenizer"]["eos_id"]
    assert shard_documents(out) == reference_ids(gpt2_tokenizer, texts, eos)


def test_an_explicit_fast_backend_that_differs_fails_the_task_and_writes_nothing(tmp_path, gpt2_tokenizer,
                                                                                 monkeypatch):
    """Through the CLI: with --backend gigatoken, ids that differ from hf fail the task (exit 6)."""
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

    src = tmp_path / "in.txt"
    src.write_text("some text\nmore text\n")
    out = tmp_path / "out"
    run_cli("plan", "-i", src, "-o", out, "-t", gpt2_tokenizer, "--backend", "gigatoken")
    real = GigatokenBackend.encode

    def bad(self: GigatokenBackend, batch: Any) -> tuple[Any, Any]:
        f, n = real(self, batch)
        f = f.copy()
        f[0] += 1
        return f, n
    monkeypatch.setattr(GigatokenBackend, "encode", bad)
    # in this process, on one thread (no encoding workers, which would not carry the patch)
    proc = run_cli("run-task", out, "--task-id", "0", "--threads", "1", check=False)
    assert proc.returncode == 6, proc.stderr
    assert "does not reproduce the hf ids" in proc.stderr
    assert not (out / "shard-00000.tar").exists() and not list(out.glob(".shard-*"))
