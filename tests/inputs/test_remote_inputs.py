"""Tokenizing straight from object storage (issue 22), against real servers on 127.0.0.1: moto (``s3://``, a
plain and a versioned bucket), the GCS emulator (``gs://``), Azurite (``az://``) and an HTTP server with
Range support (``http://``).  A mixed corpus (a small jsonl, a txt large enough to be cut into several byte
ranges, a .jsonl.gz, a parquet file of several row groups) tokenizes to shards byte-identical to the same
corpus tokenized from local files, and every document appears exactly once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import plan_inputs, plan_tasks, run_cli
from remote_corpus import RUN, SHAPE, every_document_once, same_shards
from remote_servers import REMOTE_BACKENDS
from s3_server import make_bucket, s3_client

pytestmark = [pytest.mark.slow, pytest.mark.s3]

def versioned_bucket(endpoint: str, local: Path) -> str:
    bucket = make_bucket(endpoint, "versioned")
    client = s3_client(endpoint)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for f in sorted(local.iterdir()):
        client.upload_file(str(f), bucket, f"raw/{f.name}")
    return f"s3://{bucket}/raw"


def inputs_for(store: str, url: str, names: list[str], tmp_path: Path) -> list[str]:
    """The ``--input`` arguments naming the uploaded corpus: its prefix, or (HTTP has no listings) a list."""
    if store != "http":
        return ["--input", url]
    listing = tmp_path / "inputs.txt"
    listing.write_text("".join(f"{url}/{n}\n" for n in names))
    return ["--input", f"@{listing}"]


@pytest.mark.parametrize("store", [*REMOTE_BACKENDS, "s3-versioned"])
def test_remote_corpus_tokenizes_to_the_same_shards_as_local_files(request, store, corpus, local_output,
                                                                  sample_tokenizer, tmp_path):
    directory, docs = corpus
    backend = request.getfixturevalue(f"{store.split('-')[0]}_backend")
    url = versioned_bucket(backend.endpoint, directory) if store == "s3-versioned" else backend.put_dir(directory)
    connection = ["--endpoint-url", backend.endpoint] if store.startswith("s3") else []
    out = tmp_path / "out"
    inputs = inputs_for(store, url, sorted(p.name for p in directory.iterdir()), tmp_path)
    run_cli("submit", *inputs, "--output", out, "--tokenizer", sample_tokenizer, *RUN, *connection,
            env=backend.cli_env())
    same_shards(local_output, out)
    every_document_once(out, docs, sample_tokenizer)
    planned = plan_inputs(out)
    assert [i.path for i in planned] == sorted(f"{url}/{n}" for n in ("small.jsonl", "big.txt", "c.jsonl.gz",
                                                                       "d.parquet"))
    assert all(i.identity for i in planned), planned
    if store == "s3-versioned":
        assert all("version=" in i.identity for i in planned)
    assert sum(len([it for it in t.items if it.input.path.endswith("big.txt")]) for t in plan_tasks(out)) >= 3
    stats = [json.loads(p.read_text())["stats"]["remote"] for p in out.glob("shard-*.json")]
    assert all(s["requests"] >= 1 and s["retries"] == 0 for s in stats), stats


def test_slurm_tasks_get_the_store_settings_and_never_a_key(s3_endpoint, corpus, sample_tokenizer, tmp_path, caplog):
    """As for ``stage --submit``: the array of a plan with remote inputs exports the non-secret settings that
    point at credentials (profile, region, endpoint, files, fsspec's own options), never a key; the plan
    records the S3 options the tasks use; a plan of files exports none of them."""
    from shardprep.executor.slurm.options import SlurmOptions
    from shardprep.executor.slurm.render import render_tokenize
    from shardprep.executor.slurm.submission import SubmissionPlan
    from shardprep.job.state import load_job

    bucket = make_bucket(s3_endpoint, "slurm")
    s3_client(s3_endpoint).upload_file(str(corpus[0] / "small.jsonl"), bucket, "raw/small.jsonl")
    remote, local = tmp_path / "remote", tmp_path / "local"
    run_cli("plan", "--input", f"s3://{bucket}/raw/", "--output", remote, "--tokenizer", sample_tokenizer,
            "--endpoint-url", s3_endpoint, "--region", "eu-west-3", "--max-attempts", "7")
    run_cli("plan", "--input", corpus[0] / "small.jsonl", "--output", local, "--tokenizer", sample_tokenizer)
    assert load_job(local).storage is None and "storage" not in json.loads((local / "job.json").read_text())
    s3 = load_job(remote).storage.s3
    assert (s3.endpoint_url, s3.region, s3.max_attempts) == (s3_endpoint, "eu-west-3", 7)
    environ = {"PATH": "/usr/bin", "AWS_PROFILE": "reader", "AWS_REGION": "eu-west-3", "AWS_ACCESS_KEY_ID": "AKIA1",
               "AWS_SECRET_ACCESS_KEY": "s3cr3t", "GOOGLE_APPLICATION_CREDENTIALS": "/home/u/sa.json",
               "AZURE_STORAGE_CONNECTION_STRING": "AccountKey=s3cr3t2", "FSSPEC_GS_PROJECT": "p1",
               "FSSPEC_AZ_ACCOUNT_KEY": "s3cr3t3", "HOME": str(tmp_path)}
    (array,) = SubmissionPlan.build([0], max_array_size=1001, indexing="offset").arrays
    text = render_tokenize(SlurmOptions(), remote, array, environ=environ)
    for name in ("AWS_PROFILE", "AWS_REGION", "GOOGLE_APPLICATION_CREDENTIALS", "FSSPEC_GS_PROJECT"):
        assert f"export {name}=" in text, name
    assert "s3cr3t" not in text and "AKIA1" not in text
    assert "AWS keys in environment variables are not passed" in caplog.text
    assert "AZURE_STORAGE_CONNECTION_STRING, FSSPEC_AZ_ACCOUNT_KEY not passed" in caplog.text
    plain = render_tokenize(SlurmOptions(), local, array, environ=environ)
    assert "AWS_PROFILE" not in plain and "GOOGLE_APPLICATION_CREDENTIALS" not in plain


@pytest.mark.slurm
def test_a_slurm_array_reads_s3_with_credentials_from_a_file_only(tmp_path, slurm_cluster, s3_endpoint, corpus,
                                                                  local_output, sample_tokenizer):
    """End to end on the live cluster: the array tasks authenticate from a credentials file (as a node does
    from ~/.aws), reach moto through the endpoint the plan recorded, and write the local run's shards; the
    keys in the submitting environment never reach the scripts."""
    from slurm_cluster import submitted_job_ids, wait_for_jobs

    bucket = make_bucket(s3_endpoint, "slurmread")
    for f in sorted(corpus[0].iterdir()):
        s3_client(s3_endpoint).upload_file(str(f), bucket, f"raw/{f.name}")
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = file-secret\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": os.devnull,
           "AWS_SECRET_ACCESS_KEY": "env-secret-must-not-leak", "AWS_ACCESS_KEY_ID": "env-key"}
    out = tmp_path / "out"
    proc = run_cli("submit", "--input", f"s3://{bucket}/raw", "--output", out, "--tokenizer", sample_tokenizer,
                   *SHAPE, "--endpoint-url", s3_endpoint, "--executor", "slurm", "--time", "5", "--mem", "500M",
                   env=env)
    wait_for_jobs(submitted_job_ids(proc.stdout))
    scripts = "".join(p.read_text() for p in (out / "slurm").glob("*-tokenize-*.sbatch"))
    assert f"export AWS_SHARED_CREDENTIALS_FILE={creds}" in scripts
    assert "env-secret-must-not-leak" not in scripts and "env-key" not in scripts and "file-secret" not in scripts
    assert (out / "index.json").exists(), list((out / "logs").iterdir())
    same_shards(local_output, out)


@pytest.mark.parametrize("store", REMOTE_BACKENDS)
def test_one_object_a_glob_and_a_missing_name_in_every_store(request, store, corpus, sample_tokenizer, tmp_path):
    backend = request.getfixturevalue(f"{store}_backend")
    url = backend.put_dir(corpus[0])
    connection = ["--endpoint-url", backend.endpoint] if store == "s3" else []

    def plan(spec: str, check: int | bool = True):
        return run_cli("plan", "--input", spec, "--output", tmp_path / "out", "--tokenizer", sample_tokenizer,
                       "--overwrite", *connection, env=backend.cli_env(), check=check)

    plan(f"{url}/small.jsonl")
    assert [(i.path, bool(i.identity)) for i in plan_inputs(tmp_path / "out")] == [(f"{url}/small.jsonl", True)]
    if store != "http":
        plan(f"{url}/*.jsonl*")
        assert [i.path for i in plan_inputs(tmp_path / "out")] == [f"{url}/c.jsonl.gz", f"{url}/small.jsonl"]
    missing = plan(f"{url}/nothing.jsonl", check=3)
    assert f"input {url}/nothing.jsonl does not exist" in missing.stderr, missing.stderr
