"""The quarantine file: parsed strictly (unknown and duplicate keys refused), resolved against the data to the
loader's ``Skips``, and anything naming data that does not exist refused in one line naming file and entry."""

from __future__ import annotations

import pytest
from loader_helpers import as_format_1, make_dataset

from shardprep.errors import ConfigError
from shardprep.loader.config import LoaderConfig, source_from
from shardprep.loader.docorigin import Provenance
from shardprep.loader.layout import Pad
from shardprep.loader.locate import DocRef
from shardprep.loader.quarantine import load_quarantine, parse_quarantine
from shardprep.loader.reading import Reading


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, sample_tokenizer) -> dict:
    root = tmp_path_factory.mktemp("quarantine")
    return {"a": make_dataset(root / "a", sample_tokenizer, [20, 15], seed=1),
            "b": make_dataset(root / "b", sample_tokenizer, [10], seed=2)}


def reading(path: object) -> Reading:
    return Reading(source_from(path), LoaderConfig(layout=Pad(8)))


def test_documents_shards_and_steps_resolve_to_skips(outputs, tmp_path):
    q = tmp_path / "q.yaml"
    q.write_text("steps: [[3, 5], [9, 9]]\ndocuments: [0, 21]\nshards: [shard-00001.tar]\n")
    skips = load_quarantine(str(q)).resolve(reading(str(outputs["a"])))
    assert skips.steps == ((3, 5), (9, 9))
    assert skips.documents == {DocRef(0, 0, 0), *(DocRef(0, 1, d) for d in range(15))}


def test_a_mixture_names_sources(outputs, tmp_path):
    mix = reading([(str(outputs["a"]), 0.5), (str(outputs["b"]), 0.5)])
    names = mix.names
    q = parse_quarantine({"documents": [f"{names[1]}:4"], "shards": [f"{names[0]}:shard-00000.tar"]}, "q.json")
    skips = q.resolve(mix)
    assert DocRef(1, 0, 4) in skips.documents and len(skips.documents) == 21
    with pytest.raises(ConfigError, match=r"q.json: documents: '7': .*say which, SOURCE:ID"):
        parse_quarantine({"documents": [7]}, "q.json").resolve(mix)


@pytest.mark.parametrize("obj,says", [
    ({"step": [[1, 2]]}, "unknown key 'step'"),
    ({"steps": [[5, 2]]}, "is not [first, last]"),
    ({"steps": [1, 2]}, "is not [first, last]"),
    ({"documents": [-1]}, "is not a document id"),
    ({"inputs": [{"input": "x.txt", "bytes": [0, 10], "rows": [0, 1]}]}, "one of bytes"),
    ({"inputs": [{"input": "x.txt", "bytes": [10, 10]}]}, "lo < hi"),
    ({"inputs": [{"input": "x.txt", "byte": [0, 1]}]}, "unknown key 'byte'"),
    ([1], "is an object"),
])
def test_malformed_files_are_refused_in_one_line(obj, says):
    with pytest.raises(ConfigError, match="q.json: ") as e:
        parse_quarantine(obj, "q.json")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_duplicate_keys_and_missing_files(tmp_path):
    dup = tmp_path / "d.yaml"
    dup.write_text("documents: [1]\ndocuments: [2]\n")
    with pytest.raises(ConfigError, match=r"d.yaml: not a valid quarantine file: duplicate key 'documents'"):
        load_quarantine(str(dup))
    with pytest.raises(ConfigError, match="quarantine file does not exist"):
        load_quarantine(str(tmp_path / "none.json"))


@pytest.mark.parametrize("obj,says", [
    ({"documents": [35]}, "documents: '35': document '35': no document 35"),
    ({"shards": ["shard-00009.tar"]}, "shards: 'shard-00009.tar': no shard 'shard-00009.tar'"),
    ({"shards": ["web:shard-00000.tar"]}, "no shard 'web:shard-00000.tar'"),
    ({"inputs": [{"input": "/nowhere/x.txt", "bytes": [0, 5]}]}, "is not read by any shard"),
])
def test_data_that_does_not_exist_is_refused(outputs, obj, says):
    with pytest.raises(ConfigError) as e:
        parse_quarantine(obj, "q.json").resolve(reading(str(outputs["a"])))
    assert str(e.value).startswith("q.json: ") and says in str(e.value), str(e.value)


def test_input_ranges_hold_the_documents_whose_record_starts_there(outputs):
    r = reading(str(outputs["a"]))
    path = Provenance(r).sidecar(0, 0).inputs[0].path
    raw = open(path, "rb").read()
    starts = [0] + [i + 1 for i, b in enumerate(raw) if b == 10][:-1]       # one document a line
    skips = parse_quarantine({"inputs": [{"input": path, "bytes": [starts[3] - 1, starts[5] + 1]}]},
                             "q.json").resolve(r)
    assert skips.documents == {DocRef(0, 0, 3), DocRef(0, 0, 4), DocRef(0, 0, 5)}     # doc 2 starts before
    with pytest.raises(ConfigError, match="no document of the data starts in that range"):
        parse_quarantine({"inputs": [{"input": path, "bytes": [starts[3] + 1, starts[4]]}]}, "q.json").resolve(r)
    with pytest.raises(ConfigError, match="is read by bytes"):
        parse_quarantine({"inputs": [{"input": path, "rows": [0, 1]}]}, "q.json").resolve(r)


def test_input_ranges_need_shards_that_record_origins(outputs, tmp_path):
    old = reading(str(as_format_1(outputs["a"], tmp_path / "old")))
    path = Provenance(old).sidecar(0, 0).inputs[0].path
    with pytest.raises(ConfigError, match="q.json: .*record no document origins .format 1/2 shards."):
        parse_quarantine({"inputs": [{"input": path, "bytes": [0, 5]}]}, "q.json").resolve(old)
