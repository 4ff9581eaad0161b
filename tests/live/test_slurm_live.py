"""The Slurm executors against a live controller and node (``slurm/dev-cluster.sh up``): real sbatch
arrays with a throttle, MaxArraySize splitting, finalize through the dependency, scancel + resume,
strict-mode failure, submitit, and requeue on the pre-timeout signal.  Skips when no Slurm answers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import orjson
import pytest
from helpers import eos_id, plan_tasks, reference_ids, run_cli, shard_documents, write_slow_text
from s3_server import make_bucket, s3_client
from slurm_cluster import max_array_size, submitted_job_ids, wait_for_jobs

from shardprep.demo_data import sample_documents

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Options every submission here uses: short limits, and a pre-timeout signal that cannot fire in a test.
COMMON = ("--time", "5", "--signal-seconds", "30", "--mem", "500M")
BIG_OPTIONS = ("--backend", "hf", "--chunk-tokens", "2000")   # one thread, ~5 s: long enough to interrupt


def _write_corpus(directory: Path, files: int, docs: int, seed: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        texts = sample_documents(docs, seed=seed + i)
        (directory / f"part-{i:02d}.txt").write_text("\n".join(texts) + "\n")
    return directory


@pytest.fixture(scope="module")
def corpus6(tmp_path_factory) -> Path:
    return _write_corpus(tmp_path_factory.mktemp("corpus6"), 6, 150, seed=100)


@pytest.fixture(scope="module")
def corpus6_local(tmp_path_factory, corpus6, sample_tokenizer) -> Path:
    """The same job run by the local executor: the bytes every Slurm run must reproduce."""
    out = tmp_path_factory.mktemp("ref6") / "out"
    run_cli("submit", "--one-file-per-task", "-i", corpus6, "-o", out, "-t", sample_tokenizer, "--no-progress")
    return out


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    """Two small files and one ~7 MB file (task 2), whose task runs for seconds."""
    d = _write_corpus(tmp_path_factory.mktemp("big"), 2, 100, seed=7)
    write_slow_text(d / "part-99-big.txt")
    return d


@pytest.fixture(scope="module")
def big_local(tmp_path_factory, big_corpus, sample_tokenizer) -> Path:
    out = tmp_path_factory.mktemp("refbig") / "out"
    run_cli("submit", "--one-file-per-task", "-i", big_corpus, "-o", out, "-t", sample_tokenizer, *BIG_OPTIONS, "--no-progress")
    return out


def _submissions(out: Path) -> list[dict]:
    return orjson.loads((out / "slurm" / "jobs.json").read_bytes())["submissions"]


def _same_shards(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.glob("shard-*.tar"))
    assert names and names == sorted(p.name for p in b.glob("shard-*.tar"))
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _wait_mid_write(out: Path, task: int, timeout: float = 90) -> None:
    """Until task ``task`` is writing its temporary shard (so a signal now interrupts real work)."""
    deadline = time.monotonic() + timeout
    while not list(out.glob(f".shard-{task:05d}.tar.*.tmp")):
        assert not (out / f"shard-{task:05d}.json").exists(), f"task {task} finished before it could be interrupted"
        assert time.monotonic() < deadline, f"task {task} never started writing"
        time.sleep(0.05)


def _submit_big_and_wait_mid_write(corpus: Path, out: Path, tokenizer: Path) -> tuple[str, str]:
    """Submit the 3-task big corpus job; return (array id, finalize id) once task 2 is mid-write and the two
    small tasks are done (task 2 may start writing before task 1, sharing the 2 CPUs, has finished)."""
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", corpus, "-o", out, "-t", tokenizer, *BIG_OPTIONS, *COMMON)
    array_id, finalize_id = submitted_job_ids(proc.stdout)
    _wait_mid_write(out, 2)
    deadline = time.monotonic() + 30
    while not all((out / f"shard-{t:05d}.json").exists() for t in (0, 1)):
        assert time.monotonic() < deadline, "the small tasks 0 and 1 never finished"
        time.sleep(0.05)
    assert not (out / "shard-00002.json").exists(), "task 2 finished before it could be interrupted"
    return array_id, finalize_id


@contextlib.contextmanager
def _paused_task(out: Path, task: int) -> Iterator[None]:
    """SIGSTOP the ``run-task`` process of ``task`` for the block, SIGCONT after: a check of a running
    task that must not race the task's end (a few seconds of work on a loaded machine)."""
    found = subprocess.run(["pgrep", "-f", f"shardprep run-task {out} --task-id {task}$"],
                           capture_output=True, text=True).stdout.split()
    assert len(found) == 1, f"expected one run-task process of task {task}, found {found}"
    pid = int(found[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _texts_in_plan_order(out: Path) -> list[str]:
    texts = []
    for task in plan_tasks(out):
        for item in task.items:
            texts += [t for t in Path(item.input.path).read_text().split("\n") if t.strip()]
    return texts


def test_throttled_array_finalizes_through_dependency_and_verifies(tmp_path, slurm_cluster, corpus6,
                                                                   corpus6_local, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", corpus6, "-o", out, "-t", sample_tokenizer,
                   "--max-parallel", "2", *COMMON)
    array_id, finalize_id = submitted_job_ids(proc.stdout)
    shown = subprocess.run(["scontrol", "show", "job", array_id], capture_output=True, text=True).stdout
    assert "ArrayTaskThrottle=2" in shown
    assert f"Dependency=afterok:{array_id}" in subprocess.run(
        ["scontrol", "show", "job", finalize_id], capture_output=True, text=True).stdout
    wait_for_jobs([array_id, finalize_id])

    assert (out / "index.json").exists()                     # written by the finalize job, not by us
    assert "index.json written" in (out / "logs" / f"finalize-{finalize_id}.out").read_text()
    run_cli("verify", out)
    assert shard_documents(out) == reference_ids(sample_tokenizer, _texts_in_plan_order(out), eos_id(sample_tokenizer))
    _same_shards(out, corpus6_local)
    for i in range(6):
        log = (out / "logs" / f"{array_id}_{i}.out").read_text()
        assert f"shardprep-task-exit: task={i} status=0" in log
        # tokenizer threads follow --cpus-per-task (1), not the node's CPUs
        assert orjson.loads((out / f"shard-{i:05d}.json").read_bytes())["stats"]["threads"] == 1
    status = run_cli("status", out)
    assert "done:     6" in status.stdout and "index.json: written" in status.stdout
    assert "throughput so far:" in status.stdout and "ETA: done" in status.stdout   # timing from the task logs


def test_more_tasks_than_max_array_size_run_as_chained_arrays_with_one_finalize(tmp_path, slurm_cluster,
                                                                                sample_tokenizer):
    corpus = _write_corpus(tmp_path / "in", 10, 40, seed=300)
    out = tmp_path / "out"
    with max_array_size(4):
        proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", corpus, "-o", out, "-t", sample_tokenizer,
                       "--max-parallel", "2", *COMMON)
    ids = submitted_job_ids(proc.stdout)
    again = run_cli("submit", "--resume", out, check=2)     # no second attempt while the first is queued
    assert "still pending or running in Slurm" in again.stderr
    wait_for_jobs(ids, timeout=180)

    (sub,) = _submissions(out)
    arrays = sub["arrays"]
    assert sub["max_array_size"] == 4 and sub["throttle"] == "chained"
    assert [(a["offset"], a["indices"], a["array"]) for a in arrays] == [(0, "0-3", "0-3%2"), (4, "0-3", "0-3%2"),
                                                                      (8, "0-1", "0-1%2")]
    a0, a1, a2 = (a["job_id"] for a in arrays)
    assert [a["dependency"] for a in arrays] == [None, f"afterany:{a0}", f"afterany:{a1}"]
    assert sub["finalize"]["dependency"] == f"afterok:{a0}:{a1}:{a2}" and ids == [a0, a1, a2, sub["finalize"]["job_id"]]
    assert (out / "index.json").exists() and len(list(out.glob("shard-*.tar"))) == 10
    run_cli("verify", out)
    # index i of array k ran task offset_k + i
    for a in arrays:
        for i in range(int(a["indices"].split("-")[-1]) + 1):
            assert f"shardprep-task-exit: task={a['offset'] + i} status=0" in \
                (out / "logs" / f"{a['job_id']}_{i}.out").read_text()
    # the throttle is shared: an array starts only after the previous one ended
    mtimes = {t: (out / f"shard-{t:05d}.json").stat().st_mtime for t in range(10)}
    first_log = {t: (out / "logs" / f"{a['job_id']}_{t - a['offset']}.out").stat().st_ctime
                 for a in arrays for t in range(a["offset"], a["offset"] + 4) if t < 10}
    for prev, nxt in ((range(0, 4), range(4, 8)), (range(4, 8), range(8, 10))):
        assert min(first_log[t] for t in nxt) >= max(mtimes[t] for t in prev) - 0.5


def test_cancelled_task_is_missing_then_resume_reruns_only_it(tmp_path, slurm_cluster, big_corpus, big_local,
                                                              sample_tokenizer):
    out = tmp_path / "out"
    array_id, finalize_id = _submit_big_and_wait_mid_write(big_corpus, out, sample_tokenizer)
    with _paused_task(out, 2):       # still RUNNING for Slurm, but cannot finish while status looks at it
        running = run_cli("status", out, check=5).stdout
        assert "running:       1  [2]" in running and "ETA: ~" in running
        p = orjson.loads(run_cli("status", out, "--json", check=5).stdout)["progress"]   # squeue: task 2 runs
        assert (p["done"], p["running"]) == (2, [2]) and p["eta_s"] > 0 and "1 running" in p["eta_basis"]
    subprocess.run(["scancel", f"{array_id}_2"], check=True)
    wait_for_jobs([array_id, finalize_id])

    # squeue says CANCELLED at once; the task gets TERM, stops at its next safe point, drops its temp file
    deadline = time.monotonic() + 15
    while list(out.glob(".shard-00002.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(out.glob(".shard-00002.*")) and not (out / "shard-00002.tar").exists()
    assert "stopped on SIGTERM at a safe point" in (out / "logs" / f"{array_id}_2.out").read_text()
    assert not (out / "index.json").exists()                 # the finalize job never ran
    status = run_cli("status", out, check=5).stdout
    assert "missing:  1  [2]" in status
    assert "missing:       1  [2]" in status and f"finalize job {finalize_id}:" in status
    kept = {t: (out / f"shard-{t:05d}.tar").stat().st_mtime_ns for t in (0, 1)}

    resumed = run_cli("submit", "--resume", out)              # executor and options from jobs.json
    ids = submitted_job_ids(resumed.stdout)
    wait_for_jobs(ids)
    second = _submissions(out)[1]
    assert second["executor"] == "slurm" and second["tasks"] == "2"
    assert [(a["offset"], a["array"]) for a in second["arrays"]] == [(2, "0")]
    assert {t: (out / f"shard-{t:05d}.tar").stat().st_mtime_ns for t in (0, 1)} == kept   # not redone
    _same_shards(out, big_local)
    assert (out / "index.json").exists()
    run_cli("verify", out)


def test_strict_failure_is_visible_with_log_tail_and_no_index(tmp_path, slurm_cluster, sample_tokenizer):
    corpus = _write_corpus(tmp_path / "in", 3, 30, seed=500)
    (corpus / "part-01.txt").write_bytes(b"fine line\nanother\n\xff\xfe broken utf-8\nlast\n")
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--strict",
                   *COMMON)
    ids = submitted_job_ids(proc.stdout)
    wait_for_jobs(ids)

    assert not (out / "index.json").exists()
    status = run_cli("status", out, check=5).stdout
    assert "failed:        1  [1]" in status
    tail = status[status.index("task 1 failed"):]
    assert "exit 3" in tail and "part-01.txt:3" in tail and "invalid utf8" in tail   # file and line named
    as_json = orjson.loads(run_cli("status", out, "--json", check=5).stdout)
    assert as_json["slurm"]["failed"] == [1] and as_json["missing"] == [1]


def test_submitit_produces_the_same_bytes(tmp_path, slurm_cluster, corpus6, corpus6_local, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "submitit", "-i", corpus6, "-o", out, "-t", sample_tokenizer,
                   "--max-parallel", "2", *COMMON)
    ids = submitted_job_ids(proc.stdout)
    wait_for_jobs(ids)
    assert (out / "index.json").exists()
    _same_shards(out, corpus6_local)
    run_cli("verify", out)
    (sub,) = _submissions(out)
    assert sub["executor"] == "submitit" and sub["finalize"]["dependency"] == f"afterok:{ids[0]}"
    # resume through submitit (recorded executor): one missing task is submitted as a plain job
    for suffix in (".tar", ".json"):
        (out / f"shard-00003{suffix}").unlink()
    (out / "index.json").unlink()
    assert "missing:  1  [3]" in run_cli("status", out, check=5).stdout
    ids = submitted_job_ids(run_cli("submit", "--resume", out).stdout)
    wait_for_jobs(ids)
    second = _submissions(out)[1]
    assert second["executor"] == "submitit" and second["tasks"] == "3" and second["arrays"][0]["plain"]
    _same_shards(out, corpus6_local)
    assert "done:     6" in run_cli("status", out).stdout


def test_usr1_before_time_limit_requeues_and_the_task_completes(tmp_path, slurm_cluster, big_corpus, big_local,
                                                                sample_tokenizer):
    out = tmp_path / "out"
    array_id, finalize_id = _submit_big_and_wait_mid_write(big_corpus, out, sample_tokenizer)
    # what Slurm does --signal-seconds before the limit: USR1 to the batch shell only
    subprocess.run(["scancel", "--signal=USR1", "--batch", f"{array_id}_2"], check=True)
    wait_for_jobs([array_id, finalize_id], timeout=150)

    log = (out / "logs" / f"{array_id}_2.out").read_text()
    assert "USR1 received" in log and "shardprep-task-exit: task=2 status=75" in log
    assert f"requeueing {array_id}_2" in log and "attempt 2" in log
    assert log.rstrip().endswith("shardprep-task-exit: task=2 status=0")
    _same_shards(out, big_local)
    assert (out / "index.json").exists()                     # the finalize dependency held through the requeue
    run_cli("verify", out)


@pytest.mark.s3
def test_stage_as_a_job_then_tokenize(tmp_path, slurm_cluster, s3_endpoint, corpus6, corpus6_local,
                                      sample_tokenizer):
    """stage --submit --then-tokenize: the stage job copies S3 -> DEST, then submits the tokenize array;
    the result equals the local run on the same files.  No key reaches the generated script.  The stage
    job keeps its default CPU request (4), more than the dev partition's nodes have: it is fitted to them
    instead of sitting pending for ever (issue 23)."""
    bucket = make_bucket(s3_endpoint, "stagejob")
    client = s3_client(s3_endpoint)
    for f in sorted(corpus6.iterdir()):
        client.put_object(Bucket=bucket, Key=f"raw/{f.name}", Body=f.read_bytes())
    creds = tmp_path / "credentials"             # the job authenticates from a file, like a real ~/.aws
    creds.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = file-secret\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": os.devnull,
           "AWS_SECRET_ACCESS_KEY": "env-secret-must-not-leak", "AWS_ACCESS_KEY_ID": "env-key"}
    dest, out = tmp_path / "raw", tmp_path / "shards"
    proc = run_cli("stage", f"s3://{bucket}/raw/", dest, "--endpoint-url", s3_endpoint, "--no-stripe",
                   "--submit", "--time", "5",       # the default 4 CPUs, fitted to the 2-CPU partition
                   "--then-tokenize", "--output", out, "--tokenizer", sample_tokenizer, "--one-file-per-task", *COMMON,
                   env=env)
    job_id = proc.stdout.split()[-1]
    state = dest / ".shardprep-stage" / "slurm"
    script = (state / "001-stage.sbatch").read_text()
    assert "env-secret-must-not-leak" not in script and "env-key" not in script and "file-secret" not in script
    assert f"export AWS_SHARED_CREDENTIALS_FILE={creds}" in script
    record = {"job_id": job_id, "log": state / f"stage-{job_id}.out"}
    wait_for_jobs([record["job_id"]], timeout=120)
    stage_log = Path(record["log"]).read_text()
    assert "staging done; submitting" in stage_log, stage_log
    ids = submitted_job_ids(stage_log)
    wait_for_jobs(ids)
    assert sorted(p.name for p in dest.glob("*.txt")) == sorted(p.name for p in corpus6.iterdir())
    assert (out / "index.json").exists()
    _same_shards(out, corpus6_local)


@pytest.mark.ddp
def test_templates_by_hand_plan_tokenize_finalize_then_train(tmp_path, slurm_cluster, corpus6, corpus6_local,
                                                            sample_tokenizer):
    """The docs' by-hand route: plain `sbatch slurm/*.sbatch` with environment variables, chained with
    afterok, ending in a DDP training job (srun + torchrun, 2 workers) on the finished shards."""
    import socket
    import sys

    from slurm_cluster import REPO

    out = tmp_path / "out"
    run_cli("plan", "--one-file-per-task", "-i", corpus6, "-o", out, "-t", sample_tokenizer)
    (out / "logs").mkdir(exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SHARDPREP_OUTPUT": str(out), "SHARDPREP_PYTHON": sys.executable,
           "SHARDPREP_DATA": str(out), "SHARDPREP_NPROC_PER_NODE": "2", "SHARDPREP_RDZV_PORT": str(port),
           "SHARDPREP_TRAIN_ARGS": f"--max-steps 2 --seq-len 16 --batch-size 2 --record '{tmp_path / 'rec'}'"}

    def sbatch(*args: str) -> str:
        proc = subprocess.run(["sbatch", "--parsable", *args], env=env, cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    array = sbatch("--array=0-5%2", f"--output={out}/logs/%A_%a.out", "slurm/tokenize.sbatch")
    final = sbatch(f"--dependency=afterok:{array}", "--kill-on-invalid-dep=yes",
                   f"--output={out}/logs/finalize-%j.out", "slurm/finalize.sbatch")
    train = sbatch(f"--dependency=afterok:{final}", "--kill-on-invalid-dep=yes", "--nodes=1",
                   f"--output={tmp_path}/train-%j.out", "slurm/train.sbatch")
    wait_for_jobs([array, final, train], timeout=240)

    _same_shards(out, corpus6_local)
    assert (out / "index.json").exists()
    train_log = (tmp_path / f"train-{train}.out").read_text()
    assert "1 node(s) x 2 worker(s)" in train_log, train_log
    assert sorted(p.name for p in (tmp_path / "rec").glob("rank*.jsonl")) == ["rank0.jsonl", "rank1.jsonl"], train_log


def test_hundreds_of_tiny_files_run_as_a_handful_of_tasks_by_default(tmp_path, slurm_cluster, sample_tokenizer):
    """Issue 12: 300 small jsonl files of non-English text, default options: the plan packs them (one task
    here, not 300), says why, and the job finishes finalized, verified and token-exact."""
    corpus = tmp_path / "in"
    corpus.mkdir()
    texts = []
    for k in range(300):
        docs = [f"리뷰 {k}-{j}: 배송이 빠르고 품질이 좋아요. " + t for j, t in enumerate(sample_documents(3, seed=k))]
        (corpus / f"review-{k:04d}.jsonl").write_text("".join(orjson.dumps({"text": d}).decode() + "\n" for d in docs))
        texts += docs
    out = tmp_path / "out"
    proc = run_cli("submit", "--executor", "slurm", "-i", corpus, "-o", out, "-t", sample_tokenizer, *COMMON)
    assert "partition dev: 2 CPUs / --cpus-per-task 1" in proc.stdout       # slots from sinfo
    assert "-> 1 task(s) [auto:" in proc.stdout
    wait_for_jobs(submitted_job_ids(proc.stdout))
    assert len(plan_tasks(out)) == 1 and (out / "index.json").exists()
    run_cli("verify", out)
    assert shard_documents(out) == reference_ids(sample_tokenizer, texts, eos_id(sample_tokenizer))
