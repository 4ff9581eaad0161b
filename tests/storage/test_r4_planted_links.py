"""Issue 31, item 1 ("Planted links in the output"): a symbolic link planted at a name shardprep writes
under OUTPUT (anyone's to plant in a group-writable output on a shared file system) must never redirect
the write.  The lock record once truncated the link's target; a task once appended its log to it.

For each name (the lock file, a task log, ``logs/`` itself, a temporary name, the plan's staging and
``plan/`` directories, repair's scratch directory, the report, ``slurm/``, the demo corpus) a link to a
victim outside OUTPUT is planted, the real command runs, and the victim is unchanged: the command refused
in one line naming the link (exit 4, ``PlantedLinkError``), or replaced the link without writing through it.
Temporary names hold the host and pid, so those cases run the CLI in this process (its pid is known)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.cli.main import main
from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_PLAN_CONFLICT, PlantedLinkError
from shardprep.storage.atomic import temp_name_for

VICTIM = b"precious: not shardprep's\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("links-in")
    for i in range(2):
        (root / f"part-{i}.txt").write_text("\n".join(sample_documents(40, seed=50 + i)) + "\n")
    return root


@pytest.fixture(scope="module")
def finished(tmp_path_factory, corpus, sample_tokenizer) -> Path:
    out = tmp_path_factory.mktemp("links-done") / "out"
    run_cli("submit", "--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--no-progress")
    return out


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside every OUTPUT, which nothing may write."""
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM)
    return path


@pytest.fixture
def victim_dir(tmp_path) -> Path:
    path = tmp_path / "victim-dir"
    path.mkdir()
    (path / "keep.txt").write_bytes(VICTIM)
    return path


def _untouched(victim: Path) -> None:
    if victim.is_dir():
        assert sorted(os.listdir(victim)) == ["keep.txt"], os.listdir(victim)
        victim = victim / "keep.txt"
    assert victim.read_bytes() == VICTIM


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "out"))


def _refused_in_one_line(stderr: str, link: Path) -> None:
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    assert "is a symbolic link" in errors[0] and str(link.relative_to(link.parent.parent)) in errors[0], errors[0]


def _in_process(capsys, *argv: str | os.PathLike) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------- the lock file

@pytest.mark.parametrize("mode", ["flock", "exclusive"])
def test_a_link_at_the_lock_file_is_refused_and_its_target_untouched(tmp_path, corpus, sample_tokenizer, victim,
                                                                      mode):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".shardprep.lock").symlink_to(victim)
    proc = run_cli("plan", "--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer,
                   check=EXIT_PLAN_CONFLICT, env={"SHARDPREP_LOCK_MODE": mode})
    _refused_in_one_line(proc.stderr, out / ".shardprep.lock")
    _untouched(victim)
    assert os.listdir(out) == [".shardprep.lock"]          # nothing planned through it either


# ----------------------------------------------------------------------------------------- task logs

def test_a_link_at_a_task_log_is_refused_and_nothing_is_appended_to_its_target(tmp_path, finished, victim):
    out = _copy(finished, tmp_path)
    log = out / "logs" / "task-00000.log"
    log.unlink()
    log.symlink_to(victim)
    (out / "shard-00000.json").unlink()                    # task 0 must run again
    proc = run_cli("submit", "--resume", out, "--no-progress", check=EXIT_PLAN_CONFLICT)
    _refused_in_one_line(proc.stderr, log)
    _untouched(victim)


def test_a_link_at_logs_is_refused_not_followed(tmp_path, finished, victim_dir):
    out = _copy(finished, tmp_path)
    shutil.rmtree(out / "logs")
    (out / "logs").symlink_to(victim_dir, target_is_directory=True)
    (out / "shard-00001.json").unlink()
    proc = run_cli("run-task", out, "--task-id", "1", check=EXIT_PLAN_CONFLICT)
    _refused_in_one_line(proc.stderr, out / "logs")
    _untouched(victim_dir)


# ------------------------------------------------------------------------------------ temporary names

def test_a_link_at_the_shards_temporary_name_is_refused(tmp_path, finished, victim, capsys):
    out = _copy(finished, tmp_path)
    shutil.rmtree(out / "logs")                            # a first attempt: no stale temporaries are swept
    (out / "shard-00000.json").unlink()
    (out / "shard-00000.tar").unlink()
    tmp = temp_name_for(out / "shard-00000.tar")
    tmp.symlink_to(victim)
    code, err = _in_process(capsys, "run-task", out, "--task-id", "0")
    assert code == EXIT_PLAN_CONFLICT, err
    _refused_in_one_line(err, tmp)
    _untouched(victim)


@pytest.mark.parametrize("command, name", [("finalize", "index.json"), ("report", "report.html")])
def test_a_link_at_a_final_files_temporary_name_is_refused(tmp_path, finished, victim, capsys, command, name):
    if command == "report":
        pytest.importorskip("matplotlib")
    out = _copy(finished, tmp_path)
    tmp = temp_name_for(out / name)
    tmp.symlink_to(victim)
    code, err = _in_process(capsys, command, out)
    assert code == EXIT_PLAN_CONFLICT, err
    _refused_in_one_line(err, tmp)
    _untouched(victim)
    assert not (out / name).is_symlink()


