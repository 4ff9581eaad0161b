"""``shardprep repair`` (issue 23, "Self-repair"): a shard that ``verify`` finds bad is rebuilt from the frozen
plan, byte-identical to the sha256 index.json records, and the loader then yields exactly the batches it
did before the damage.  Refusals: inputs changed since planning, a rebuild that does not reproduce the
published sha256 (nothing replaced), another run holding the output.  Real CLI, real loader."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INCOMPLETE, EXIT_INPUT, EXIT_PLAN_CONFLICT, EXIT_USAGE

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("repair")
    corpus = root / "in"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"part-{i}.txt").write_text("\n".join(sample_documents(150, seed=20 + i)) + "\n")
    out = root / "out"
    run_cli("submit", "--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--chunk-tokens", "700",
            "--no-progress")
    return out


@pytest.fixture
def out(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "out"))


def _batches(out: Path) -> list[dict]:
    from shardprep.loader import ShardDataset, make_dataloader

    ds = ShardDataset(out, mode="pack", seq_len=64, seed=7, shuffle=True, return_doc_info=True)
    return list(make_dataloader(ds, batch_size=4))


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".shardprep.lock"}


def test_bad_shards_are_rebuilt_byte_identical_and_the_loader_order_is_unchanged(out):
    before_files = _files(out)
    before = _batches(out)
    _flip(out / "shard-00001.tar", 700)                              # a flipped bit in the token data
    with open(out / "shard-00002.tar", "r+b") as f:                  # a truncated copy
        f.truncate(1024)
    (out / "shard-00003.json").unlink()                              # a lost sidecar
    bad = run_cli("verify", out, check=EXIT_INCOMPLETE)
    assert "3 bad shard(s)" in bad.stderr

    fixed = run_cli("repair", out)
    assert "repaired shard-00001.tar (sha256 differs from index): sha256 matches index.json" in fixed.stdout
    assert "repaired shard-00002.tar (size" in fixed.stdout
    assert "repaired shard-00003.tar and its sidecar (sidecar unreadable" in fixed.stdout
    assert "shard-00000" not in fixed.stdout
    run_cli("verify", out)
    after_files = _files(out)
    for name, data in before_files.items():
        if name != "shard-00003.json":                               # rebuilt: its informational stats differ
            assert after_files[name] == data, name
    assert not [p for p in out.iterdir() if p.name.startswith(".repair.")]
    after = _batches(out)
    assert len(after) == len(before) > 0
    for a, b in zip(before, after):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    again = run_cli("repair", out, "--shard", "1")
    assert "nothing to repair (shard 1 verified)" in again.stdout


def test_repair_refuses_changed_inputs_a_different_rebuild_and_a_held_lock(out):
    from shardprep.storage.lock import output_lock

    _flip(out / "shard-00001.tar", 700)
    corrupt = (out / "shard-00001.tar").read_bytes()
    source = Path(orjson.loads((out / "shard-00001.json").read_bytes())["inputs"][0]["path"])
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # touched since planning
    try:
        proc = run_cli("repair", out, check=EXIT_INPUT)
        assert f"input {source} changed since it was planned" in proc.stderr and "Traceback" not in proc.stderr
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (out / "shard-00001.tar").read_bytes() == corrupt

    index = orjson.loads((out / "index.json").read_bytes())
    published = index["shards"][1]["sha256"]
    index["shards"][1]["sha256"] = "0" * 64                          # a rebuild that cannot match it
    (out / "index.json").write_bytes(orjson.dumps(index, option=orjson.OPT_INDENT_2) + b"\n")
    proc = run_cli("repair", out, check=EXIT_INCOMPLETE)
    assert f"rebuilt shard-00001.tar has sha256 {published[:16]}... " in proc.stderr
    assert f"but {out / 'index.json'} records {'0' * 16}... " in proc.stderr and "not replaced" in proc.stderr
    assert (out / "shard-00001.tar").read_bytes() == corrupt
    index["shards"][1]["sha256"] = published
    (out / "index.json").write_bytes(orjson.dumps(index, option=orjson.OPT_INDENT_2) + b"\n")

    with output_lock(out):      # held by this process: the repair must be another one to meet it
        proc = run_cli("repair", out, check=EXIT_PLAN_CONFLICT, process=True)
    assert f"{out} is in use by another shardprep run" in proc.stderr
    assert "lists no shard-00009.tar" in run_cli("repair", out, "--shard", "9", check=EXIT_USAGE).stderr
    assert "repaired shard-00001.tar" in run_cli("repair", out).stdout
    run_cli("verify", out)
    assert not [p for p in out.iterdir() if p.name.startswith(".repair.")]
