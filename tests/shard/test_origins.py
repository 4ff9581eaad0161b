"""Document origins in the sidecar (issue 29 item 1): the packed record round-trips, is checked when read,
and old sidecars still read (with no origins)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.errors import RecordError
from shardprep.shard.origins import BLOCK, DocOrigins, encode_origins, pack_column, unpack_column
from shardprep.shard.sidecar import Sidecar


@st.composite
def _origins(draw: st.DrawFn) -> DocOrigins:
    """Runs of documents: several inputs (back and forth), byte inputs with and without lines, row inputs,
    gaps of any size (skipped records), huge offsets."""
    inputs, offsets, lines = [], [], []
    for _ in range(draw(st.integers(0, 6))):
        inp = draw(st.integers(0, 50))
        n = draw(st.integers(1, 300))
        steps = draw(st.lists(st.integers(1, 1 << draw(st.sampled_from([3, 12, 40]))), min_size=n, max_size=n))
        start = draw(st.integers(0, 1 << 50))
        offs = start + np.cumsum([0] + steps[1:])
        counted = draw(st.booleans())
        line_steps = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
        inputs += [inp] * n
        offsets += offs.tolist()
        lines += (draw(st.integers(1, 1000)) + np.cumsum([0] + line_steps[1:])).tolist() if counted else [-1] * n
    return DocOrigins.of(inputs, offsets, lines)


@settings(max_examples=examples(150), deadline=None)
@given(_origins())
def test_origins_round_trip(o):
    rec = encode_origins(o)
    assert rec.decode(len(o), "s.json") == o
    assert json.loads(json.dumps(rec.to_dict())) == rec.to_dict()


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, (1 << 63) - 1), max_size=3 * BLOCK + 5))
def test_packed_column_round_trip(values):
    assert unpack_column(pack_column(values), len(values), "c").tolist() == values


def test_equal_steps_cost_two_bytes_a_block():
    o = DocOrigins.of(3, np.arange(10_000) * 77 + 5, np.arange(10_000) + 1)
    rec = encode_origins(o)
    assert len(rec.offset) < 2 * 5 / 4 * (10_000 / BLOCK) + 8 and len(rec.line) < len(rec.offset) + 4


def test_a_new_run_wherever_offsets_or_lines_do_not_increase():
    o = DocOrigins.of([0, 0, 0, 1, 1, 1], [10, 20, 5, 0, 3, 9], [1, 2, 1, -1, -1, 4])
    rec = encode_origins(o)
    assert len(unpack_column(rec.runs, None, "runs")) == 4 * 4 and rec.decode(6, "x") == o


def _sidecar(tmp_path, demo_job) -> tuple[dict, str]:
    path = sorted(demo_job.glob("shard-*.json"))[0]
    return json.loads(path.read_text()), str(path)


@pytest.fixture(scope="module")
def demo_job(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parents[1] / "inputs"))
    from origin_jobs import run_demo_job

    return run_demo_job(tmp_path_factory.mktemp("origins"))


def test_a_new_sidecar_is_format_3_with_every_documents_origin(tmp_path, demo_job):
    d, where = _sidecar(tmp_path, demo_job)
    assert d["format_version"] == 3 and list(d)[list(d).index("chunks") + 1] == "origins"
    s = Sidecar.parse(json.dumps(d).encode(), where)
    assert s.origins is not None and len(s.origins) == s.documents
    assert {i.input for i in s.inputs} >= set(s.origins.input.tolist())
    assert Sidecar.parse(json.dumps(s.to_dict()).encode(), where).to_dict() == s.to_dict()


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["origins"].update(runs=pack_column([0, 1, 0, 0])), "origins.runs"),
    (lambda d: d["origins"].update(runs=pack_column([977, d["documents"], 0, 0])), "origins.runs"),
    (lambda d: d["origins"].update(runs=pack_column([0, d["documents"], 0])), "origins.runs"),
    (lambda d: d["origins"].update(offset="é"), "origins.offset"),
    (lambda d: d["origins"].update(line=d["origins"]["line"] + "00000"), "origins.line"),
])
def test_a_damaged_origins_record_is_one_line_naming_the_sidecar_and_key(tmp_path, demo_job, edit, key):
    d, where = _sidecar(tmp_path, demo_job)
    edit(d)
    s = Sidecar.parse(json.dumps(d).encode(), where)
    with pytest.raises(RecordError) as e:
        s.origins  # noqa: B018
    assert str(e.value).startswith(f"{where}: field '{key}'") and "\n" not in str(e.value)


def test_format_3_without_origins_and_format_1_with_them_are_refused(tmp_path, demo_job):
    d, where = _sidecar(tmp_path, demo_job)
    without = {k: v for k, v in d.items() if k != "origins"}
    with pytest.raises(RecordError, match="field 'origins': missing"):
        Sidecar.parse(json.dumps(without).encode(), where)
    with pytest.raises(RecordError, match="field 'origins': present"):
        Sidecar.parse(json.dumps({**d, "format_version": 1}).encode(), where)


def test_old_sidecars_still_read_with_no_origins(tmp_path, demo_job):
    d, where = _sidecar(tmp_path, demo_job)
    old = {k: v for k, v in d.items() if k != "origins"}
    old["format_version"] = 1
    old["inputs"] = [{k: v for k, v in i.items() if k != "input"} for i in old["inputs"]]
    s = Sidecar.parse(json.dumps(old).encode(), where)
    assert s.origins is None and s.inputs[0].input is None
    assert "origins" not in s.to_dict()
