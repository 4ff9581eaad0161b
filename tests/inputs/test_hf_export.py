"""``shardprep export-hf`` and Hugging Face datasets as direct input, on datasets built inside the tests
(``Dataset.from_dict(...).save_to_disk``, parquet and json files).  No network: never a hub id."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import examples
from helpers import plan_tasks, run_cli, shard_documents
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INPUT, EXIT_PLAN_CONFLICT

# datasets is imported where a test uses it (its import costs every worker a second at collection)
pytestmark = pytest.mark.requires("hf")

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# Rows a tokenizer-facing export must handle: empty and whitespace-only texts (skipped), missing values,
# line breaks inside a document (jsonl keeps them), unicode, special-token strings.
AWKWARD = ["", "   ", None, "two\nlines", "tab\there", "한국어 문장", "emoji 👩‍👩‍👧‍👦", "<|endoftext|> as text",
           "\ttrailing spaces  ", "\r\n", "x"]


def export(*args, check=True):
    """In this process: the suite runs offline (conftest sets OFFLINE before datasets is imported)."""
    assert all(os.environ.get(k) == v for k, v in OFFLINE.items())
    return run_cli("export-hf", *args, "--no-progress", check=check)


def read_jsonl_dir(out: Path) -> list[dict]:
    rows = []
    for p in sorted(out.glob("part-*.jsonl")):
        rows.extend(orjson.loads(line) for line in p.read_bytes().splitlines())
    return rows


def non_empty(texts) -> list[str]:
    return [t for t in texts if isinstance(t, str) and t.strip()]


def make_saved(path: Path, texts: list, *, num_shards: int = 1, **extra) -> Path:
    import datasets  # type: ignore[import-untyped]  # no stubs

    datasets.Dataset.from_dict({"text": texts, **extra}).save_to_disk(str(path), num_shards=num_shards)
    return path


def test_saved_dataset_round_trips_every_text_once_with_ids_and_manifest(tmp_path):
    texts = sample_documents(300, seed=1) + AWKWARD
    random.Random(0).shuffle(texts)
    saved = make_saved(tmp_path / "saved", texts, num_shards=3, id=[f"doc-{i}" for i in range(len(texts))])
    out = tmp_path / "raw"
    proc = export(saved, "--num-files", 4, "--output", out, "--id-field", "id")
    assert "4 written now" in proc.stdout

    rows = read_jsonl_dir(out)
    expected = [(t, f"doc-{i}") for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    assert [(r["text"], r["id"]) for r in rows] == expected   # every non-empty text once, in row order

    manifest = json.loads((out / "export.json").read_text())
    n_empty = len(texts) - len(expected)
    assert manifest["status"] == "complete"
    assert manifest["source"] == str(saved.resolve()) and manifest["kind"] == "saved"
    assert (manifest["rows"], manifest["documents"]) == (len(texts), len(expected))
    assert manifest["skipped"] == {"empty": n_empty, "not_text": 0}
    assert [f["name"] for f in manifest["files"]] == sorted(p.name for p in out.glob("part-*"))
    assert sum(f["documents"] for f in manifest["files"]) == len(expected)
    assert [f["rows_start"] for f in manifest["files"]][1:] == [f["rows_end"] for f in manifest["files"]][:-1]
    assert all((out / f["name"]).stat().st_size == f["bytes"] for f in manifest["files"])
    assert len(manifest["fingerprint"]) == 64 and manifest["arguments"]["num_files"] == 4


def test_builders_parquet_and_json_and_txt_format(tmp_path):
    texts = sample_documents(120, seed=2) + ["", None, "  ", "last one"]
    dl = tmp_path / "dl"
    dl.mkdir()
    half = len(texts) // 2
    pq.write_table(pa.table({"text": texts[:half], "n": list(range(half))}), dl / "a.parquet", row_group_size=16)
    pq.write_table(pa.table({"text": texts[half:], "n": list(range(len(texts) - half))}), dl / "b.parquet")
    out = tmp_path / "from_parquet"
    export("parquet", "--data-files", str(dl / "*.parquet"), "-n", 3, "-o", out, "--format", "txt")
    lines = [line for p in sorted(out.glob("part-*.txt")) for line in p.read_text(encoding="utf-8").splitlines()]
    assert lines == non_empty(texts)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["data_files"] == [str(dl / "a.parquet"), str(dl / "b.parquet")]
    assert manifest["kind"] == "builder" and manifest["format"] == "txt"

    with open(dl / "c.jsonl", "w") as f:
        for t in AWKWARD:
            f.write(json.dumps({"body": t}) + "\n")
    out2 = tmp_path / "from_json"
    export("json", "--data-files", str(dl / "c.jsonl"), "-n", 2, "-o", out2, "--text-field", "body")
    assert [r["text"] for r in read_jsonl_dir(out2)] == non_empty(AWKWARD)

    # txt cannot hold a document with a line break: refused before anything is written
    out3 = tmp_path / "txt_refused"
    proc = export("json", "--data-files", str(dl / "c.jsonl"), "-n", 2, "-o", out3, "--text-field", "body",
                  "--format", "txt", check=EXIT_INPUT)
    assert "line break" in proc.stderr and "--format jsonl" in proc.stderr
    assert not list(out3.glob("part-*"))


def test_files_are_balanced_by_size(tmp_path):
    rng = random.Random(5)
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice([2, 20, 200, 600]))) for _ in range(3000)]
    saved = make_saved(tmp_path / "saved", texts, num_shards=2)
    out = tmp_path / "raw"
    export(saved, "-n", 7, "-o", out)
    sizes = [p.stat().st_size for p in sorted(out.glob("part-*.jsonl"))]
    longest_line = max(len(json.dumps({"text": t}, ensure_ascii=False).encode()) + 1 for t in texts)
    mean = sum(sizes) / len(sizes)
    assert len(sizes) == 7
    assert max(sizes) - min(sizes) <= 2 * longest_line, (sizes, longest_line)
    assert max(sizes) / mean < 1.02


@pytest.mark.parametrize("texts,files,empty,why", [
    (["a", "b", "c"], 8, 5, "fewer documents than files"),
    (["x" * 10_000] + ["y"] * 9, 4, 2, "a few rows hold most of the text"),
], ids=["more-files-than-rows", "one-huge-row"])
def test_empty_output_files_are_named_in_a_warning(tmp_path, texts, files, empty, why):
    saved = make_saved(tmp_path / "saved", texts)
    out = tmp_path / "raw"
    proc = export(saved, "-n", files, "-o", out)
    names = sorted(p.name for p in out.glob("part-*.jsonl") if p.stat().st_size == 0)
    assert len(names) == empty
    assert f"WARNING shardprep.hf.export: {empty} of {files} file(s) are empty ({len(texts)} document(s); {why}" \
        in proc.stderr
    assert names[0] in proc.stderr


def test_rerun_skips_complete_files_and_other_arguments_are_refused(tmp_path):
    saved = make_saved(tmp_path / "saved", sample_documents(200, seed=3))
    out = tmp_path / "raw"
    export(saved, "-n", 3, "-o", out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    proc = export(saved, "-n", 3, "-o", out)
    assert "0 written now" in proc.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before

    proc = export(saved, "-n", 4, "-o", out, check=EXIT_PLAN_CONFLICT)
    assert "num_files: 3 -> 4" in proc.stderr and "hint:" in proc.stderr
    proc = export(saved, "-n", 3, "-o", out, "--format", "txt", check=EXIT_PLAN_CONFLICT)
    assert "format: 'jsonl' -> 'txt'" in proc.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_dataset_dict_split_selection(tmp_path):
    import datasets  # type: ignore[import-untyped]  # no stubs

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a train doc", "another"]}),
                               "test": datasets.Dataset.from_dict({"text": ["a test doc"]})})
    dd.save_to_disk(str(tmp_path / "dd"))
    out = tmp_path / "raw"
    export(tmp_path / "dd", "--split", "test", "-n", 1, "-o", out)
    assert [r["text"] for r in read_jsonl_dir(out)] == ["a test doc"]
    proc = export(tmp_path / "dd", "--split", "validation", "-n", 1, "-o", tmp_path / "x", check=2)
    assert "splits train, test" in proc.stderr
    # as direct input, a whole DatasetDict is refused with the split to pass instead
    proc = run_cli("plan", "-i", tmp_path / "dd", "-o", tmp_path / "shards", "-t", "unused.json", check=EXIT_INPUT)
    assert "DatasetDict" in proc.stderr and str(tmp_path / "dd" / "train") in proc.stderr


@pytest.mark.slow
def test_kill_mid_export_leaves_no_partial_file_and_rerun_completes(tmp_path):
    filler = "lorem ipsum dolor sit amet consectetur " * 8
    saved = make_saved(tmp_path / "saved", [f"document {i} {filler}" for i in range(150_000)])
    n = 30
    ref = tmp_path / "ref"
    export(saved, "-n", n, "-o", ref)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "shardprep", "export-hf", str(saved), "-n", str(n), "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = ".part-00003-of-00030.jsonl."   # files are written in order: 0-2 are complete once 3 starts
    deadline = time.monotonic() + 120
    while not (out.is_dir() and any(name.startswith(marker) for name in os.listdir(out))):
        assert proc.poll() is None, f"export ended before it could be interrupted: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "no temporary file appeared"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    finals = sorted(out.glob("part-*"))
    assert 3 <= len(finals) < n
    for p in finals:   # whatever carries a final name is complete, byte for byte
        assert p.read_bytes() == (ref / p.name).read_bytes(), p.name
    assert json.loads((out / "export.json").read_text())["status"] == "in_progress"
    kept = {p.name: p.stat().st_mtime_ns for p in finals}

    rerun = export(saved, "-n", n, "-o", out)
    written = int(re.search(r"\((\d+) written now\)", rerun.stdout).group(1))
    assert written <= n - 3
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ref.iterdir())  # no temporary files left
    for p in ref.glob("part-*"):
        assert (out / p.name).read_bytes() == p.read_bytes()
    assert all((out / name).stat().st_mtime_ns == mtime for name, mtime in kept.items()
               if name < f"part-{n - written:05d}")


def test_saved_dataset_as_direct_input_gives_the_tokens_of_its_jsonl_export(tmp_path, sample_tokenizer):
    texts = sample_documents(400, seed=9) + AWKWARD
    random.Random(1).shuffle(texts)
    saved = make_saved(tmp_path / "saved", texts, num_shards=2)
    raw = tmp_path / "raw"
    export(saved, "-n", 3, "-o", raw)
    via_export, direct, split = tmp_path / "via_export", tmp_path / "direct", tmp_path / "direct_split"
    run_cli("submit", "-i", raw, "-o", via_export, "-t", sample_tokenizer, "--no-progress")
    run_cli("submit", "-i", saved, "-o", direct, "-t", sample_tokenizer, "--no-progress")
    # row-range planning: each arrow file cut into several tasks
    run_cli("submit", "-i", saved, "-o", split, "-t", sample_tokenizer, "--no-progress", "--target-task-bytes", "40K", "--force-small-tasks")

    reference = shard_documents(via_export)
    assert len(reference) == len(non_empty(texts))
    assert shard_documents(direct) == reference
    assert shard_documents(split) == reference
    tasks = plan_tasks(split)
    assert {it.input.format for t in tasks for it in t.items} == {"arrow"}
    assert len(tasks) > 2 and all(it.work.unit == "rows" for t in tasks for it in t.items)
    index = json.loads((direct / "index.json").read_text())
    assert index["totals"]["skipped"]["empty"] == len(texts) - len(non_empty(texts))


def test_parquet_directory_as_direct_input_by_row_ranges(tmp_path, sample_tokenizer):
    texts = sample_documents(500, seed=4)
    pdir = tmp_path / "parquet"
    pdir.mkdir()
    for k in range(2):
        part = texts[k * 250:(k + 1) * 250]
        pq.write_table(pa.table({"text": part}), pdir / f"train-{k:05d}.parquet", row_group_size=25)
    jsonl = tmp_path / "jsonl"
    export("parquet", "--data-files", str(pdir / "*.parquet"), "-n", 2, "-o", jsonl)
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("submit", "-i", pdir, "-o", a, "-t", sample_tokenizer, "--no-progress", "--target-task-bytes", "8K", "--force-small-tasks")
    run_cli("submit", "-i", jsonl, "-o", b, "-t", sample_tokenizer, "--no-progress")
    assert len(plan_tasks(a)) > 2
    assert shard_documents(a) == shard_documents(b)


@settings(max_examples=examples(60), deadline=None)
@given(batches=st.lists(st.lists(st.text(max_size=30), max_size=12), min_size=1, max_size=6),
       parts=st.integers(1, 9))
def test_arrow_row_ranges_cover_every_row_once(tmp_path_factory, batches, parts):
    """Property: the arrow splitter's ranges are non-empty, in order, and cover every row exactly once."""
    from shardprep.inputs.arrow import iter_column_slices, split_rows

    path = tmp_path_factory.mktemp("arrow") / "data.arrow"
    schema = pa.schema([("text", pa.string())])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for rows in batches:
            writer.write_batch(pa.record_batch([pa.array(rows, pa.string())], schema=schema))
    total = sum(len(b) for b in batches)
    ranges = split_rows(str(path), parts, "text")
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(s < e for s, e in ranges) or total == 0
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert len(ranges) <= max(parts, 1)
    flat = [t for rows in batches for t in rows]
    assert [v for s, e in ranges for _, col in iter_column_slices(str(path), "text", s, e) for v in col.to_pylist()] == flat
