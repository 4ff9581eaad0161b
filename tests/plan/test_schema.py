"""The typed records (job.schema): exact round trips, and errors that name the file and the field."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardprep.api import plan_job
from shardprep.demo_data import write_sample_corpus
from shardprep.errors import InputDataError, RecordError
from shardprep.job.finalize import finalize
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.schema import Job
from shardprep.job.state import job_state, load_job
from shardprep.job.task import run_task
from shardprep.records import Fields
from shardprep.shard.index import Index
from shardprep.shard.sidecar import ChunkTable, Sidecar


def _on_disk(obj) -> bytes:
    """What shardprep writes for a record (storage.atomic.write_json_atomic)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory, sample_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("schema")
    corpus = write_sample_corpus(root / "corpus", files=3, docs_per_file=60)
    out = root / "out"
    plan_job([corpus], out, sample_tokenizer, TokenizeOptions(chunk_tokens=512, backend="hf"),
             PlanOptions(one_file_per_task=True))
    for t in job_state(out).missing:
        run_task(out, t, threads=1)
    finalize(out)
    return out


@pytest.fixture()
def copy_of(job_dir, tmp_path) -> Path:
    return Path(shutil.copytree(job_dir, tmp_path / "copy"))


def _edit(path: Path, edit) -> None:
    d = orjson.loads(path.read_bytes())
    edit(d)
    path.write_bytes(_on_disk(d))


def test_records_round_trip_to_the_same_bytes(job_dir):
    data = (job_dir / "job.json").read_bytes()
    assert _on_disk(Job.parse(data, "job.json").to_dict()) == data
    for p in sorted(job_dir.glob("shard-*.json")):
        data = p.read_bytes()
        sidecar = Sidecar.parse(data, p)
        assert _on_disk(sidecar.to_dict()) == data
        assert len(sidecar.chunks) == sidecar.samples > 1
    data = (job_dir / "index.json").read_bytes()
    index = Index.parse(data, "index.json")
    assert _on_disk(index.to_dict()) == data and index.totals.shards == len(index.shards) == 3


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["chunks"].update(tokens=["12"]), "chunks.tokens", "expected a list of integers"),
    (lambda d: d["chunks"].update(tokens_offset=d["chunks"]["tokens_offset"][:-1]), "chunks.tokens_offset",
     "entries but 'key' has"),
    (lambda d: d.update(bytes=True), "bytes", "expected an integer, got True"),
    (lambda d: d.pop("sha256"), "sha256", "missing"),
    (lambda d: d.update(layout="packed"), "layout", "expected one of pack, doc"),
    (lambda d: d.update(tokens=d["tokens"] + 1), "chunks.tokens", "adds up to"),
    (lambda d: d["inputs"][0].update(start=-1), "inputs[0].start", "expected an integer >= 0"),
    (lambda d: d["skipped"].update(empty=-2), "skipped", "non-negative integer counts"),
])
def test_malformed_sidecar_names_file_and_field(copy_of, edit, field, expected):
    path = copy_of / "shard-00001.json"
    _edit(path, edit)
    with pytest.raises(RecordError, match=rf"shard-00001.json: field '{re.escape(field)}': .*{expected}") as e:
        Sidecar.parse(path.read_bytes(), path)
    assert isinstance(e.value, InputDataError) and e.value.exit_code == 3


def test_malformed_sidecar_means_the_task_is_not_done(copy_of):
    _edit(copy_of / "shard-00002.json", lambda d: d["chunks"].update(docs="many"))
    state = job_state(copy_of)
    assert state.missing == [2] and "field 'chunks.docs'" in state.problems[2]
    (copy_of / "shard-00000.json").write_bytes(b"{not json")
    assert "not valid JSON" in job_state(copy_of).problems[0]


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["tokenizer"].update(vocab_size="2000"), "tokenizer.vocab_size", "expected an integer"),
    (lambda d: d["options"].update(layout="rows"), "options", "--layout='rows' is invalid"),
    (lambda d: d["options"].update(add_eos=1), "options.add_eos", "expected true or false"),
    (lambda d: d.pop("fingerprint"), "fingerprint", "missing"),
])
def test_malformed_job_names_file_and_field(copy_of, edit, field, expected):
    _edit(copy_of / "job.json", edit)
    with pytest.raises(RecordError, match=rf"job.json: field '{re.escape(field)}': .*{re.escape(expected)}"):
        load_job(copy_of)