def test_a_leftover_regular_file_at_a_temporary_name_is_replaced(tmp_path):
    """A dead process with this pid left its temporary file: that is not a planted link, it is replaced."""
    from shardprep.storage.atomic import write_json_atomic

    target = tmp_path / "x.json"
    temp_name_for(target).write_bytes(b"left over")
    write_json_atomic(target, {"a": 1})
    assert target.read_bytes() == b'{\n  "a": 1\n}\n'
    assert not temp_name_for(target).exists()


# --------------------------------------------------------------------------------- plan directories

def test_a_link_at_the_plans_staging_directory_is_refused(tmp_path, corpus, sample_tokenizer, victim_dir, capsys):
    out = tmp_path / "out"
    out.mkdir()
    staging = temp_name_for(out / "plan")
    staging.symlink_to(victim_dir, target_is_directory=True)
    code, err = _in_process(capsys, "plan", "--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer)
    assert code == EXIT_PLAN_CONFLICT, err
    _refused_in_one_line(err, staging)
    _untouched(victim_dir)


def test_a_link_at_plan_is_refused(tmp_path, corpus, sample_tokenizer, victim_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan").symlink_to(victim_dir, target_is_directory=True)
    proc = run_cli("plan", "--one-file-per-task", "-i", corpus, "-o", out, "-t", sample_tokenizer,
                   check=EXIT_PLAN_CONFLICT)
    _refused_in_one_line(proc.stderr, out / "plan")
    _untouched(victim_dir)


# ------------------------------------------------------------------------------------------- repair

def test_a_link_at_repairs_scratch_directory_is_refused(tmp_path, finished, victim_dir, capsys):
    out = _copy(finished, tmp_path)
    with open(out / "shard-00001.tar", "r+b") as f:        # something to repair
        f.truncate(1024)
    scratch = temp_name_for(out / "repair")
    scratch.symlink_to(victim_dir, target_is_directory=True)
    code, err = _in_process(capsys, "repair", out)
    assert code == EXIT_PLAN_CONFLICT, err
    _refused_in_one_line(err, scratch)
    _untouched(victim_dir)


# ------------------------------------------------------------------------------------------- report

def test_a_link_at_report_html_is_replaced_not_written_through(tmp_path, finished, victim):
    pytest.importorskip("matplotlib")
    out = _copy(finished, tmp_path)
    (out / "report.html").symlink_to(victim)
    run_cli("report", out)
    _untouched(victim)
    assert not (out / "report.html").is_symlink() and b"<html" in (out / "report.html").read_bytes()


# ----------------------------------------------------------------------------- slurm/ and the demo

def test_a_link_at_slurm_is_refused_before_jobs_json_is_written(tmp_path, victim_dir):
    from shardprep.executor.slurm.jobs import write_submissions

    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm").symlink_to(victim_dir, target_is_directory=True)
    with pytest.raises(PlantedLinkError, match="slurm is a symbolic link"):
        write_submissions(out, [])
    _untouched(victim_dir)


def test_the_demo_corpus_replaces_a_planted_link_without_writing_through(tmp_path, victim):
    from shardprep.demo_data import write_sample_corpus

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "part-000.txt").symlink_to(victim)
    write_sample_corpus(raw, files=1, docs_per_file=5)
    _untouched(victim)
    assert not (raw / "part-000.txt").is_symlink()


def test_stage_never_writes_through_a_link_at_its_journal_or_a_temporary_name(tmp_path, s3_endpoint, victim, capsys):
    """The stage destination is an output too: its verified-copies journal is appended to (a link there is
    refused), and each object lands under a temporary name (host and pid) first (a link there is removed as
    a dead stage's temporary, and the object is created anew); the links' target is untouched."""
    from s3_server import make_bucket, s3_client

    from shardprep.staging.manifest import JOURNAL_NAME, STATE_DIR

    bucket = make_bucket(s3_endpoint)
    s3_client(s3_endpoint).put_object(Bucket=bucket, Key="raw/a.txt", Body=b"one line\n")
    dest = tmp_path / "staged"
    (dest / STATE_DIR).mkdir(parents=True)
    journal = dest / STATE_DIR / JOURNAL_NAME
    journal.symlink_to(victim)
    code, err = _in_process(capsys, "stage", f"s3://{bucket}/raw/", dest, "--endpoint-url", s3_endpoint)
    assert code != 0
    _untouched(victim)
    assert str(journal) in err or JOURNAL_NAME in err
    dest = tmp_path / "staged-2"
    dest.mkdir()
    temp = temp_name_for(dest / "a.txt")
    temp.symlink_to(victim)
    code, err = _in_process(capsys, "stage", f"s3://{bucket}/raw/", dest, "--endpoint-url", s3_endpoint)
    assert code == 0, err               # a stage clears what looks like a dead stage's temporary: the link goes
    _untouched(victim)
    assert not temp.is_symlink() and (dest / "a.txt").read_bytes() == b"one line\n"
