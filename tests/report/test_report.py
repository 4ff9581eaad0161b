"""``shardprep report``: every number equals the same number computed from the output's files, for a
finished job, a running one, both layouts, a sampled histogram, a remote (S3 API) output; and the errors.

The page in a real browser is tests/test_report_browser.py.
"""

from __future__ import annotations

import sys

import numpy as np
import orjson
import pytest
from helpers import plan_inputs, run_cli
from report_helpers import expected_numbers, make_job, read_json, task_input_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tmp_path_factory, sample_tokenizer):
    """A finished pack-layout job: 4 tasks, several chunks each, skipped documents of three kinds."""
    return make_job(tmp_path_factory.mktemp("report"), sample_tokenizer, "--chunk-tokens", "1024")


def report_json(out, *extra) -> dict:
    return orjson.loads(run_cli("report", out, "--json", *extra).stdout)


def test_finished_job_numbers_equal_the_files(job):
    n = report_json(job)
    exp = expected_numbers(job)
    index = read_json(job / "index.json")
    # totals: against index.json and against the sidecars
    assert n["finalized"] is True
    for k in ("shards", "samples", "documents", "tokens", "bytes"):
        assert n["totals"][k] == index["totals"][k] == exp["totals"][k], k
    assert n["totals"]["skipped"] == sum(index["totals"]["skipped"].values()) == exp["totals"]["skipped"] == 3
    assert n["totals"]["bytes_per_token"] == pytest.approx(index["totals"]["bytes"] / index["totals"]["tokens"])
    # skipped documents by reason, and the first examples with file:line
    assert n["skipped"]["by_reason"] == exp["skipped"] == index["totals"]["skipped"]
    assert {k for k, v in n["skipped"]["by_reason"].items() if v} == {"malformed_json", "missing_field", "empty"}
    assert n["skipped"]["examples"] == exp["examples"]
    assert all(e["file"].endswith("mixed.jsonl") and e["line"] in (4, 5, 6) for e in n["skipped"]["examples"])
    # tokens per shard
    assert [r["tokens"] for r in n["shards"]["per_shard"]] == [s["tokens"] for s in index["shards"]]
    tokens = np.array([s["tokens"] for s in index["shards"]])
    assert n["shards"]["tokens"] == {"min": tokens.min(), "max": tokens.max(), "mean": pytest.approx(tokens.mean()),
                                     "median": pytest.approx(np.median(tokens))}
    assert n["shards"]["max_over_mean"] == pytest.approx(tokens.max() / tokens.mean())
    assert n["shards"]["target_tokens"] is None     # one file per task: no target


def test_document_lengths_histogram_and_tasks_equal_the_files(job):
    n = report_json(job)
    exp = expected_numbers(job)
    d, lengths = n["doc_lengths"], exp["lengths"]
    assert d["exact"] and d["documents"] == d["documents_total"] == lengths.size == n["totals"]["documents"]
    assert d["chunks_read"] == d["chunks_total"] == n["totals"]["samples"] > len(exp["sidecars"])
    assert (d["min"], d["max"]) == (lengths.min(), lengths.max())
    assert d["mean"] == pytest.approx(lengths.mean())
    assert d["median"] == pytest.approx(np.median(lengths))
    assert [d["p90"], d["p99"]] == pytest.approx(np.percentile(lengths, [90, 99]).tolist())
    edges, counts = np.array(d["histogram"]["edges"]), d["histogram"]["counts"]
    assert edges[0] <= lengths.min() and edges[-1] > lengths.max() and np.all(np.diff(edges) > 0)
    assert np.diff(np.log(edges)).max() < 3 * np.diff(np.log(edges)).mean()   # log-spaced, not linear
    assert counts == np.histogram(lengths, bins=edges)[0].tolist() and sum(counts) == lengths.size
    # per task: Mtok/s and durations straight from each sidecar's stats; backends with their task ids
    rows = n["tasks"]["per_task"]
    assert [r["task"] for r in rows] == [s["task"] for s in exp["sidecars"]]
    for r, s in zip(rows, exp["sidecars"], strict=True):
        assert r["mtok_per_s"] == pytest.approx(s["stats"]["tokens_per_s"] / 1e6)
        assert r["elapsed_s"] == s["stats"]["elapsed_s"] and r["tokens"] == s["tokens"]
        assert r["backend"] == s["backend"]["name"] == "hf" and r["attempts"] == 1 and r["status"] == "done"
        assert r["started"] is not None and r["ended"] >= r["started"]
    secs = [s["stats"]["elapsed_s"] for s in exp["sidecars"]]
    assert n["tasks"]["elapsed_s"]["sum"] == pytest.approx(sum(secs))
    assert n["tasks"]["mtok_per_task_s"] == pytest.approx(n["totals"]["tokens"] / sum(secs) / 1e6)
    assert n["backends"] == [{"name": "hf", "version": exp["sidecars"][0]["backend"]["version"], "requested": "hf",
                              "fallback_reason": None, "tasks": 4, "task_ranges": "0-3"}]
    p = n["progress"]
    assert (p["tasks"], p["done"], p["missing"], p["eta_s"], p["work_done"]) == (4, 4, 0, 0.0, 1.0)


