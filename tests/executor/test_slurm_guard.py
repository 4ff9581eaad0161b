"""A live Slurm array of a plan is never raced by a local run of the same plan (issue 23 item 5): the local
``submit`` is refused exactly as a second Slurm submission is, and runs once the array is gone.  The array
is submitted held (``--hold``), so it stays pending without taking the shared cluster's CPUs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import run_cli
from slurm_cluster import queue_states, submitted_job_ids, wait_for_jobs

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_USAGE

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_local_submit_is_refused_while_a_slurm_array_of_the_plan_is_live(tmp_path, slurm_cluster, sample_tokenizer):
    corpus = tmp_path / "in"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"part-{i}.txt").write_text("\n".join(sample_documents(60, seed=i)) + "\n")
    out = tmp_path / "out"
    plan = ("--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer)
    proc = run_cli("submit", *plan, "--executor", "slurm", "--sbatch-extra", "hold", "--time", "5", "--mem", "500M")
    ids = submitted_job_ids(proc.stdout)
    try:
        assert {s for e, s in queue_states(ids).items() if "_" in e} == {"PENDING"}
        for local in (("submit", *plan, "--executor", "local", "--no-progress"),
                      ("submit", "--resume", out, "--executor", "local", "--no-progress")):
            refused = run_cli(*local, check=EXIT_USAGE)
            assert f"task(s) 0-2 of {out} are still pending or running in Slurm (job {ids[0]})" in refused.stderr
            assert "Traceback" not in refused.stderr
        assert not list(out.glob("shard-*")) and not list(out.glob(".shard-*"))
    finally:
        subprocess.run(["scancel", *ids], check=False)
    wait_for_jobs(ids)
    done = run_cli("submit", "--resume", out, "--executor", "local", "--no-progress")
    assert "done: 3 shard(s)" in done.stdout
    run_cli("verify", out)
    assert Path(out / "index.json").exists()
