"""Messages that misled, and the small flows around them (issue 31, items 12a, 12b, 15a, 15c, 15f), through
the command line in-process: ``--resume`` names a flag the plan was made without as such, a lone ``-t``/``-i``
gets the resume explanation as the long forms do, ``verify`` points to ``repair``, a dry run leaves no
plan that would block the real run, and an invalid choice is one line, not the whole usage."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INCOMPLETE, EXIT_USAGE


@pytest.fixture
def corpus(tmp_path) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("\n".join(sample_documents(60, seed=3)) + "\n")
    return raw


@pytest.fixture
def planned(tmp_path, corpus, sample_tokenizer, capsys) -> Path:
    out = tmp_path / "out"
    assert cli("plan", "-i", corpus, "-o", out, "-t", sample_tokenizer)[0] == 0
    return out


def test_resume_with_a_flag_the_plan_lacks_says_the_plan_was_made_without_it(planned, capsys):
    code, _, err = cli("submit", "--resume", planned, "--strict", "--dry-run")
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1, err
    assert "would not apply --strict (the plan was made without --strict)" in err
    assert "the plan has --strict" not in err


@pytest.mark.parametrize("short, long", [("-t", "--tokenizer"), ("-i", "--input")])
def test_resume_with_a_lone_short_option_is_judged_as_the_long_form(planned, corpus, sample_tokenizer, capsys,
                                                                    short, long):
    value = sample_tokenizer if short == "-t" else corpus
    results = [cli("submit", "--resume", planned, flag, value, "--dry-run") for flag in (short, long)]
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.M)      # log lines' times differ
    assert results[0][0] == results[1][0] and stamp.sub("", results[0][2]) == stamp.sub("", results[1][2])
    code, out, err = results[0]
    assert "is required" not in err
    if short == "-t":       # the plan's own tokenizer: harmless, the dry run shows what would run
        assert code == 0 and "to run: 1 task (id 0)" in out, err
    else:
        assert code == EXIT_USAGE and f"--resume {planned} reruns its frozen plan as it is" in err
        assert f"would not apply --input {corpus} (its inputs are frozen" in err
        assert f"shardprep submit --input {corpus} --tokenizer" in err     # the re-plan names the input typed


def test_resume_with_another_tokenizer_names_the_plans(planned, tmp_path, sample_tokenizer, capsys):
    other = tmp_path / "other.json"
    shutil.copy(sample_tokenizer, other)
    code, _, err = cli("submit", "--resume", planned, "-t", other, "--dry-run")
    assert code == EXIT_USAGE and f"would not apply --tokenizer {other} (the plan has --tokenizer" in err


def test_verify_of_a_missing_shard_names_repair(tmp_path, corpus, sample_tokenizer, capsys):
    out = tmp_path / "done"
    code, _, err = cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--backend", "hf",
                        "--workers", "1", "--no-progress")
    assert code == 0, err
    (out / "shard-00000.tar").unlink()
    code, _, err = cli("verify", out)
    assert code == EXIT_INCOMPLETE and "BAD shard-00000.tar: missing" in err
    assert f"(hint: shardprep repair {out} rebuilds them" in err
    assert cli("repair", out)[0] == 0 and cli("verify", out)[0] == 0    # the hint works


def test_a_dry_run_leaves_no_plan_that_blocks_the_real_run(tmp_path, corpus, sample_tokenizer, capsys):
    out = tmp_path / "dr"
    code, out_text, err = cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--dry-run")
    assert code == 0 and "to run: 1 task (id 0)" in out_text, err
    assert not out.exists()                                 # nothing written: no job.json, plan/, tokenizer
    code, _, err = cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--txt-mode", "paragraph",
                        "--backend", "hf", "--workers", "1", "--no-progress")
    assert code == 0 and (out / "index.json").exists(), err
    # a dry run may not delete a plan and its shards either
    shards = sorted(p.name for p in out.iterdir())
    code, _, err = cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--dry-run", "--overwrite")
    assert code == EXIT_USAGE and "--dry-run with --overwrite would delete" in err
    assert sorted(p.name for p in out.iterdir()) == shards
    # a dry run of the existing plan keeps it
    assert cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--txt-mode", "paragraph",
                "--dry-run")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == shards


def test_an_invalid_choice_is_one_line_naming_the_choices(capsys):
    code, _, err = cli("submit", "--executor", "slrum")
    lines = err.strip().splitlines()
    assert code == EXIT_USAGE and len(lines) == 2, err
    assert lines[0].startswith("shardprep submit: error: argument --executor: invalid choice: 'slrum'")
    assert all(c in lines[0] for c in ("local", "slurm", "submitit"))
    assert lines[1].strip() == "see `shardprep submit --help`"
