"""Issue 31, item 7 (a, b, e): inputs that used to lose or change documents without a word.

a. A UTF-8 BOM at byte 0 of a txt or jsonl input is an encoding mark: it became tokens of document 0 (txt)
   or made line 1 malformed JSON (jsonl).  Only byte 0 of a file is a BOM: one inside the file, or at the
   start of a task's range deep inside it, is text.
b. Objects whose key has a ``.``/``..`` segment under an input prefix were left out silently; they are still
   left out (``stage`` refuses them too) but named in a warning with their count.
e. A number beyond a double's range (``1e400``) in another field of a jsonl document dropped the document as
   malformed; only the text field matters, so it is kept, by the fast path and the per-line path alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import plan_inputs, run_cli, shard_documents

from shardprep.api import tokenize_directory
from shardprep.inputs.batches import item_batches
from shardprep.inputs.discover import discover_inputs
from shardprep.inputs.readers import SkipLog, WorkItem, iter_documents
from shardprep.job.options import TokenizeOptions

BOM = "\ufeff"


def _skipped(output: Path) -> dict[str, int]:
    totals: dict[str, int] = {}
    for sidecar in output.glob("shard-*.json"):
        for reason, n in json.loads(sidecar.read_text())["skipped"].items():
            totals[reason] = totals.get(reason, 0) + n
    return {k: v for k, v in totals.items() if v}


@pytest.fixture(scope="module")
def twins(tmp_path_factory, sample_tokenizer) -> tuple[Path, Path]:
    """The same documents tokenized twice: from files with a BOM at byte 0 and ``1e400`` in an id field,
    and from the same files without either."""
    root = tmp_path_factory.mktemp("twins")
    odd, plain = root / "odd", root / "plain"
    for d, bom, big in ((odd, BOM, "1e400"), (plain, "", "1")):
        d.mkdir()
        (d / "a.txt").write_text(f"{bom}first document\nsecond document\n", encoding="utf-8")
        (d / "b.jsonl").write_text(f'{bom}{{"text": "json one"}}\n{{"text": "json two"}}\n', encoding="utf-8")
        (d / "c.jsonl").write_text(f'{{"text": "keep me", "id": {big}}}\n{{"text": "and me", "score": -{big}}}\n',
                                   encoding="utf-8")
    outs = tuple(tokenize_directory(d, root / f"out-{d.name}", sample_tokenizer, workers=1) for d in (odd, plain))
    return outs[0], outs[1]


def test_a_bom_at_byte_0_and_a_huge_number_elsewhere_change_no_document(twins):
    odd, plain = twins
    assert len(shard_documents(plain)) == 6
    assert shard_documents(odd) == shard_documents(plain)
    assert _skipped(odd) == {}          # not 'malformed_json' for line 1 of b.jsonl nor for c.jsonl


def test_a_bom_inside_a_file_or_at_a_range_start_deep_inside_it_is_text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(f"{BOM}head\n{BOM}middle\ntail\n".encode())
    inp = discover_inputs([str(path)])[0]
    opts = TokenizeOptions()
    assert list(iter_documents(inp, WorkItem(0), opts, SkipLog())) == ["head", f"{BOM}middle", "tail"]
    start = len(f"{BOM}head\n".encode())            # a later task's range starts with the BOM
    assert list(iter_documents(inp, WorkItem(0, start, None, "bytes", None), opts, SkipLog())) == \
        [f"{BOM}middle", "tail"]


def test_a_bom_only_first_line_is_an_empty_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(f'{BOM}\n{{"text": "x"}}\n'.encode())
    skips = SkipLog()
    docs = list(iter_documents(discover_inputs([str(path)])[0], WorkItem(0), TokenizeOptions(), skips))
    assert docs == ["x"] and skips.counts["empty"] == 1 and skips.examples[0].line == 1


@pytest.mark.parametrize("fast", [True, False])
def test_huge_numbers_outside_the_text_field_keep_the_document_on_both_paths(tmp_path, fast):
    lines = [b'{"text": "kept", "id": 1e400}', b'{"id": [1, {"deep": -2e999}], "text": "kept too"}',
             b'{"text": 1e400}', b'{"text": "lone surrogate elsewhere", "n": 1e400, "s": "\\ud800"}',
             b'{"text": "nan elsewhere", "n": 1e400, "x": NaN}', b'{"text": "ok"}']
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    skips = SkipLog()
    docs = [d for b in item_batches(discover_inputs([str(path)])[0], WorkItem(0), TokenizeOptions(), skips, fast=fast)
            for d in b.texts()]
    assert docs == ["kept", "kept too", "ok"]
    assert [(e.reason, e.line) for e in skips.examples] == \
        [("missing_field", 3), ("malformed_json", 4), ("malformed_json", 5)]
    assert "not a string (float)" in skips.examples[0].detail


@pytest.mark.s3
def test_keys_with_dot_segments_under_an_input_prefix_are_named(s3_endpoint, sample_tokenizer, tmp_path):
    from s3_server import make_bucket, s3_client

    bucket = make_bucket(s3_endpoint, "dots")
    client = s3_client(s3_endpoint)
    for key in ("raw/a.txt", "raw/../x.txt", "raw/./y.txt", "raw/sub/../z.txt", "raw/.hidden.txt"):
        client.put_object(Bucket=bucket, Key=key, Body=b"some text\n")
    out = tmp_path / "out"
    proc = run_cli("plan", "--input", f"s3://{bucket}/raw/", "--output", out, "--tokenizer", sample_tokenizer,
                   "--endpoint-url", s3_endpoint)
    assert [i.path for i in plan_inputs(out)] == [f"s3://{bucket}/raw/a.txt"]
    warned = [line for line in proc.stderr.splitlines() if "not a safe path" in line]
    assert len(warned) == 1, proc.stderr
    assert "left out 3 object(s)" in warned[0]
    for key in ("raw/../x.txt", "raw/./y.txt", "raw/sub/../z.txt"):
        assert f"s3://{bucket}/{key}" in warned[0]
    assert ".hidden.txt" not in proc.stderr          # a dot-file is skipped as ever, without a warning
