"""Recovery from a plan-level mistake leads somewhere (issue 23, item 9).

``submit --resume`` reruns the frozen plan: it applies executor options and refuses, in one line, plan
options it would not apply (they used to be dropped silently).  Every hint after a failure names a command
that works: ``--resume`` for what lies outside the plan, a re-plan with ``--overwrite`` after an input or
a plan option had to change.  Each test follows the printed advice and checks that it works.
"""

from __future__ import annotations

import json
import os
import sys

from helpers import planned_with_slurm_record, run_cli

from shardprep.errors import EXIT_INCOMPLETE, EXIT_INPUT, EXIT_PLAN_CONFLICT, EXIT_USAGE
from shardprep.executor.slurm.options import SlurmOptions


def _corpus(tmp_path):
    """Two jsonl files whose documents sit under "content"; "text" holds a short title."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(2):
        (raw / f"{f}.jsonl").write_text("".join(json.dumps({"text": f"title {f}-{i}", "content": f"body {f}-{i} " * 20})
                                                + "\n" for i in range(30)))
    return raw


def _documents(out) -> int:
    return json.loads((out / "index.json").read_text())["totals"]["tokens"]


def test_resume_refuses_a_changed_text_field_and_names_overwrite(tmp_path, sample_tokenizer):
    raw, out = _corpus(tmp_path), tmp_path / "out"
    run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")     # the wrong field: "text"
    titles = _documents(out)
    proc = run_cli("submit", "--resume", out, "--text-field", "content", "--no-progress", check=EXIT_USAGE)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "would not apply --text-field content (the plan has --text-field text)" in lines[0]
    assert "--overwrite" in lines[0] and f"--output {out}" in lines[0]
    assert (out / "index.json").exists() and _documents(out) == titles          # nothing was touched
    # the same command without --resume is a different plan: refused, naming --overwrite
    proc = run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--text-field", "content", "--no-progress",
                   check=EXIT_PLAN_CONFLICT)
    assert "options differ: text_field" in proc.stderr and "--overwrite" in proc.stderr
    # --resume with the full, different command line: the conflict names the way out, not --resume again
    proc = run_cli("submit", "--resume", out, "-i", raw, "-t", sample_tokenizer, "--text-field", "content",
                   "--no-progress", check=EXIT_PLAN_CONFLICT)
    assert "without --resume, with --overwrite" in proc.stderr
    # the hint's command (INPUTS filled in) works
    hint = lines[0].split("re-plan with them: ", 1)[1].split(" (this deletes")[0]
    argv = hint.replace("INPUTS", str(raw)).split()[1:]
    assert argv[:2] == ["submit", "--input"]
    run_cli(*argv, "--no-progress")
    assert _documents(out) > titles
    assert json.loads((out / "job.json").read_text())["options"]["text_field"] == "content"


def test_resume_applies_executor_options_and_accepts_the_plans_own_values(tmp_path, sample_tokenizer):
    raw, out = _corpus(tmp_path), tmp_path / "out"
    run_cli("plan", "-i", raw, "-o", out, "-t", sample_tokenizer, "--text-field", "content", "--layout", "doc")
    proc = run_cli("submit", "--resume", out, "--text-field", "content", "--layout", "doc", "--workers", "1",
                   "--no-progress")
    assert "to run: 1 task (id 0)" in proc.stdout and (out / "index.json").exists()
    # a typed default that differs from the plan is refused too (argparse alone cannot tell it from no option)
    proc = run_cli("submit", "--resume", out, "--layout", "pack", "--eos", check=EXIT_USAGE)
    assert "--layout pack (the plan has --layout doc)" in proc.stderr and "--eos (" not in proc.stderr
    proc = run_cli("submit", "--resume", out, "--no-stripe", check=EXIT_USAGE)
    assert "--no-stripe (the output directory and its plan exist already)" in proc.stderr
    proc = run_cli("submit", "--resume", out, "--overwrite", check=EXIT_USAGE)
    assert "--overwrite replaces it: give one" in proc.stderr


def test_resume_of_a_directory_that_does_not_exist_says_so(tmp_path):
    proc = run_cli("submit", "--resume", tmp_path / "nope", check=EXIT_INCOMPLETE)
    assert f"--resume {tmp_path / 'nope'}: no such directory" in proc.stderr
    assert not (tmp_path / "nope").exists()


def test_an_input_error_hint_leads_to_a_replan_that_works(tmp_path, sample_tokenizer):
    """A task fails on bad input (--strict): the hint says re-plan with --overwrite, and --resume would not do."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "a.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)) + "{broken\n")
    proc = run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--strict", "--no-progress",
                   check=EXIT_INPUT)
    assert "malformed json" in proc.stderr
    assert "re-run the submit command with the change and --overwrite" in proc.stderr
    run_cli("submit", "--resume", out, "--no-progress", check=EXIT_INPUT)          # the frozen plan fails again
    status = run_cli("status", out, check=EXIT_INCOMPLETE).stdout
    assert "task 0: failed: " in status and "--overwrite" in status                 # status says why, and how
    run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress", "--overwrite")
    assert (out / "index.json").exists()


def test_slurm_status_of_an_input_error_says_replan_not_resume(tmp_path, sample_tokenizer):
    out = planned_with_slurm_record(tmp_path, sample_tokenizer, SlurmOptions().to_dict(), "71")

    def ended(task: int, status: int) -> None:
        (out / "logs" / f"71_{task}.out").write_text(
            f"shardprep: task {task} = array element 71_{task}, attempt 1, on n1 at 2026-01-01T00:00:01\n"
            f"shardprep-task-exit: task={task} status={status}\n")

    env = {"PATH": os.path.dirname(sys.executable)}             # no Slurm tools: the view comes from the logs
    ended(1, EXIT_INPUT)                                        # e.g. --strict, or a changed input
    proc = run_cli("status", out, check=EXIT_INCOMPLETE, env=env)
    assert "next: fix the input or the option named above" in proc.stdout and "--overwrite" in proc.stdout
    assert "(runs exactly the tasks not done)" not in proc.stdout
    ended(1, 8)                                                 # a full disk: resume is the fix
    proc = run_cli("status", out, check=EXIT_INCOMPLETE, env=env)
    assert f"next: fix the cause, then `shardprep submit --resume {out}`" in proc.stdout
    assert "--overwrite" not in proc.stdout
    ended(2, EXIT_INPUT)                                        # both kinds: both ways, resume first
    proc = run_cli("status", out, check=EXIT_INCOMPLETE, env=env)
    assert "next: fix the cause, then `shardprep submit --resume" in proc.stdout and "--overwrite" in proc.stdout
