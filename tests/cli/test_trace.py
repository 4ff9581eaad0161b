"""``shardprep trace``: a step's documents as the loader reads them, with their real origins (format 3) and
what a format 1 shard cannot tell, the inverse (--find-doc), a saved state, quarantine files applied as the
loader applies them, --text, one-line refusals, no torch imported, and the acceptance property: the text
trace points to, re-tokenized as the task tokenized it, is exactly the batch's rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from loader_helpers import as_format_1, make_dataset

from shardprep.loader.locate import DocRef
from shardprep.loader.trace import RunOptions, open_run


@pytest.fixture(scope="module")
def output(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("trace"), sample_tokenizer, [30, 12, 25], chunk_tokens=300, seed=9)


@pytest.fixture(scope="module")
def old_output(output, tmp_path_factory) -> Path:
    """The same data as a release before format 3 wrote it: no origins."""
    return as_format_1(output, tmp_path_factory.mktemp("trace-old") / "out")


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
                assert all(Path(d["input"]).parent.name == "corpus" and d["kind"] == "byte" and d["line"] >= 1
                           for d in row)


def test_format_1_shards_say_what_they_cannot_tell(output, old_output):
    """Shards written before origins: the loader reads them as before; trace names the task's inputs
    instead, gives no text, and the inverse still works."""
    from shardprep.loader import ShardDataset, make_dataloader

    def rows(path):
        return [b["input_ids"].tolist() for b in make_dataloader(ShardDataset(str(path), mode="pack", seq_len=16),
                                                                 batch_size=2)]
    assert rows(old_output) == rows(output)
    got = trace_json(old_output, "--step", 1, "--world-size", 2, "--batch-size", 2, "--seq-len", 16, "--text")
    items = [d for r in got["ranks"] for row in r["rows"] for d in row]
    assert items and all(d["input"] is None and d["note"] == "origin not recorded (format 1 shard)" for d in items)
    assert all(d["task_inputs"] and d["task_inputs"][0]["path"].endswith(".txt") for d in items)
    assert all(d["text"] is None and d["text_note"] == "no origin recorded: no text" for d in items)
    text = run_cli("trace", old_output, "--step", 1, "--rank", 0, "--world-size", 2, "--batch-size", 2,
                   "--seq-len", 16).stdout
    assert "origin not recorded (format 1 shard); the task read: /" in text.splitlines()[1]
    found = trace_json(old_output, "--find-doc", 5, "--world-size", 1, "--batch-size", 1, "--mode", "doc")
    assert found["document"]["note"].startswith("origin not recorded") and found["reads"][0]["step"] is not None


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


def test_text_prints_each_documents_text_from_its_input(output):
    """--text: each document's line of its input, which is where its origin (offset, line) points."""
    got = trace_json(output, "--step", 1, "--world-size", 2, "--batch-size", 2, "--mode", "pad", "--seq-len", 8,
                     "--text")
    items = [d for r in got["ranks"] for row in r["rows"] for d in row]
    assert items
    for d in items:
        raw = Path(d["input"]).read_bytes()
        assert raw[:d["offset"]].count(b"\n") == d["line"] - 1 and (d["offset"] == 0 or raw[d["offset"] - 1] == 10)
        assert d["text"] == raw[d["offset"]:].split(b"\n", 1)[0].decode()
        assert d["text_note"] == f"whole document; the row holds its tokens [{d['tokens'][0]}, {d['tokens'][1]})"
    text = run_cli("trace", output, "--step", 1, "--rank", 0, "--world-size", 2, "--batch-size", 2, "--mode", "pad",
                   "--seq-len", 8, "--text").stdout.splitlines()
    first = items[0]
    assert text[1].endswith(f": {first['input']} byte {first['offset']} line {first['line']}")
    assert text[2] == f"    text ({first['text_note']}): {first['text']!r}"


@pytest.fixture(scope="module")
def mixture(output, tmp_path_factory, sample_tokenizer) -> tuple[Path, dict[str, Path]]:
    """A two-source mixture spec over ``output`` and a second dataset."""
    root = tmp_path_factory.mktemp("trace-mix")
    sources = {"a": output, "b": make_dataset(root / "b", sample_tokenizer, [14, 20], chunk_tokens=200, seed=4)}
    spec = root / "mix.json"
    spec.write_text(json.dumps({"sources": [{"name": n, "path": str(p), "weight": w}
                                            for (n, p), w in zip(sources.items(), (0.6, 0.4))]}))
    return spec, sources


