"""index.json is a contract, and job.json's seal cannot be taken off (issue 31 items 2 and 3).

An index.json with an entry removed, repeated, renamed or added (or its totals or tokenizer record not those
of the plan) is refused in one line wherever it is read: ``verify`` (exit 5), the loader's ``ShardDataset``
(also with ``verify=True``, also at an ``s3://`` copy with its job.json), and ``repair`` rebuilds it from the
frozen plan and the checked sidecars, byte-identical to what finalize wrote.  Its self-consistency holds
without a job.json too.  A plan written by a release that seals (plan format 3) is always checked: deleting
its seal is refused by every reader; only a format-2 plan written before the seal reads without one.
Real CLI (in-process where nothing forks), real loader."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import cli, run_cli
from r4_outputs import edit_json, finished_output

from shardprep.errors import EXIT_INCOMPLETE, EXIT_INPUT, IncompleteError


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_tokenizer) -> Path:
    """A finalized 3-task output (format-3 plan)."""
    return finished_output(tmp_path_factory.mktemp("contract"), sample_tokenizer, docs=40, seed=30)


@pytest.fixture
def out(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "out"))


def _drop_last(d: dict) -> None:         # the last entry removed and the totals made to agree: only the plan knows
    gone = d["shards"].pop()
    for key in ("shards", "samples", "documents", "tokens", "bytes"):
        d["totals"][key] -= 1 if key == "shards" else gone[key]


def _add_extra(d: dict) -> None:         # an entry for a task the plan does not have, totals made to agree
    extra = dict(d["shards"][-1], name="shard-00003.tar", sidecar="shard-00003.json")
    d["shards"].append(extra)
    for key in ("shards", "samples", "documents", "tokens", "bytes"):
        d["totals"][key] += 1 if key == "shards" else extra[key]


# (the edit, what the one line says); every one leaves each field well formed
EDITS = {
    "removed": (lambda d: d["shards"].pop(1), "field 'shards': lists 2 shard(s) but 'totals.shards' is 3"),
    "removed-totals-fixed": (_drop_last, "field 'totals.shards': is 2 but job.json says 3"),
    "duplicated": (lambda d: d["shards"].__setitem__(2, d["shards"][1]), "field 'shards': lists shard-00001.tar 2 times"),
    "renamed": (lambda d: d["shards"][1].update(name="shard-00007.tar"),
                "field 'shards[1]': is shard-00007.tar (shard-00001.json), expected shard-00001.tar (shard-00001.json)"),
    "extra": (_add_extra, "field 'totals.shards': is 4 but job.json says 3"),
    "totals": (lambda d: d["totals"].update(tokens=d["totals"]["tokens"] + 1),
               "field 'totals.tokens': is"),
    "vocab": (lambda d: d["tokenizer"].update(vocab_size=d["tokenizer"]["vocab_size"] + 100),
              "field 'tokenizer.vocab_size': is"),
    "eos": (lambda d: d["tokenizer"].update(eos_id=5), "field 'tokenizer.eos_id': is 5 but job.json says 0"),
}


@pytest.mark.requires("loader")
@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_index_is_refused_by_verify_and_the_loader_and_rebuilt_by_repair(out, capsys, case):
    from shardprep.loader import ShardDataset

    published = (out / "index.json").read_bytes()
    change, needle = EDITS[case]
    edit_json(out / "index.json", change)

    code, _, err = cli("verify", out)
    assert code == EXIT_INCOMPLETE, err
    assert err.count("\n") == 1 and f"{out / 'index.json'}: {needle}" in err, err
    assert f"shardprep repair {out}" in err
    for verify in (False, True):
        with pytest.raises(IncompleteError, match=re.escape(needle)):
            ShardDataset(out, mode="doc", verify=verify)

    fixed = run_cli("repair", out)
    assert "repaired index.json (" in fixed.stdout and "rebuilt from the plan and the checked sidecars" in fixed.stdout
    assert (out / "index.json").read_bytes() == published          # what finalize wrote, byte for byte
    assert cli("verify", out)[0] == 0
    assert sum(1 for _ in ShardDataset(out, mode="doc", shuffle=False)) == 120


@pytest.mark.requires("loader")
def test_self_consistency_holds_without_a_plan_and_the_plan_checks_where_one_is_reachable(out, capsys):
    from shardprep.loader import ShardDataset

    (out / "job.json").unlink()              # a copy of the dataset alone: shards, sidecars, index.json
    edit_json(out / "index.json", lambda d: d["tokenizer"].update(eos_id=5))
    assert cli("verify", out)[0] == 0           # nothing to hold the tokenizer record to
    ShardDataset(out, mode="doc")
    edit_json(out / "index.json", lambda d: d["shards"].pop(1))
    code, _, err = cli("verify", out)
    assert code == EXIT_INCOMPLETE and "lists 2 shard(s) but 'totals.shards' is 3" in err
    with pytest.raises(IncompleteError, match="lists 2 shard"):
        ShardDataset(out, mode="doc")


@pytest.mark.s3
def test_a_copy_at_s3_is_held_to_the_plan_uploaded_with_it(out, capsys, s3_endpoint):
    from s3_server import make_bucket, s3_client

    from shardprep.loader import ShardDataset

    edit_json(out / "index.json", lambda d: d["tokenizer"].update(eos_id=5))
    bucket = make_bucket(s3_endpoint, "contract")
    client = s3_client(s3_endpoint)
    for f in sorted(out.iterdir()):          # copied by hand: `upload` itself refuses this dataset
        if f.is_file() and not f.name.startswith("."):
            client.upload_file(str(f), bucket, f"ds/{f.name}")
    url = f"s3://{bucket}/ds"
    code, _, err = cli("verify", url, "--endpoint-url", s3_endpoint)
    assert code == EXIT_INCOMPLETE and f"{url}/index.json: field 'tokenizer.eos_id': is 5 but job.json says 0" in err
    assert "in the output directory this copy was uploaded from" in err
    with pytest.raises(IncompleteError, match="tokenizer.eos_id"):
        ShardDataset(url, mode="doc", endpoint_url=s3_endpoint)


def test_repair_refuses_an_index_it_cannot_rebuild(out):
    edit_json(out / "index.json", lambda d: d["shards"].pop(1))
    (out / "shard-00002.json").unlink()        # a task no longer done: finalize could not write the index either
    proc = run_cli("repair", out, check=EXIT_INCOMPLETE)
    assert "lists 2 shard(s) but 'totals.shards' is 3" in proc.stderr
    assert "it cannot be rebuilt from the plan: 1 of 3 task(s) not done: 2" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------------ the seal

def test_new_plans_are_format_3_and_sealed(out):
    job = orjson.loads((out / "job.json").read_bytes())
    assert job["format_version"] == 3 and set(job["seal"]) >= {"options", "tokenizer", "summary"}


@pytest.mark.parametrize("also", [
    None,                                                  # the seal alone removed
    lambda d: d["options"].update(add_eos=False),          # and the edit it would have caught
    lambda d: d["tokenizer"].update(eos_id=1),
])
def test_deleting_the_seal_is_refused_by_every_reader(out, also):
    for name in ("shard-00002.tar", "shard-00002.json", "index.json"):
        (out / name).unlink()                             # task 2 still to run, not finalized
    edit_json(out / "job.json", lambda d: (d.pop("seal"), also and also(d)))
    line = f"{out / 'job.json'}: 'seal' is missing, but a plan of format 3 is always sealed"
    for args in (("submit", "--resume", out, "--no-progress"), ("run-task", out, "--task-id", "2"),
                 ("finalize", out), ("status", out)):
        proc = run_cli(*args, check=EXIT_INPUT)
        assert line in proc.stderr and "a hand-edited plan is not obeyed" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (out / "shard-00002.tar").exists() and not (out / "index.json").exists()


def test_a_plan_from_before_the_seal_reads_without_one_and_the_version_is_sealed(out, capsys):
    edit_json(out / "job.json", lambda d: d.update(format_version=2))       # the version alone, under the seal
    code, _, err = cli("verify", out)
    assert code == EXIT_INPUT and "'format_version' changed since planning" in err
    edit_json(out / "job.json", lambda d: d.pop("seal"))       # a format-2 plan written before the seal existed
    (out / "index.json").unlink()
    assert "index.json written: 3 shard(s)" in run_cli("finalize", out).stdout
    assert cli("verify", out)[0] == 0