def test_tokenizer_summary_and_decoded_samples(job, sample_tokenizer):
    from helpers import shard_documents
    from tokenizers import Tokenizer

    n = report_json(job)
    t, tok_rec = n["tokenizer"], read_json(job / "job.json")["tokenizer"]
    for k in ("vocab_size", "dtype", "eos_id", "eos_token", "bos_id", "pad_id"):
        assert t[k] == tok_rec[k], k
    assert (t["model"], t["family"], t["add_eos"], t["add_bos"]) == ("BPE", "byte-level BPE", True, False)
    docs = shard_documents(job)
    per_shard = [s["documents"] for s in read_json(job / "index.json")["shards"]]
    tok = Tokenizer.from_file(str(job / "tokenizer.json"))
    first, last = n["samples"][0], n["samples"][-1]
    assert (first["shard"], first["document"], first["tokens"]) == ("shard-00000.tar", 0, len(docs[0]))
    assert first["first_ids"] == docs[0][:12] and first["last_ids"] == docs[0][-12:]
    assert first["head"] == tok.decode(docs[0] if len(docs[0]) <= 96 else docs[0][:48], skip_special_tokens=False)
    assert first["head"].endswith("<|endoftext|>") or first["tail"].endswith("<|endoftext|>")
    assert (last["shard"], last["document"], last["tokens"]) == ("shard-00003.tar", per_shard[-1] - 1, len(docs[-1]))
    assert last["last_ids"] == docs[-1][-12:]


@pytest.mark.requires("report")
def test_running_job_shows_progress_failure_and_eta(tmp_path, sample_tokenizer):
    """Two tasks done, one failed (its input changed after planning), one never started; no index.json."""
    from report_helpers import write_corpus

    raw, out = write_corpus(tmp_path / "raw"), tmp_path / "out"
    run_cli("plan", "--one-file-per-task", "--input", raw, "--output", out, "--tokenizer", sample_tokenizer, "--backend", "hf")
    nothing = report_json(out)                                    # planned, nothing run yet
    assert (nothing["progress"]["done"], nothing["totals"]["tokens"], nothing["samples"]) == (0, 0, [])
    assert nothing["progress"]["eta_s"] is None and nothing["doc_lengths"]["documents"] == 0
    run_cli("report", out, "--html", tmp_path / "empty" / "r.html")
    assert "nothing to draw yet" in (tmp_path / "empty" / "r.html").read_text()
    for t in (0, 1):
        run_cli("run-task", out, "--task-id", t)
    with open(plan_inputs(out)[2].path, "a") as f:
        f.write("appended after planning\n")
    run_cli("run-task", out, "--task-id", 2, check=3)
    n = report_json(out)
    p = n["progress"]
    assert n["finalized"] is False and not (out / "index.json").exists()
    assert (p["tasks"], p["done"], p["missing"], p["missing_ranges"]) == (4, 2, 2, "2-3")
    assert p["problems"] == {"no sidecar": 2}
    assert [f["task"] for f in p["failed"]] == [2] and "changed since it was planned" in p["failed"][0]["reason"]
    assert p["running"] == []
    planned = [task_input_bytes(out, t) for t in range(4)]
    assert p["work_done"] == pytest.approx(sum(planned[:2]) / sum(planned))
    side = [read_json(out / f"shard-{t:05d}.json") for t in (0, 1)]
    tokens = sum(s["tokens"] for s in side)
    assert p["eta_s"] is None and "nothing running or pending" in p["eta_basis"]   # stopped: no ETA
    last_end = max(r["ended"] for r in n["tasks"]["per_task"] if r["ended"] is not None)   # task 2's failure
    assert p["elapsed_s"] == pytest.approx(last_end - p["started_at"])              # wall time while it ran
    assert p["tokens_per_s"] == pytest.approx(tokens / p["elapsed_s"])
    assert p["input_bytes_per_s"] == pytest.approx(sum(planned[:2]) / p["elapsed_s"])
    assert n["totals"]["tokens"] == tokens and n["totals"]["shards"] == 2
    assert [r["status"] for r in n["tasks"]["per_task"]] == ["done", "done", "failed", "not started"]
    # the page renders mid-job too
    page = tmp_path / "page" / "r.html"
    run_cli("report", out, "--html", page)
    text = page.read_text()
    assert "in progress" in text and "changed since it was planned" in text
    assert sorted(p.name for p in page.parent.iterdir()) == ["r-doc-lengths.png", "r-shard-tokens.png", "r-tasks.png",
                                                             "r-timeline.png", "r.html"]


