"""``shardprep trace``: a step's documents as the loader reads them, the inverse (--find-doc), a saved state,
quarantine files applied as the loader applies them, --text, one-line refusals, and no torch imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from loader_helpers import make_dataset

from shardprep.loader.locate import DocRef
from shardprep.loader.trace import RunOptions, open_run


@pytest.fixture(scope="module")
def output(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("trace"), sample_tokenizer, [30, 12, 25], chunk_tokens=300, seed=9)


def trace_json(*args) -> dict:
    return json.loads(run_cli("trace", *map(str, args), "--json").stdout)


def test_step_rows_are_the_documents_of_the_loaders_batch(output):
    from shardprep.loader import ShardDataset, make_dataloader

    ds = ShardDataset(str(output), mode="pack", seq_len=16, seed=4, return_doc_info=True)
    for rank in range(3):
        batches = list(make_dataloader(ds, batch_size=2, rank=rank, world_size=3))
        for step in (0, len(batches) // 2, len(batches) - 1):
            got = trace_json(output, "--step", step, "--rank", rank, "--world-size", 3, "--batch-size", 2,
                             "--seq-len", 16, "--seed", 4)
            rows = got["ranks"][0]["rows"]
            for row, doc_ids in zip(rows, batches[step]["doc_ids"]):
                want = [k for k, _ in __import__("itertools").groupby(doc_ids.tolist())]
                assert [d["doc_id"] for d in row] == want
                assert sum(d["tokens"][1] - d["tokens"][0] for d in row) == 16
                assert all(d["note"] == "origin not recorded (format 1 shard)" and d["task_inputs"] for d in row)


def forward_scan(traced, epochs: int) -> dict[DocRef, set]:
    """Every (epoch, step, rank, row) of ``epochs`` epochs, per document, by walking every step."""
    found: dict[DocRef, set] = {}
    step = 0
    while True:
        epoch, ranges, _ = traced.batch(step, 0)
        if epoch >= epochs:
            return found
        for rank in range(traced.world):
            e, _, rows = traced.batch(step, rank)
            for i, row in enumerate(rows):
                for span in row:
                    found.setdefault(DocRef(span.source, span.shard, span.doc), set()).add((e, step, rank, i))
        step += 1


@pytest.mark.parametrize("mode,world,batch", [("pack", 2, 3), ("pad", 3, 2), ("doc", 2, 1)])
def test_find_doc_returns_the_steps_that_read_it_and_only_those(output, mode, world, batch):
    opts = RunOptions(mode=mode, seq_len=None if mode == "doc" else 12, seed=1, world=world, batch=batch)
    traced = open_run(str(output), opts)
    scan = forward_scan(traced, 2)
    docs = [DocRef(0, s, d) for s in range(3) for d in range(int(traced.reading.sources[0].shard_docs[s]))]
    dropped = 0
    for ref in docs:
        reads = traced.find(ref, epochs=2)
        assert {(r["epoch"], r["step"], r["rank"], r["row"]) for r in reads if r["step"] is not None} == \
            scan.get(ref, set())
        dropped += sum(r.get("why") == "dropped" for r in reads)
    assert mode == "doc" or dropped > 0           # the remainder that keeps ranks equal shows up as such


def test_find_doc_cli_and_a_dropped_document(output):
    got = trace_json(output, "--find-doc", 5, "--world-size", 2, "--batch-size", 4, "--mode", "pad", "--seq-len", 8,
                     "--epochs", 3)
    assert got["document"]["doc_id"] == 5 and len(got["reads"]) == 3
    assert {r["epoch"] for r in got["reads"]} == {0, 1, 2}
    text = run_cli("trace", output, "--find-doc", 5, "--world-size", 2, "--batch-size", 4, "--mode", "pad",
                   "--seq-len", 8, "--steps", 3).stdout
    assert "doc 5 (id 5)" in text.splitlines()[0]


def test_state_gives_the_options_and_the_position(output, tmp_path):
    from shardprep.loader import ShardDataset, make_dataloader

    ds = ShardDataset(str(output), mode="pack", seq_len=16, seed=2)
    loader = make_dataloader(ds, batch_size=2, rank=1, world_size=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    following = next(it)["input_ids"].tolist()
    step = state.get("step", 0)            # format /2 counts global steps; /1 counts from the saved position
    got = trace_json(output, "--state", path, "--step", step, "--rank", 1, "--world-size", 2)
    rows = got["ranks"][0]["rows"]
    from loader_helpers import documents_by_shard
    docs = documents_by_shard(output)
    names = [e["name"] for e in json.loads((output / "index.json").read_text())["shards"]]
    assert [[t for d in row for t in docs[names.index(d["shard"])][d["doc"]][d["tokens"][0]:d["tokens"][1]]]
            for row in rows] == following
    proc = run_cli("trace", output, "--state", path, "--step", 0, "--world-size", 2, "--seed", 3, check=2)
    assert proc.stderr.count("\n") == 1 and "--seed=3 but the loader state says seed=2" in proc.stderr


def test_quarantine_is_applied_as_the_loader_applies_it(output, tmp_path):
    q = tmp_path / "q.yaml"
    q.write_text("steps: [[2, 4]]\ndocuments: [3, 40]\nshards: [shard-00001.tar]\n")
    opts = dict(mode="pad", seq_len=8, seed=0, world=2, batch=2)
    plain = open_run(str(output), RunOptions(**opts))
    from shardprep.loader.quarantine import load_quarantine
    skipped = open_run(str(output), RunOptions(**opts), quarantine=load_quarantine(str(q)))
    seen = forward_scan(skipped, 1)
    banned = {DocRef(0, 0, 3), DocRef(0, 1, 10)} | {DocRef(0, 1, d) for d in range(12)}
    assert not banned & set(seen)
    before = forward_scan(plain, 1)
    steps_2_4 = {ref for ref, hits in before.items() if any(2 <= s <= 4 for _, s, _, _ in hits)}
    assert not (steps_2_4 - {r for r, h in before.items() if len(h) > 1}) & set(seen)
    got = trace_json(output, "--quarantine", q, "--step", 0, "--world-size", 2, "--batch-size", 2, "--mode", "pad",
                     "--seq-len", 8)
    assert all(d["doc_id"] not in (3, 40) and d["shard"] != "shard-00001.tar" for r in got["ranks"] for row in r["rows"]
               for d in row)


def test_refusals_are_one_line(output, tmp_path):
    def one_line(*args, code=2, says=""):
        proc = run_cli("trace", output, *map(str, args), check=code)
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr

    one_line("--step", 0, says="--world-size and --batch-size are needed")
    one_line("--step", 0, "--find-doc", 1, "--world-size", 1, "--batch-size", 1, says="give --step N")
    one_line("--find-doc", 999, "--world-size", 1, "--batch-size", 1, "--seq-len", 8, says="no document 999")
    one_line("--step", 0, "--rank", 5, "--world-size", 2, "--batch-size", 1, "--seq-len", 8, says="--rank=5 is invalid")
    bad = tmp_path / "bad.json"
    bad.write_text('{"documents": [1], "documents": [2]}')
    one_line("--step", 0, "--world-size", 1, "--batch-size", 1, "--seq-len", 8, "--quarantine", bad,
             says="duplicate key 'documents'")
    missing = tmp_path / "m.json"
    missing.write_text('{"documents": [12345]}')
    one_line("--step", 0, "--world-size", 1, "--batch-size", 1, "--seq-len", 8, "--quarantine", missing,
             says=f"{missing}: documents: '12345': document '12345': no document 12345")


def test_trace_does_not_import_torch(output):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "shardprep", "trace", str(output), "--step", "1",
                           "--world-size", "2", "--batch-size", "2", "--seq-len", "16"],
                          capture_output=True, text=True, check=True)
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "shardprep.loader.rowdocs" in imported and not [m for m in imported if m.split(".")[0] == "torch"]


def test_text_prints_each_documents_text_from_its_input(output, monkeypatch):
    """With origins recorded (faked here: this checkout's sidecars may predate them) and the plan's reader."""
    import shardprep.job.sources as sources
    from shardprep.inputs.lookup import DocumentSource
    from shardprep.loader.docorigin import Provenance

    class FakeOrigins:
        def __getitem__(self, doc):
            return type("O", (), {"input": 0, "offset": 100 * doc, "line": doc + 1})()

    real = Provenance.sidecar

    def sidecar(self, source, shard):
        side = real(self, source, shard)
        return type("S", (), {"origins": FakeOrigins(), "inputs": side.inputs, "format_version": 3})()

    monkeypatch.setattr(Provenance, "sidecar", sidecar)
    monkeypatch.setattr(sources, "plan_sources", lambda root: "plan")
    monkeypatch.setattr(sources, "document_record",
                        lambda plan, i, off: DocumentSource(i, "in.txt", off, "byte", "", f"text at {off}"))
    got = trace_json(output, "--step", 1, "--rank", 0, "--world-size", 1, "--batch-size", 2, "--mode", "pad",
                     "--seq-len", 8, "--text")
    for d in [d for row in got["ranks"][0]["rows"] for d in row]:
        assert d["text"] == f"text at {100 * d['doc']}" and d["line"] == d["doc"] + 1 and d["kind"] == "byte"


def test_retokenized_text_is_the_batch(output):
    """Acceptance (issue 29): re-tokenizing the text trace points to gives the row's ids exactly; needs shards
    that record their documents' origins (format 3)."""
    from tokenizers import Tokenizer

    from shardprep.loader import ShardDataset, make_dataloader

    side = json.loads((output / "shard-00000.json").read_text())
    if "origins" not in side:
        pytest.skip("these shards record no origins (format 1): provenance lands with issue 29's sidecar change")
    index = json.loads((output / "index.json").read_text())
    tok, info = Tokenizer.from_file(str(output / "tokenizer.json")), index["tokenizer"]
    ds = ShardDataset(str(output), mode="pack", seq_len=16, seed=8)
    batches = list(make_dataloader(ds, batch_size=2, rank=0, world_size=1))
    for step in np.random.default_rng(0).choice(len(batches), 4, replace=False).tolist():
        got = trace_json(output, "--step", step, "--world-size", 1, "--batch-size", 2, "--seq-len", 16, "--seed", 8,
                         "--text")
        for row, want in zip(got["ranks"][0]["rows"], batches[step]["input_ids"].tolist()):
            ids = []
            for d in row:
                doc = ([info["bos_id"]] if info["add_bos"] else []) + tok.encode(d["text"], add_special_tokens=False).ids \
                    + ([info["eos_id"]] if info["add_eos"] else [])
                ids += doc[d["tokens"][0]:d["tokens"][1]]
            assert ids == want