def test_index_errors_name_the_shard_entry(copy_of):
    _edit(copy_of / "index.json", lambda d: d["shards"][1].update(bytes="12"))
    with pytest.raises(RecordError, match=r"index.json: field 'shards\[1\].bytes': expected an integer"):
        Index.parse((copy_of / "index.json").read_bytes(), copy_of / "index.json")
    with pytest.raises(RecordError, match="not valid JSON"):
        Index.parse(b"[1,", "x/index.json")
    with pytest.raises(RecordError, match=r"x/index.json: not a shardprep index \(a JSON list, not an object\)"):
        Index.parse(b"[1]", "x/index.json")


def test_options_missing_from_an_older_job_take_their_defaults(copy_of):
    # an older job.json: written before that option existed, and before the seal (issue 23; plan format 2)
    _edit(copy_of / "job.json", lambda d: (d["options"].pop("max_doc_bytes"), d.pop("seal"), d.update(format_version=2)))
    assert load_job(copy_of).options.max_doc_bytes == TokenizeOptions().max_doc_bytes


_rows = st.lists(st.tuples(st.text(min_size=1, max_size=12), *(st.integers(-1, 1 << 40) for _ in range(5))),
                 max_size=20)


@given(_rows)
def test_chunk_table_round_trips_and_indexes(rows):
    table = ChunkTable.from_rows(rows)
    assert len(table) == len(rows)
    parsed = ChunkTable.parse(Fields(orjson.loads(orjson.dumps(table.to_dict())), "t.json", "chunks"))
    assert parsed == table
    assert [tuple(vars(c).values())[1:7] for c in table.chunks()] == rows
    assert all((c.trained_offset, c.trained_itemsize, c.trained_ranges) == (-1, 0, 0) for c in table.chunks())
    if rows:
        assert int(table.tokens_array.sum()) == sum(r[2] for r in rows)
        assert table.doc_start.tolist() == [sum(r[3] for r in rows[:i]) for i in range(len(rows))]


_item = st.tuples(st.sampled_from(["/data/a", "/data/a/sub", "/elsewhere", "/"]), st.text(min_size=1, max_size=8).filter(
    lambda s: "/" not in s and "\x00" not in s), st.sampled_from([("txt", None), ("jsonl", "zst"), ("parquet", None)]),
    st.integers(0, 1 << 40), st.integers(-(1 << 62), 1 << 62), st.integers(0, 1000), st.one_of(st.none(), st.integers(0, 1000)),
    st.one_of(st.none(), st.integers(1, 10)))


@given(items=st.lists(_item, min_size=1, max_size=6), root=st.sampled_from(["/data/a", "/", "/data"]))
def test_task_records_round_trip(items, root):
    from shardprep.inputs.discover import InputFile
    from shardprep.inputs.readers import WorkItem
    from shardprep.job.schema import Task, TaskItem, decode_task, encode_task

    task = Task(3, tuple(
        TaskItem(InputFile(f"{d.rstrip('/')}/{name}", size, mtime, fmt, comp, 9 if fmt == "parquet" else None),
                 WorkItem(k, start, end, "rows" if fmt == "parquet" else "bytes", first))
        for k, (d, name, (fmt, comp), size, mtime, start, end, first) in enumerate(items)))
    line = encode_task(task.items, root)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_task(line, 3, root, "plan/tasks.jsonl") == task


def test_task_record_errors_name_the_task_and_field():
    from shardprep.job.schema import decode_task

    with pytest.raises(RecordError, match=r"tasks.jsonl: field 'tasks\[4\]\[0\].size': expected an integer"):
        decode_task(b'[[0,"a.txt","12",5,"txt"]]\n', 4, "/d", "plan/tasks.jsonl")
    with pytest.raises(RecordError, match=r"field 'tasks\[4\]\[0\].format': expected one of"):
        decode_task(b'[[0,"a.txt",12,5,"csv"]]\n', 4, "/d", "plan/tasks.jsonl")
    with pytest.raises(RecordError, match=r"task 4: expected a non-empty list"):
        decode_task(b'[]\n', 4, "/d", "plan/tasks.jsonl")