def loader_rows(batch: dict, mode: str) -> list[list[int]]:
    """Each row's ids as the training loop got them (padding left out; doc mode: the one item)."""
    if mode == "doc":
        return [batch["input_ids"].tolist()]
    if "attention_mask" in batch:
        return [row[mask.bool()].tolist() for row, mask in zip(batch["input_ids"], batch["attention_mask"])]
    return batch["input_ids"].tolist()


@pytest.mark.parametrize("case", ["pack", "pad", "doc", "mixture"])
def test_retokenized_text_is_the_batch(output, mixture, case):
    """Acceptance (issue 29): for random steps and ranks, the text ``trace --text`` reads back from each row's
    documents' inputs (``job.sources.document_record``), encoded as the task encoded it (the job's tokenizer
    and BOS/EOS) and cut to the row's token range, gives exactly the loader's rows of that batch."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "inputs"))
    from origin_jobs import text_ids

    from shardprep.loader import ShardDataset, make_dataloader

    mode = "pack" if case == "mixture" else case
    spec, sources = mixture
    data, total = (spec, 9_000) if case == "mixture" else (output, None)
    encode = {name: text_ids(path) for name, path in sources.items()}
    kw = {} if mode == "doc" else {"seq_len": 16}
    ds = ShardDataset(str(data), mode=mode, seed=8, total_tokens=total, **kw)
    batch = None if mode == "doc" else 2
    rng = np.random.default_rng(len(case))
    args = ["--world-size", 2, "--mode", mode, "--seed", 8, "--text"] + (["--seq-len", 16] if kw else []) \
        + (["--batch-size", batch] if batch else []) + (["--total-tokens", total] if total else [])
    checked, seen = 0, set()
    for rank in (0, 1):
        batches = list(make_dataloader(ds, batch_size=batch, rank=rank, world_size=2))
        for step in rng.choice(len(batches), min(4, len(batches)), replace=False).tolist():
            got = trace_json(data, "--step", step, "--rank", rank, *args)
            rows = got["ranks"][0]["rows"]
            assert len(rows) == len(loader_rows(batches[step], mode))
            for row, want in zip(rows, loader_rows(batches[step], mode)):
                ids = []
                for d in row:
                    assert d["text"] is not None, d
                    name = d["source"] if case == "mixture" else "a"
                    seen.add(name)
                    ids += encode[name](d["text"])[d["tokens"][0]:d["tokens"][1]]
                assert ids == want, (case, rank, step)
                checked += 1
    assert checked >= 8 and seen == ({"a", "b"} if case == "mixture" else {"a"})


def test_chat_rows_with_the_runs_packing_and_a_dropped_conversation(tmp_path):
    """Chat data packed into rows: trace takes the run's pack_window and overflow (given, or from the state)
    and gives the loader's rows; a conversation overflow='drop' left out is said to be in no row."""
    from chat_data import chat_corpus

    from shardprep.loader import ShardDataset, make_dataloader

    corpus = chat_corpus(tmp_path / "chat", [[30, 80, 150, 20, 260, 45] * 3, [100, 45, 12, 230, 7] * 2], seed=3,
                         chunk_tokens=300)
    ds = ShardDataset(corpus.root, mode="pack", seq_len=200, seed=2, pack_window=5, overflow="drop",
                      return_doc_info=True)
    loader = make_dataloader(ds, batch_size=2, rank=0, world_size=1)
    batches = list(loader)
    common = ("--world-size", 1, "--batch-size", 2, "--seq-len", 200, "--seed", 2)
    for step in (0, len(batches) - 1):
        want = [sorted({g for g in ids.tolist() if g >= 0}) for ids in batches[step]["doc_ids"]]
        got = trace_json(corpus.root, "--step", step, *common, "--pack-window", 5, "--overflow", "drop")
        assert [sorted({d["doc_id"] for d in row}) for row in got["ranks"][0]["rows"]] == want
    state = tmp_path / "state.json"
    state.write_text(json.dumps(make_dataloader(ds, batch_size=2, rank=0, world_size=1).state_dict()))
    assert trace_json(corpus.root, "--step", 0, "--state", state)["ranks"][0]["rows"] == \
        trace_json(corpus.root, "--step", 0, *common, "--pack-window", 5, "--overflow", "drop")["ranks"][0]["rows"]
    refused = run_cli("trace", corpus.root, "--step", 0, "--state", state, "--pack-window", 7, check=2)
    assert "packing.window=5" in refused.stderr
    dropped = next(i for i, c in enumerate(corpus.all) if c.length > 200)
    found = trace_json(corpus.root, "--find-doc", dropped, *common, "--pack-window", 5, "--overflow", "drop")
    assert [r["step"] for r in found["reads"]] == [None]
    assert "overflow='drop'" in found["reads"][0]["why"]
