"""A Slurm job that no node of its partition can run is never submitted to sit pending for ever (issue 23,
item 13).  Checked against the live cluster's ``sinfo`` (partition ``dev``: one node of 2 CPUs); every
command here is a ``--dry-run`` (nothing is queued), and test_slurm_live.py's stage job runs with the
default request, fitted.
"""

from __future__ import annotations

from helpers import run_cli

from shardprep.errors import EXIT_USAGE


def _node_cpus() -> int:
    import subprocess

    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, check=True).stdout
    return max(int(x.rstrip("+")) for x in out.split())


def test_the_stage_job_default_cpus_fit_the_partition_and_a_typed_excess_is_refused(tmp_path, slurm_cluster):
    cpus = _node_cpus()
    dest = tmp_path / "raw"
    proc = run_cli("stage", "s3://bucket/raw/", dest, "--submit", "--dry-run", "--no-stripe")
    if cpus < 4:                                     # the stage job's default is 4 CPUs
        assert f"#SBATCH --cpus-per-task={cpus}" in proc.stdout
        assert f"the stage job gets {cpus} CPU(s) instead of its default 4" in proc.stderr
    else:
        assert "#SBATCH --cpus-per-task=4" in proc.stdout
    proc = run_cli("stage", "s3://bucket/raw/", dest, "--submit", "--dry-run", "--no-stripe", "--cpus-per-task",
                   str(cpus + 1), check=EXIT_USAGE)
    assert f"--cpus-per-task {cpus + 1}: no node of partition" in proc.stderr
    assert "would stay pending for ever" in proc.stderr and f"use --cpus-per-task {cpus} or less" in proc.stderr
    proc = run_cli("stage", "s3://bucket/raw/", dest, "--submit", "--dry-run", "--no-stripe", "--then-tokenize",
                   "--output", tmp_path / "shards", "--tokenizer", "t.json", "--cpus-per-task", str(cpus + 1),
                   check=EXIT_USAGE)
    assert "each tokenize array task would stay pending for ever" in proc.stderr
    assert not dest.exists()


def test_submit_refuses_array_tasks_bigger_than_any_node(tmp_path, slurm_cluster, sample_tokenizer):
    (tmp_path / "a.txt").write_text("one document\n")
    out = tmp_path / "out"
    proc = run_cli("submit", "--executor", "slurm", "--dry-run", "-i", tmp_path / "a.txt", "-o", out, "-t",
                   sample_tokenizer, "--cpus-per-task", str(_node_cpus() + 1), check=EXIT_USAGE)
    assert "each array task would stay pending for ever" in proc.stderr and not out.exists()
    ok = run_cli("submit", "--executor", "slurm", "--dry-run", "-i", tmp_path / "a.txt", "-o", out, "-t",
                 sample_tokenizer, "--cpus-per-task", str(_node_cpus()))
    assert f"--cpus-per-task={_node_cpus()}" in ok.stdout


def test_environment_keys_alone_are_named_as_a_doomed_stage_job(tmp_path, slurm_cluster):
    env = {"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "env-key-only", "AWS_SECRET_ACCESS_KEY": "env-secret-only",
           "AWS_PROFILE": "",
           "AWS_SHARED_CREDENTIALS_FILE": "", "AWS_CONFIG_FILE": ""}
    proc = run_cli("stage", "s3://bucket/raw/", tmp_path / "raw", "--submit", "--dry-run", "--no-stripe", env=env)
    assert "unless the compute nodes have an instance role the job cannot authenticate" in proc.stderr
    assert "env-key-only" not in proc.stdout and "env-secret-only" not in proc.stdout
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\naws_access_key_id = k\n")
    proc = run_cli("stage", "s3://bucket/raw/", tmp_path / "raw", "--submit", "--dry-run", "--no-stripe", env=env)
    assert "are not passed to the Slurm job" in proc.stderr and "cannot authenticate" not in proc.stderr
