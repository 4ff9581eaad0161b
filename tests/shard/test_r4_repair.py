"""``repair`` (issue 31 item 10): a sidecar that parses but does not describe its shard (its document counts,
or its chunk table, wrong while the shard's sha256 is right) is rebuilt with the shard, not kept; the
scratch directory a killed repair left is removed by the next one (which holds the output's lock, so no
live repair's is touched); a URL is refused in one line, and nothing named after it is created.
Real CLI (subprocesses where a task runs)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from helpers import run_cli
from r4_outputs import edit_json, finished_output

from shardprep.errors import EXIT_PLAN_CONFLICT, EXIT_USAGE


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_tokenizer) -> Path:
    return finished_output(tmp_path_factory.mktemp("repair4"), sample_tokenizer, docs=60, seed=90)


@pytest.fixture
def out(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "out"))


def _counts(d: dict) -> None:           # parses (the table adds up to the totals) but is not the shard's
    d["documents"] += 1
    d["chunks"]["docs"][0] += 1


def _table(d: dict) -> None:            # the totals right, one sample's offset wrong
    d["chunks"]["tokens_offset"][0] += 512


@pytest.mark.parametrize("damage, problem", [(_counts, "sidecar documents"),
                                             (_table, "does not match the sidecar's chunk table")])
def test_a_sidecar_that_does_not_describe_its_shard_is_rebuilt(out, damage, problem):
    shard = (out / "shard-00001.tar").read_bytes()
    edit_json(out / "shard-00001.json", damage)
    assert problem in run_cli("verify", out, check=5).stderr
    fixed = run_cli("repair", out)
    assert "repaired shard-00001.tar and its sidecar (" in fixed.stdout and problem in fixed.stdout
    run_cli("verify", out)
    assert (out / "shard-00001.tar").read_bytes() == shard          # the shard was right all along


def _dead_scratch(out: Path) -> Path:
    """What a repair killed mid-rebuild leaves: its scratch directory, links to the plan and a temporary."""
    host = socket.gethostname().split(".")[0]
    scratch = out / f".repair.{host}.999999999.tmp"
    scratch.mkdir()
    for name in ("job.json", "tokenizer.json", "plan"):
        os.symlink(out / name, scratch / name)
    (scratch / ".shard-00001.tar.x.1.tmp").write_bytes(b"\0" * 4096)
    return scratch


def test_the_next_repair_removes_what_a_killed_one_left(out):
    from shardprep.storage.lock import output_lock

    scratch = _dead_scratch(out)
    planted = out / ".repair.elsewhere.1.tmp"          # a link at such a name is not ours to follow or remove
    planted.symlink_to(out / "plan")
    with output_lock(out):                             # a live repair would hold this: its scratch is kept
        proc = run_cli("repair", out, check=EXIT_PLAN_CONFLICT, process=True)   # another process's lock
        assert "is in use by another shardprep run" in proc.stderr
        assert scratch.is_dir()
    proc = run_cli("repair", out)                      # nothing to rebuild, and still cleans up
    assert "nothing to repair" in proc.stdout
    assert not scratch.exists() and (out / "plan" / "tasks.idx").is_file()
    assert planted.is_symlink() and [p.name for p in out.iterdir() if p.name.startswith(".repair.")] == [planted.name]


@pytest.mark.parametrize("url", ["s3://some-bucket/runs/out", "gs://b/out/"])
def test_a_url_is_refused_in_one_line_and_nothing_is_created(tmp_path, monkeypatch, capsys, url):
    from shardprep.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["repair", url]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{url} is a URL: repair rebuilds shards in the output directory" in err, err
    assert "s3:/" not in err.replace(url, "") and list(tmp_path.iterdir()) == []
    assert main(["repair", str(tmp_path / "nowhere")]) != 0        # a path that holds no plan: not created
    assert not (tmp_path / "nowhere").exists()