def test_doc_layout_lengths_come_from_the_sidecars(tmp_path, sample_tokenizer):
    out = make_job(tmp_path, sample_tokenizer, "--layout", "doc")
    n, exp = report_json(out), expected_numbers(out)
    d = n["doc_lengths"]
    assert d["exact"] and d["chunks_read"] == 0 and d["documents"] == exp["lengths"].size
    assert (d["min"], d["max"], d["median"]) == (exp["lengths"].min(), exp["lengths"].max(),
                                                 pytest.approx(np.median(exp["lengths"])))
    assert d["chunks_total"] == n["totals"]["samples"] == n["totals"]["documents"]


def test_large_jobs_sample_evenly_spaced_chunks(job):
    n = report_json(job, "--max-chunks", "5")
    d = n["doc_lengths"]
    tables = [read_json(job / f"shard-{t:05d}.json")["chunks"] for t in range(4)]
    flat = [(t, c) for t, tab in enumerate(tables) for c in range(len(tab["key"]))]
    picked = [flat[i] for i in np.unique(np.linspace(0, len(flat) - 1, 5).round().astype(int))]
    assert picked[0] == flat[0] and picked[-1] == flat[-1]
    assert not d["exact"] and (d["chunks_read"], d["chunks_total"]) == (5, len(flat))
    assert d["documents"] == sum(tables[t]["docs"][c] for t, c in picked) < d["documents_total"]
    assert sum(d["histogram"]["counts"]) == d["documents"]


def test_remote_output_over_the_s3_api_gives_the_same_numbers(job, s3_endpoint):
    from s3_server import aws_env, make_bucket

    bucket = make_bucket(s3_endpoint, "report")
    env = aws_env({"AWS_ENDPOINT_URL": s3_endpoint})
    run_cli("upload", job, f"s3://{bucket}/ds/", "--endpoint-url", s3_endpoint, "--no-progress", env=env)
    remote = orjson.loads(run_cli("report", f"s3://{bucket}/ds", "--json", env=env).stdout)
    local = report_json(job)
    for key in ("totals", "doc_lengths", "shards", "skipped", "backends", "samples", "tokenizer"):
        assert remote[key] == local[key], key
    rates = [[r["mtok_per_s"] for r in n["tasks"]["per_task"]] for n in (remote, local)]
    assert rates[0] == rates[1]
    assert remote["finalized"] and remote["progress"]["missing"] == 0


def test_errors_are_one_line_with_the_right_exit_code(tmp_path, job):
    proc = run_cli("report", tmp_path / "nope", check=3)
    assert proc.stderr.strip().count("\n") == 0 and "is not a directory" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_cli("report", tmp_path / "empty", check=5)
    assert "holds neither job.json nor index.json" in proc.stderr
    proc = run_cli("report", job, "--max-chunks", "0", check=2)
    assert "--max-chunks" in proc.stderr


