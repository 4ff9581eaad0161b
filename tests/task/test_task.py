"""``run_task`` in process: it leaves the caller's logging as it found it, and reads only its own share
of the frozen plan (refusing one that was altered after planning)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.api import plan_job
from shardprep.demo_data import write_sample_corpus
from shardprep.errors import InputDataError, PlanConflictError, RecordError
from shardprep.job import plan_files
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.plan_files import read_task
from shardprep.job.schema import Job
from shardprep.job.state import job_state, load_job
from shardprep.job.task import run_task

ONE_EACH = PlanOptions(one_file_per_task=True)   # these tests need several tasks from a few small files


@pytest.fixture()
def planned(tmp_path, sample_tokenizer) -> Path:
    corpus = write_sample_corpus(tmp_path / "corpus", files=3, docs_per_file=20)
    out = tmp_path / "out"
    plan_job([corpus], out, sample_tokenizer, TokenizeOptions(backend="hf"), PlanOptions(one_file_per_task=True))
    return out


@pytest.mark.parametrize("level", [logging.NOTSET, logging.WARNING, logging.DEBUG])
def test_logger_level_and_handlers_are_restored(planned, level):
    logger = logging.getLogger("shardprep")
    before_level, before_handlers = logger.level, list(logger.handlers)
    logger.setLevel(level)
    try:
        assert run_task(planned, 0, threads=1).documents == 20        # ran
        assert logger.level == level and logger.handlers == before_handlers
        assert run_task(planned, 0, threads=1).skipped_existing       # already done
        assert logger.level == level and logger.handlers == before_handlers
        changed = next(p for p in (planned.parent / "corpus").iterdir() if p.name.startswith("part-001"))
        os.utime(changed, ns=(1, 1))
        with pytest.raises(InputDataError, match="changed since it was planned"):
            run_task(planned, 1, threads=1)                            # failed
        assert logger.level == level and logger.handlers == before_handlers
    finally:
        logger.setLevel(before_level)
    assert "task 0 done" in (planned / "logs" / "task-00000.log").read_text()


def test_only_a_rerun_lists_the_output_directory_for_stale_temporaries(planned, monkeypatch):
    """Listing the output directory costs O(finished tasks); a first attempt (no earlier log) skips it."""
    from shardprep.job import task as task_module

    calls: list[str] = []
    monkeypatch.setattr(task_module, "remove_stale_temps", lambda directory, stem: calls.append(stem) or 0)
    run_task(planned, 0, threads=1)
    assert calls == []
    (planned / "shard-00000.json").unlink()                  # not done any more: the next attempt re-runs it
    run_task(planned, 0, threads=1)
    assert calls == ["shard-00000.tar", "shard-00000.json"]


# -- issue 16: a task reads the job header and its own record, and trusts nothing it cannot check -------
@pytest.fixture()
def fifty(tmp_path, sample_tokenizer, monkeypatch) -> Path:
    """50 one-file tasks, table blocks of 4 entries (13 blocks), so 'its own share' is a small part."""
    monkeypatch.setattr(plan_files, "BLOCK", 4)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(50):
        (corpus / f"f{i:03d}.txt").write_text(f"document number {i}\n")
    out = tmp_path / "out"
    plan_job([corpus], out, sample_tokenizer, TokenizeOptions(backend="hf"), ONE_EACH)
    return out


def _lines(out: Path) -> list[bytes]:
    return (out / "plan" / "tasks.jsonl").read_bytes().splitlines(keepends=True)


def test_a_task_reads_only_the_table_summary_its_block_and_its_record(fifty, monkeypatch):
    job = load_job(fifty)
    assert job.n_tasks == 50 and job.plan.root == str(fifty.parent / "corpus")
    reads: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(n) or real(fd, n, off))
    task = read_task(fifty, job, 37)
    assert [Path(i.input.path).name for i in task.items] == ["f037.txt"] and task.items[0].input.size == 19
    header, summary, block, next_offset = 32, 8 + 13 * 32, 4 * 24, 8
    assert sum(reads) <= header + summary + block + next_offset + len(_lines(fifty)[37])
    assert sum(reads) < (fifty / "plan" / "tasks.idx").stat().st_size // 2


def test_status_reads_job_json_once(fifty, monkeypatch):
    calls = []
    real = Job.parse.__func__
    monkeypatch.setattr(Job, "parse", classmethod(lambda cls, *a: calls.append(1) or real(cls, *a)))
    assert len(job_state(fifty).missing) == 50 and len(calls) == 1


def test_a_task_refuses_a_plan_whose_record_was_altered(fifty):
    path = fifty / "plan" / "tasks.jsonl"
    lines = _lines(fifty)
    lines[37] = lines[37].replace(b"f037", b"f038")          # same length: only the digest can tell
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordError, match=r"plan/tasks.jsonl: task 37's record: the plan was altered"):
        run_task(fifty, 37, threads=1)
    assert run_task(fifty, 36, threads=1).documents == 1       # the other tasks never read that record
    proc = run_cli("run-task", fifty, "--task-id", 37, check=3)
    assert "task 37's record" in proc.stderr and "Traceback" not in proc.stderr

    # re-signing the record in its table entry breaks the entry block's digest ...
    table = bytearray((fifty / "plan" / "tasks.idx").read_bytes())
    table[32 + 37 * 24 + 8:32 + 38 * 24] = hashlib.sha256(lines[37]).digest()[:16]
    (fifty / "plan" / "tasks.idx").write_bytes(bytes(table))
    with pytest.raises(RecordError, match=r"tasks.idx: entries of tasks 36-39"):
        read_task(fifty, load_job(fifty), 37)
    # ... and re-signing the block breaks the table digest job.json holds
    blocks = 32 + 50 * 24 + 8
    table[blocks + 9 * 32:blocks + 10 * 32] = hashlib.sha256(table[32 + 36 * 24:32 + 40 * 24]).digest()
    (fifty / "plan" / "tasks.idx").write_bytes(bytes(table))
    with pytest.raises(RecordError, match=r"tasks.idx: table digest"):
        read_task(fifty, load_job(fifty), 37)


def test_a_plan_of_the_old_layout_is_refused_with_a_clear_error(tmp_path, sample_tokenizer):
    out = tmp_path / "old"
    out.mkdir()
    (out / "job.json").write_text('{"format_version": 1, "fingerprint": "x", "inputs": [], "tasks": []}')
    with pytest.raises(RecordError, match="job.json: format_version 1 is not supported .*re-plan into a new output"):
        load_job(out)
    (tmp_path / "in.txt").write_text("hello\n")
    with pytest.raises(PlanConflictError, match="job.json cannot be read .*format_version 1"):
        plan_job([tmp_path / "in.txt"], out, sample_tokenizer)


def test_replanning_names_what_changed(fifty, sample_tokenizer):
    corpus = fifty.parent / "corpus"
    os.utime(corpus / "f005.txt", ns=(5, 5))
    with pytest.raises(PlanConflictError, match=r"input\(s\) changed since planning \(size/mtime\): \S*f005.txt"):
        plan_job([corpus], fifty, sample_tokenizer, TokenizeOptions(backend="hf"), ONE_EACH)
    (corpus / "new.txt").write_text("x\n")
    with pytest.raises(PlanConflictError, match=r"the input files differ \(50 before, 51 now\)"):
        plan_job([corpus], fifty, sample_tokenizer, TokenizeOptions(backend="hf"), ONE_EACH)
    job = plan_job([corpus], fifty, sample_tokenizer, TokenizeOptions(backend="hf"), ONE_EACH, overwrite=True)[1]
    assert job.n_tasks == 51 and not list(fifty.glob(".plan.*"))   # no staging directory left behind
