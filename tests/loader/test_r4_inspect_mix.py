"""Issue 31, items 7c, 7d and 11: ``inspect --decode`` of a corrupt shard, duplicate keys in a mixture spec,
and the inputs that used to end in a traceback (an empty dataset list, a weight or a token budget beyond
what a float or a run's int64 positions hold): each is now one line naming what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import cli
from loader_helpers import make_dataset

from shardprep.errors import EXIT_INCOMPLETE, EXIT_USAGE, ConfigError
from shardprep.loader.mixture import mixture_spec
from shardprep.shard.sidecar import Sidecar


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("r4mix"), sample_tokenizer, [12], seed=5)


def _corrupt_copy(dataset: Path, dest: Path, *, sidecar: bool) -> tuple[Path, str, int]:
    """A copy of the dataset's first shard with its first token id set to 65535 (past the vocabulary);
    (the shard, its first sample's key, the id)."""
    dest.mkdir()
    shard = dest / "shard-00000.tar"
    shutil.copy(dataset / "shard-00000.tar", shard)
    shutil.copy(dataset / "tokenizer.json", dest / "tokenizer.json")
    side = dataset / "shard-00000.json"
    chunk = next(Sidecar.parse(side.read_bytes(), side).chunks.chunks())
    if sidecar:
        shutil.copy(side, dest / "shard-00000.json")
    with open(shard, "r+b") as f:
        f.seek(chunk.tokens_offset)
        f.write(np.array([65535], dtype="<u2").tobytes())
    return shard, chunk.key, 65535


@pytest.mark.parametrize("sidecar", [True, False], ids=["sidecar", "tar-walk"])
def test_inspect_decode_refuses_an_id_beyond_the_vocabulary(dataset, tmp_path, capsys, sidecar):
    assert Sidecar.parse((dataset / "shard-00000.json").read_bytes(), "x").dtype == "uint16"
    shard, key, bad = _corrupt_copy(dataset, tmp_path / "copy", sidecar=sidecar)
    code, out, err = cli("inspect", shard, "--decode", "2")
    assert code == EXIT_INCOMPLETE, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(shard) in lines[0] and f"sample {key}" in lines[0] and str(bad) in lines[0], err
    assert "--- document" not in out                          # nothing printed as if it were clean text
    code, out, _ = cli("inspect", shard)               # the summary alone decodes nothing: still shown
    assert code == 0 and "documents" in out


def test_inspect_decode_of_a_clean_shard_still_prints_it(dataset, capsys):
    code, out, err = cli("inspect", dataset / "shard-00000.tar", "--decode", "1")
    assert code == 0 and "--- document 0" in out, err


@pytest.mark.parametrize("suffix, body, where", [
    (".json", '{"sources": [{"path": "D", "weight": 1, "weight": 3}]}', "duplicate key 'weight'"),
    (".json", '{"sources": [{"path": "D", "weight": 1}], "sources": [{"path": "D", "weight": 2}]}',
     "duplicate key 'sources'"),
    (".yaml", "sources:\n  - path: D\n    weight: 1\n    weight: 3\n", "duplicate key 'weight' (line 4)"),
    (".yml", "total_tokens: 100\nsources:\n  - {path: D, weight: 1}\ntotal_tokens: 200\n",
     "duplicate key 'total_tokens' (line 4)"),
])
def test_mix_refuses_a_spec_with_a_duplicate_key(dataset, tmp_path, capsys, suffix, body, where):
    spec = tmp_path / f"mix{suffix}"
    spec.write_text(body.replace("D", str(dataset)))
    code, out, err = cli("mix", spec, "--seq-len", "16")
    assert code == EXIT_USAGE, (out, err)
    assert len(err.strip().splitlines()) == 1 and str(spec) in err and where in err, err


def test_a_yaml_merge_key_may_still_be_overridden(dataset, tmp_path, capsys):
    spec = tmp_path / "mix.yaml"
    spec.write_text(f"sources:\n  - &a {{path: {dataset}, weight: 1, name: one}}\n  - <<: *a\n    name: two\n")
    _, _, err = cli("mix", spec, "--seq-len", "16")
    assert "duplicate key" not in err and "same data" in err, err       # past the spec, to the sources' check


@pytest.mark.requires("loader")
def test_an_empty_dataset_list_is_one_line():
    from shardprep.loader import ShardDataset

    with pytest.raises(ConfigError, match=r"path=\[\] is empty"):
        ShardDataset([], mode="doc")


@pytest.mark.requires("loader")
def test_a_weight_beyond_a_float_is_one_line(dataset, tmp_path, capsys):
    from shardprep.loader import ShardDataset

    with pytest.raises(ConfigError, match=r"weight=<a 401-digit integer> is invalid"):
        ShardDataset([(str(dataset), 10 ** 400)], mode="pack", seq_len=16)
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"sources": [{"path": str(dataset), "weight": 10 ** 400}]}))
    code, _, err = cli("mix", spec, "--seq-len", "16")
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1 and "401-digit integer" in err, err


@pytest.mark.parametrize("tokens", ["1e30", "1e400", "nan", "5e18"])
def test_mix_tokens_too_large_is_a_usage_error(dataset, tmp_path, capsys, tokens):
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"sources": [{"path": str(dataset), "weight": 1}]}))
    code, out, err = cli("mix", spec, "--seq-len", "16", "--tokens", tokens)
    assert code == EXIT_USAGE, (out, err)
    assert "Traceback" not in err and f"'{tokens}'" in err and "a token count is a whole number from 1 to" in err
    code, out, _ = cli("mix", spec, "--seq-len", "16", "--tokens", "4e18")     # the largest allowed
    assert code == 0 and "rows" in out


@pytest.mark.parametrize("total", [1e30, 10 ** 400, 2 ** 63])
def test_total_tokens_too_large_is_one_line_from_the_api(dataset, total):
    with pytest.raises(ConfigError, match="total_tokens=.* is invalid: must be a whole number from 1 to"):
        mixture_spec([(str(dataset), 1.0)], total_tokens=total)
