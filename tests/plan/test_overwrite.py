"""--overwrite deletes only what shardprep wrote (issue 13, item 9): a user's own files in the output
directory (and in its logs/) survive, and a job.json that is not a shardprep plan is refused."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.errors import EXIT_PLAN_CONFLICT
from shardprep.job.plan import OWNED_DIRS, written_by_shardprep
from shardprep.storage.lock import LOCK_FILE


def _submit(inp: Path, out: Path, tok: Path, *extra: str, check: bool | int = True):
    return run_cli("submit", "--one-file-per-task", "-i", inp, "-o", out, "-t", tok, "--no-progress", *extra, check=check)


def _all_files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def test_overwrite_keeps_the_users_files_and_removes_the_old_plans(tmp_path, sample_tokenizer):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"{i}.txt").write_text(f"document {i} for the first plan\n")
    out = tmp_path / "out"
    _submit(raw, out, sample_tokenizer)
    # the user's own files beside the shards, including in logs/, and leftovers shardprep may write
    (out / "logs" / "my-notes.txt").write_text("mine")
    (out / "README.md").write_text("mine")
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.py").write_text("mine")
    (out / "logs" / "123_4.out").write_text("an old array task log")
    (out / ".shard-00007.tar.node1.999.tmp").write_bytes(b"interrupted")

    (raw / "2.txt").unlink()                           # a different plan: two tasks instead of three
    proc = _submit(raw, out, sample_tokenizer, "--layout", "doc", "--overwrite")
    assert "--overwrite kept 3 entries shardprep did not write" in proc.stderr
    assert "README.md" in proc.stderr and "analysis/" in proc.stderr and "logs/my-notes.txt" in proc.stderr
    assert (out / "logs" / "my-notes.txt").read_text() == "mine"
    assert (out / "README.md").read_text() == "mine" and (out / "analysis" / "plot.py").read_text() == "mine"
    assert not (out / "shard-00002.tar").exists() and not (out / "shard-00002.json").exists()
    assert not (out / "logs" / "123_4.out").exists() and not (out / ".shard-00007.tar.node1.999.tmp").exists()
    assert orjson.loads((out / "index.json").read_bytes())["totals"]["shards"] == 2
    run_cli("verify", out)


def test_overwrite_refuses_a_job_json_shardprep_did_not_write(tmp_path, sample_tokenizer):
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "job.json").write_text('{"job": "another tool\'s", "steps": 3}\n')
    (out / "logs" / "task-00000.log").write_text("another tool's log")
    (out / "shard-00000.tar").write_bytes(b"not ours either?")
    before = {name: (out / name).read_bytes() for name in _all_files(out)}

    proc = _submit(tmp_path / "in.txt", out, sample_tokenizer, "--overwrite", check=EXIT_PLAN_CONFLICT)
    assert f"{out / 'job.json'} is not a shardprep plan" in proc.stderr and "Traceback" not in proc.stderr
    assert {name: (out / name).read_bytes() for name in _all_files(out)} == before     # nothing deleted
    (out / "job.json").write_text("{torn")
    proc = _submit(tmp_path / "in.txt", out, sample_tokenizer, "--overwrite", check=EXIT_PLAN_CONFLICT)
    assert "is not a shardprep plan" in proc.stderr


@pytest.mark.requires("loader")
def test_every_file_a_run_writes_is_on_the_overwrite_list(tmp_path, sample_tokenizer):
    """What a local run and a Slurm submission (dry run plus the logs sbatch and submitit write) leave
    in OUTPUT is exactly what --overwrite may delete; anything new must be added to OWNED_FILES."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("one\ntwo\n")
    out = tmp_path / "out"
    _submit(raw, out, sample_tokenizer)
    if importlib.util.find_spec("matplotlib"):              # the [report] extra
        run_cli("report", out)
        assert (out / "report.html").exists()
    written = _all_files(out)
    assert written and all(written_by_shardprep(p) for p in written), written
    assert not (out / LOCK_FILE).exists()

    import submitit.core.utils as subutils

    from shardprep.executor.slurm.options import SlurmOptions
    from shardprep.executor.slurm.sbatch import SlurmExecutor
    from shardprep.executor.slurm.submitit import SUBMITIT_DIR

    ex = SlurmExecutor(SlurmOptions(max_parallel=2))
    for job in ex.render(out, ex.plan(out, [0], 1001), 7):
        assert written_by_shardprep(f"slurm/{job.script_name}"), job.script_name
    folder = out / SUBMITIT_DIR
    for job_id in ("812", "812_3"):
        paths = subutils.JobPaths(folder, job_id=job_id, task_id=0)
        for p in (paths.stdout, paths.stderr, paths.result_pickle, paths.submitted_pickle, paths.submission_file):
            assert written_by_shardprep(str(p.relative_to(out))), p
    for name in ("slurm/jobs.json", "logs/812_3.out", "logs/finalize-813.out", "slurm/.jobs.json.n1.42.tmp"):
        assert written_by_shardprep(name), name
    for name in ("notes.txt", "logs/notes.txt", "slurm/my.sbatch", "shard-1.tar", ".bashrc", "logs/x_1.out"):
        assert not written_by_shardprep(name), name
    assert set(OWNED_DIRS) == {"logs", "slurm", os.path.dirname(f"{SUBMITIT_DIR}/x"), "plan"}