def test_missing_matplotlib_is_a_clear_error_and_json_still_works(tmp_path, job, monkeypatch):
    # as where matplotlib is not installed: its import fails (in this process; sys.modules is put back after)
    monkeypatch.setitem(sys.modules, "matplotlib", None)

    def run(*args):
        return run_cli(*args, check=False)

    proc = run("report", job, "--html", tmp_path / "r.html")
    assert proc.returncode == 8, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "shardprep report: error: `shardprep report` without --json needs the optional package matplotlib, "
        "which is not installed (hint: pip install 'shardprep[report]')"]
    assert not (tmp_path / "r.html").exists()
    proc = run("report", job, "--json")
    assert proc.returncode == 0 and orjson.loads(proc.stdout)["totals"]["shards"] == 4


def test_task_log_attempts_failures_and_runs_in_progress():
    from shardprep.job.logs import parse_task_log

    log = ("2026-01-02 03:04:05,100 INFO shardprep.job.task: task 7: /d/a.txt[0:None]\n"
           "2026-01-02 03:04:06,000 INFO shardprep.job.task: task 7: backend {'name': 'hf'}, 1 thread(s)\n"
           "2026-01-02 03:04:09,500 ERROR shardprep.job.task: task 7 failed: task 7 stopped on SIGUSR1 at a "
           "safe point; temporary shard removed, safe to requeue\n"
           "Traceback (most recent call last): a continuation line, no timestamp\n"
           "2026-01-02 03:10:00,000 INFO shardprep.job.task: task 7: /d/a.txt[0:None]\n")
    running = parse_task_log(7, log)
    assert (running.attempts, running.status, running.ended, running.duration_s) == (2, "running", None, None)
    failed = parse_task_log(7, log.rsplit("\n", 2)[0] + "\n")
    assert (failed.attempts, failed.status) == (1, "failed") and "stopped on SIGUSR1" in failed.reason
    assert failed.duration_s == pytest.approx(4.4)
    done = parse_task_log(7, log + "2026-01-02 03:10:02,250 INFO shardprep.job.task: task 7 done: 1 documents\n")
    assert (done.attempts, done.status, done.reason, done.duration_s) == (2, "done", None, pytest.approx(2.25))
    assert parse_task_log(7, "no timestamp here\n") is None


@pytest.mark.requires("report")
def test_backend_fallback_reasons_are_grouped_per_task(tmp_path, job):
    """A task whose ``auto`` check fell back to hf: its own row, with the reason from its sidecar."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(job, out)
    side_path = out / "shard-00001.json"
    side = read_json(side_path)
    why = "gigatoken 0.10.0 differs from hf on document 17 (token 3)"
    side["backend"] = {**side["backend"], "requested": "auto", "fallback_reason": why,
                       "check": {"passed": False, "reason": why}}
    side_path.write_bytes(orjson.dumps(side))
    n = report_json(out)
    rows = {(b["requested"], b["fallback_reason"]): (b["tasks"], b["task_ranges"]) for b in n["backends"]}
    assert rows == {("hf", None): (3, "0,2-3"), ("auto", why): (1, "1")}
    run_cli("report", out, "--html", out / "r.html")
    assert why in (out / "r.html").read_text()


@pytest.mark.slurm
def test_slurm_job_with_a_failed_task_reports_the_queue_view_and_the_reason(tmp_path, slurm_cluster,
                                                                              sample_tokenizer):
    from slurm_cluster import submitted_job_ids, wait_for_jobs

    from shardprep.demo_data import sample_documents

    raw = tmp_path / "raw"
    raw.mkdir()
    for i in (0, 2):
        (raw / f"part-{i}.txt").write_text("\n".join(sample_documents(30, seed=i)) + "\n")
    (raw / "part-1.txt").write_bytes(b"fine line\nanother\n\xff\xfe broken utf-8\nlast\n")
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "-i", raw, "-o", out, "-t", sample_tokenizer, "--strict",
                   "--backend", "hf", "--time", "5", "--signal-seconds", "30", "--mem", "500M")
    wait_for_jobs(submitted_job_ids(proc.stdout))
    n = report_json(out)
    p = n["progress"]
    failed_task = 1
    assert (p["done"], p["missing"], p["missing_ranges"]) == (2, 1, str(failed_task))
    assert p["slurm"]["failed"] == [failed_task] and p["slurm"]["running"] == p["slurm"]["pending"] == []
    assert [f["task"] for f in p["failed"]] == [failed_task]
    assert "part-1.txt:3" in p["failed"][0]["reason"] and "invalid utf8" in p["failed"][0]["reason"]
    assert n["finalized"] is False and p["eta_s"] is None and "nothing running" in p["eta_basis"]
