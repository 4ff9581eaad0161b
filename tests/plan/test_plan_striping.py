"""Striping is applied through the plan path, before the first file, and recorded in job.json."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
from helpers import run_cli

from shardprep.api import plan_job
from shardprep.storage.lock import LOCK_FILE
from shardprep.storage.lustre import DEFAULT_SHARD_LAYOUT, StripeLayout, prepare_output_dir

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from fake_lfs import install as install_fake_lfs  # noqa: E402


def test_new_output_on_lustre_is_striped_before_job_json(tmp_path, monkeypatch, sample_tokenizer):
    calls = install_fake_lfs(tmp_path, monkeypatch)
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "shards"
    seen_before = []

    def prepare(path):
        seen_before.append(sorted(p.name for p in path.iterdir()))  # nothing yet but the output's lock
        return prepare_output_dir(path, DEFAULT_SHARD_LAYOUT, detect=lambda p: True)

    _, job = plan_job([tmp_path / "in.txt"], out, sample_tokenizer, prepare_dir=prepare)
    assert seen_before == [[LOCK_FILE]]
    assert calls()[0][:2] == ["setstripe", "-E"] and calls()[0][-1] == str(out)
    assert calls()[1] == ["getstripe", "-d", str(out)]
    on_disk = orjson.loads((out / "job.json").read_bytes())
    assert on_disk["lustre"]["filesystem"] == "lustre" and "lcm_entry_count" in on_disk["lustre"]["applied"]
    assert on_disk["lustre"] == job.lustre

    # re-planning into the (now non-empty) directory does not re-stripe it
    plan_job([tmp_path / "in.txt"], out, sample_tokenizer,
             prepare_dir=lambda p: prepare_output_dir(p, StripeLayout.plain(2, "4M"), detect=lambda q: True))
    assert len(calls()) == 2


def test_cli_on_a_non_lustre_directory_records_it(tmp_path, sample_tokenizer):
    (tmp_path / "in.txt").write_text("hello\n")
    run_cli("plan", "-i", tmp_path / "in.txt", "-o", tmp_path / "o", "-t", sample_tokenizer, "--stripe-count", "4")
    job = orjson.loads((tmp_path / "o" / "job.json").read_bytes())
    assert job["lustre"] == {"filesystem": "other", "applied": None, "command": None}
    proc = run_cli("plan", "-i", tmp_path / "in.txt", "-o", tmp_path / "o2", "-t", sample_tokenizer,
                   "--stripe-count", "4", "--no-stripe", check=2)
    assert "cannot be combined" in proc.stderr
