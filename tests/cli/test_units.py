"""Fast unit and property tests of the rules that split work and write shards."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.inputs.discover import InputFile, discover_inputs
from shardprep.inputs.readers import SkipLog, WorkItem, iter_documents
from shardprep.job.cutting import split_into_tasks
from shardprep.job.options import TokenizeOptions
from shardprep.job.sizing import Sizing
from shardprep.job.state import format_array_ranges, parse_array_ranges
from shardprep.shard.reader import read_chunk, walk_tar
from shardprep.shard.writer import ShardWriter
from shardprep.storage.local import LocalSource
from shardprep.tokenizer.backend import add_boundary_tokens

line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               max_size=40)


def _docs(path: Path, item: WorkItem, mode: str) -> list[str]:
    inp = discover_inputs([str(path)])[0]
    return list(iter_documents(inp, item, TokenizeOptions(txt_mode=mode), SkipLog()))


@settings(max_examples=examples(60), deadline=None)
@given(lines=st.lists(line, min_size=1, max_size=60), target=st.integers(1, 400),
       mode=st.sampled_from(["line", "paragraph"]), trailing=st.booleans())
def test_split_ranges_read_every_document_exactly_once(tmp_path_factory, lines, target, mode, trailing):
    path = tmp_path_factory.mktemp("split") / "in.txt"
    path.write_bytes(("\n".join(lines) + ("\n" if trailing else "")).encode("utf-8"))
    inputs = discover_inputs([str(path)])
    tasks = split_into_tasks(inputs, target, TokenizeOptions(txt_mode=mode))
    items = [it for t in tasks for it in t]
    assert items[0].start == 0 and items[-1].end in (None, inputs[0].size)
    assert all(a.end == b.start for a, b in zip(items, items[1:]))
    whole = _docs(path, WorkItem(0), mode)
    pieces = [d for it in items for d in _docs(path, it, mode)]
    assert pieces == whole


def test_small_files_pack_by_bytes_and_a_small_leftover_joins_the_task_before_it(tmp_path):
    for i, size in enumerate([10, 10, 10, 50, 5, 5]):
        (tmp_path / f"{i}.txt").write_text("x" * (size - 1) + "\n")
    tasks = split_into_tasks(discover_inputs([str(tmp_path)]), 30, TokenizeOptions())
    # file 3 (one 50-byte line) cannot be cut; the 10-byte pack of files 4 and 5 joins the task before it
    assert [[w.input for w in t] for t in tasks] == [[0, 1, 2], [3, 4, 5]]
    one_each = split_into_tasks(discover_inputs([str(tmp_path)]), None, TokenizeOptions())
    assert [[w.input for w in t] for t in one_each] == [[i] for i in range(6)]


_inputs = st.lists(st.tuples(st.sampled_from(["txt", "jsonl", "parquet"]), st.sampled_from([None, "gz"]),
                             st.integers(0, 10_000), st.integers(0, 1 << 62)), min_size=1, max_size=12)


@settings(max_examples=examples(60), deadline=None)
@given(specs=_inputs, target=st.one_of(st.none(), st.integers(10_000, 40_000)), add_bos=st.booleans(),
       backend=st.sampled_from(["auto", "hf"]))
def test_streamed_fingerprint_is_the_whole_body_hash(specs, target, add_bos, backend):
    """The plan fingerprint, streamed task by task (issue 16), equals the hash of the whole canonical body
    job.json used to hold, so the same plan keeps its fingerprint across the layout change."""
    import hashlib

    import orjson

    from shardprep.job.fingerprint import Fingerprint
    from shardprep.job.plan import Plan
    from shardprep.tokenizer.load import ResolvedTokenizer, TokenizerInfo

    inputs = [InputFile(f"/data/d{k % 3}/f{k:03d}.{fmt}" + (f".{comp}" if comp else ""), size, mtime, fmt,
                        None if fmt == "parquet" else comp, 7 if fmt == "parquet" else None)
              for k, (fmt, comp, size, mtime) in enumerate(specs)]
    info = TokenizerInfo("tok.json", "f" * 64, 50257, "uint16", "<|endoftext|>", 50256, None, None, None, None)
    opts = TokenizeOptions(add_bos=add_bos, bos_token="<s>" if add_bos else None, backend=backend)
    sizing = Sizing("target" if target else "one-file-per-task", target, "test")
    plan = Plan(inputs, ResolvedTokenizer("{}", info), opts, sizing)   # no split: target >= sizes
    streamed = Fingerprint(plan.inputs, plan.options, plan.tokenizer.info)
    tasks = list(plan.iter_tasks())
    streamed.add(tasks[:1])           # fed in batches of any size
    streamed.add([])
    streamed.add(tasks[1:])
    body = {"format_version": 1, "inputs": [i.to_dict() for i in inputs], "tasks": [[w.to_dict() for w in t] for t in tasks],
            "tokenizer": {k: v for k, v in info.to_dict().items() if k != "source"}, "options": opts.content_dict()}
    assert streamed.hexdigest() == hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@given(st.sets(st.integers(0, 300), max_size=40))
def test_array_ranges_round_trip(ids):
    text = format_array_ranges(ids)
    assert parse_array_ranges(text) == sorted(ids)
    assert len(text) <= len(",".join(map(str, sorted(ids))))


@given(st.lists(st.integers(0, 20), max_size=30), st.booleans(), st.booleans())
def test_boundary_tokens(lengths, bos, eos):
    lengths = np.array(lengths, dtype=np.int64)
    flat = np.arange(int(lengths.sum()), dtype=np.uint32) + 10
    out, new_lens = add_boundary_tokens(flat, lengths, 1 if bos else None, 2 if eos else None)
    docs = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
    expected = [([1] if bos else []) + d.tolist() + ([2] if eos else []) for d in docs]
    got = np.split(out, np.cumsum(new_lens)[:-1]) if len(new_lens) else []
    assert [g.tolist() for g in got] == expected


@settings(max_examples=examples(40), deadline=None)
@given(doc_lengths=st.lists(st.integers(1, 300), min_size=1, max_size=50), chunk=st.integers(1, 500),
       layout=st.sampled_from(["pack", "doc"]))
def test_writer_round_trip_and_chunking(tmp_path_factory, doc_lengths, chunk, layout):
    d = tmp_path_factory.mktemp("w")
    rng = np.random.default_rng(len(doc_lengths))
    docs = [rng.integers(0, 70000, n, dtype=np.uint32) for n in doc_lengths]
    w = ShardWriter(d / "shard-00003.tar", task=3, layout=layout, dtype="uint32", chunk_tokens=chunk)
    half = len(docs) // 2
    for part in (docs[:half], docs[half:]):  # two batches: chunks must not depend on batch boundaries
        if part:
            w.add(np.concatenate(part), np.array([len(x) for x in part]))
    res = w.close()
    src = LocalSource(res.path)
    got = []
    for ch in res.chunks.chunks():
        tokens, lens = read_chunk(src, ch, "uint32")
        got.extend(np.split(tokens, np.cumsum(lens)[:-1]))
        if layout == "pack":  # a chunk only exceeds the target when it holds a single document
            assert ch.tokens <= chunk or ch.docs == 1
    src.close()
    assert [g.tolist() for g in got] == [x.tolist() for x in docs]
    assert res.documents == len(docs) and res.tokens == sum(doc_lengths)
    parsed = list(walk_tar(res.path))
    assert [p.key for p in parsed] == list(res.chunks.key) and all(k.startswith("00003_") for k in res.chunks.key)
    with tarfile.open(res.path) as tf:
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in tf.getmembers())


def test_writer_refuses_ids_beyond_dtype(tmp_path):
    w = ShardWriter(tmp_path / "shard-00000.tar", task=0, layout="pack", dtype="uint16", chunk_tokens=10)
    with pytest.raises(OverflowError, match="does not fit uint16"):
        with w:
            w.add(np.array([1, 70000], dtype=np.uint32), np.array([2]))
    assert not list(tmp_path.iterdir())  # aborted: neither temporary nor final file left


def test_pack_overhead_is_small_for_ordinary_documents(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(80, 400, 5000)
    w = ShardWriter(tmp_path / "shard-00000.tar", task=0, layout="pack", dtype="uint16", chunk_tokens=1 << 18)
    w.add(rng.integers(0, 50000, int(lengths.sum()), dtype=np.uint32), lengths)
    res = w.close()
    assert res.bytes / (res.tokens * 2) < 1.05


def test_one_command_line_imports_only_its_own_command_module():
    """`shardprep run-task` (every array task) must not import staging, doctor, export ... modules."""
    import importlib
    import subprocess
    import sys

    from shardprep.cli.main import COMMANDS, command_module

    for mod_name in COMMANDS:   # the convention command_module relies on
        assert importlib.import_module(f"shardprep.cli.{mod_name}").NAME == mod_name.replace("_", "-")
    assert command_module(["-v", "run-task", "out", "3"]) == "run_task"
    assert command_module(["export-hf", "x"]) == "export_hf"
    assert command_module(["--help"]) is None and command_module(["no-such-command"]) is None
    code = ("import sys; from shardprep.cli.main import main\n"
            "try:\n    main(['run-task', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('shardprep.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['shardprep.cli.args', 'shardprep.cli.main', 'shardprep.cli.run_task']"
