"""job.json is written once by the planner; a hand edit is refused, never obeyed (issue 23 items 1 and 2).

Its header is sealed: the digests of the sections that decide what tasks write and what finalize publishes
(``seal``), checked by every reader at O(1) cost.  Older format-2 job.json files (no seal) are still read,
and finalize checks their task count against the plan's own table (``plan/tasks.idx``, digest-chained).
Real CLI throughout."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INPUT, EXIT_PLAN_CONFLICT


@pytest.fixture(scope="module")
def planned_job(tmp_path_factory, sample_tokenizer) -> tuple[Path, Path, tuple]:
    """A 6-task job, every task run, not finalized; (corpus, output, the plan's command-line options)."""
    root = tmp_path_factory.mktemp("tamper")
    corpus = root / "in"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"part-{i}.txt").write_text("\n".join(sample_documents(40, seed=i)) + "\n")
    out = root / "out"
    opts = ("--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--chunk-tokens", "512")
    run_cli("submit", *opts, "--no-progress", "--no-finalize")
    return corpus, out, opts


@pytest.fixture
def job(planned_job, tmp_path) -> Path:
    out = Path(shutil.copytree(planned_job[1], tmp_path / "out"))
    for t in (3, 4, 5):                 # tasks 3-5 still to run, as after a partial run
        (out / f"shard-0000{t}.json").unlink()
        (out / f"shard-0000{t}.tar").unlink()
    return out


def _edit(out: Path, edit) -> None:
    d = orjson.loads((out / "job.json").read_bytes())
    edit(d)
    (out / "job.json").write_bytes(orjson.dumps(d, option=orjson.OPT_INDENT_2) + b"\n")


@pytest.mark.parametrize("section, edit", [
    ("options", lambda d: d["options"].update(add_eos=False)),
    ("tokenizer", lambda d: d["tokenizer"].update(eos_id=1)),
    ("options", lambda d: d["options"].update(chunk_tokens=4096)),
    ("summary", lambda d: d["summary"].update(tasks=2)),
])
def test_hand_edited_job_json_is_refused_by_every_reader(job, section, edit):
    _edit(job, edit)
    line = f"{job / 'job.json'}: '{section}' changed since planning"
    for args in (("submit", "--resume", job, "--no-progress"), ("run-task", job, "--task-id", "3"),
                 ("finalize", job), ("status", job)):
        proc = run_cli(*args, check=EXIT_INPUT)
        assert line in proc.stderr and "a hand-edited plan is not obeyed" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (job / "shard-00003.tar").exists() and not (job / "index.json").exists()


def test_hand_edited_job_json_is_refused_by_resume_and_replanned_with_overwrite(job, planned_job):
    _edit(job, lambda d: d["options"].update(add_eos=False))
    opts = tuple(a if a != planned_job[1] else job for a in planned_job[2])
    again = run_cli("submit", *opts, "--no-progress", check=EXIT_PLAN_CONFLICT)
    assert "'options' changed since planning" in again.stderr
    done = run_cli("submit", *opts, "--no-progress", "--overwrite")
    assert "done: 6 shard(s)" in done.stdout
    assert orjson.loads((job / "index.json").read_bytes())["tokenizer"]["add_eos"] is True
    run_cli("verify", job)


def test_edited_task_count_is_refused_by_finalize(planned_job, tmp_path):
    out = Path(shutil.copytree(planned_job[1], tmp_path / "out"))       # all 6 tasks done, not finalized
    _edit(out, lambda d: d["summary"].update(tasks=2))
    proc = run_cli("finalize", out, check=EXIT_INPUT)
    assert f"{out / 'job.json'}: 'summary' changed since planning" in proc.stderr
    # an older job.json, written before the seal (plan format 2): the plan's own table still tells the truth
    _edit(out, lambda d: (d.pop("seal"), d.update(format_version=2)))
    proc = run_cli("finalize", out, check=EXIT_INPUT)
    assert (f"{out / 'job.json'}: field 'summary.tasks' is 2 but the plan ({out / 'plan' / 'tasks.idx'}) holds 6 "
            f"tasks: job.json was edited after planning") in proc.stderr
    assert not (out / "index.json").exists()
    _edit(out, lambda d: d["summary"].update(tasks=6))                  # unsealed but true: still read
    run_cli("finalize", out)
    assert orjson.loads((out / "index.json").read_bytes())["totals"]["shards"] == 6
