"""Fast checks of the Slurm executors without a cluster: options, the submission plan (MaxArraySize
splitting, the shared throttle, the finalize dependency; property-based), rendering, dry-run output checked
against the options given and byte for byte against the output of the code before the plan existed,
array syntax, status parsing, and the batch script's signal/requeue logic (bash with a stand-in task)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import examples
from helpers import planned_with_slurm_record, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.errors import ConfigError, RecordError
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.jobs import ArrayRecord, Submission, latest_attempts
from shardprep.executor.slurm.options import SlurmOptions, parse_slurm_time
from shardprep.executor.slurm.render import PASSED_ENV, SBATCH_MARKER, TEMPLATES, render_tokenize, template_text
from shardprep.executor.slurm.sbatch import SlurmExecutor
from shardprep.executor.slurm.state import read_task_log
from shardprep.executor.slurm.submission import SubmissionPlan
from shardprep.executor.slurm.submitit import SubmititExecutor, extra_as_parameters

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parents[1] / "fixtures" / "slurm_golden"


def plan_arrays(task_ids, max_array_size, indexing="offset"):
    return SubmissionPlan.build(task_ids, max_array_size=max_array_size, indexing=indexing).arrays


def sbatch_lines(script: str) -> dict[str, list[str]]:
    """``{"--array": ["0-5%2"], ...}`` from a script's #SBATCH lines (in order, later wins in sbatch)."""
    out: dict[str, list[str]] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            name, _, value = line[len("#SBATCH "):].partition("=")
            out.setdefault(name, []).append(value)
    return out


def effective(script: str, name: str) -> str | None:
    values = sbatch_lines(script).get(name)
    return values[-1] if values else None


# --- options -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("30:15", 1815), ("02:00:00", 7200), ("1-0", 86400), ("1-02:30", 95400),
    ("2-00:00:10", 172810), ("UNLIMITED", None), ("infinite", None),
])
def test_parse_slurm_time(text, seconds):
    assert parse_slurm_time(text) == seconds


@pytest.mark.parametrize("kwargs, option", [
    ({"time": "2h"}, "--time"),
    ({"time": "1:2:3:4"}, "--time"),
    ({"mem": "lots"}, "--mem"),
    ({"cpus_per_task": 0}, "--cpus-per-task"),
    ({"max_parallel": 0}, "--max-parallel"),
    ({"partition": "cpu queue"}, "--partition"),
    ({"account": "a;rm -rf"}, "--account"),
    ({"extra_sbatch": ("--array=0-3",)}, "--sbatch-extra"),
    ({"extra_sbatch": ("--output=/tmp/x",)}, "--sbatch-extra"),
    ({"extra_sbatch": ("not an option",)}, "--sbatch-extra"),
    ({"extra_sbatch": ("=5",)}, "--sbatch-extra"),
    ({"extra_sbatch": ("array=0-3",)}, "--sbatch-extra"),
    ({"extra_sbatch": ("--comment=$(id)",)}, "--sbatch-extra"),
    ({"time": "10", "signal_seconds": 600}, "--signal-seconds"),
    ({"signal_seconds": 0}, "--signal-seconds"),
])
def test_bad_options_name_the_option(kwargs, option):
    with pytest.raises(ConfigError) as e:
        SlurmOptions(**kwargs)
    assert option in str(e.value)


def test_extra_lines_are_normalised():
    o = SlurmOptions(extra_sbatch=("#SBATCH --exclusive", "  --gres=gpu:1 ", "nice=5", "#SBATCH --mail-type END",
                                   "-w node7"))
    assert o.extra_sbatch == ("--exclusive", "--gres=gpu:1", "--nice=5", "--mail-type=END", "-w node7")
    assert extra_as_parameters(o.extra_sbatch[:4]) == {"exclusive": True, "gres": "gpu:1", "nice": "5",
                                                       "mail-type": "END"}


def test_bad_option_on_the_command_line_exits_2_naming_it(tmp_path, sample_tokenizer):
    (tmp_path / "a.txt").write_text("hello world\n")
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "--dry-run", "-i", tmp_path / "a.txt", "-o", tmp_path / "o",
                   "-t", sample_tokenizer, "--mem", "16 G", check=2)
    assert "--mem" in proc.stderr and "16 G" in proc.stderr


# --- the submission plan --------------------------------------------------------------------------------

@settings(max_examples=examples(300), deadline=None)
@given(ids=st.sets(st.integers(0, 5000), max_size=300), max_size=st.integers(1, 1200),
       throttle=st.none() | st.integers(1, 50), indexing=st.sampled_from(["offset", "position"]),
       finalize=st.booleans(), finalized=st.booleans())
def test_submission_plan_properties(ids, max_size, throttle, indexing, finalize, finalized):
    plan = SubmissionPlan.build(sorted(ids, reverse=True), max_array_size=max_size, throttle=throttle,
                                indexing=indexing, finalize=finalize, finalized=finalized)
    ran = [t for a in plan.arrays for t in a.task_ids]
    assert sorted(ran) == sorted(ids) and len(ran) == len(set(ran))        # every id in exactly one array
    for k, a in enumerate(plan.arrays):
        assert a.number == k and a.task_ids and len(a.task_ids) == len(a.indices) <= max_size
        assert all(0 <= i < max_size for i in a.indices)                     # Slurm accepts every index
        assert list(a.task_ids) == sorted(a.task_ids) and list(a.indices) == sorted(a.indices)
        if indexing == "offset":                                             # index i runs task offset + i
            assert a.offset == a.task_ids[0] and a.indices[0] == 0
            assert all(t == a.offset + i for t, i in zip(a.task_ids, a.indices))
        else:                                                                # map_array numbers its arguments
            assert a.offset is None and a.indices == tuple(range(len(a.task_ids)))
        # one throttle for the whole submission: several throttled arrays run one after the other
        assert a.after == (k - 1 if throttle and len(plan.arrays) > 1 and k > 0 else None)
    assert all(a.task_ids[-1] < b.task_ids[0] for a, b in zip(plan.arrays, plan.arrays[1:]))
    assert plan.finalize == (finalize and (bool(ids) or not finalized))
    job_ids = [f"J{k}" for k in range(len(plan.arrays))]
    if plan.finalize:                                                        # finalize waits for every array
        assert plan.finalize_after == tuple(range(len(plan.arrays)))
        dep = plan.finalize_dependency(job_ids)
        assert (dep is None) == (not plan.arrays)
        assert dep is None or dep.split(":") == ["afterok", *job_ids]
    else:
        assert plan.finalize_after == ()
    assert plan.throttle_mode == ("none" if not throttle else "chained" if len(plan.arrays) > 1 else "single-array")


@given(n=st.integers(1, 5000), max_size=st.integers(1, 1200), indexing=st.sampled_from(["offset", "position"]))
def test_contiguous_ids_need_ceil_n_over_max_arrays_either_way(n, max_size, indexing):
    assert len(plan_arrays(range(n), max_size, indexing)) == -(-n // max_size)
    assert [a.task_ids for a in plan_arrays(range(n), max_size, "offset")] == \
           [a.task_ids for a in plan_arrays(range(n), max_size, "position")]


def test_resume_ids_use_array_syntax():
    (chunk,) = plan_arrays([3, 7, 8, 9], 1001)
    assert chunk.offset == 3 and chunk.array_spec() == "0,4-6"
    (chunk,) = plan_arrays([0, 3, 7, 8, 9], 1001)
    assert chunk.array_spec(2) == "0,3,7-9%2"
    # a sparse resume set far beyond MaxArraySize still fits: offsets keep every index small
    chunks = plan_arrays([5, 2500, 2501], 1001)
    assert [(c.offset, c.array_spec()) for c in chunks] == [(5, "0"), (2500, "0-1")]
    (chunk,) = plan_arrays([5, 2500, 2501], 1001, "position")     # submitit: one call of three
    assert chunk.indices == (0, 1, 2) and chunk.task_ids == (5, 2500, 2501)


# --- rendering -----------------------------------------------------------------------------------------

def test_rendered_script_carries_the_options_and_no_foreign_environment(tmp_path):
    opts = SlurmOptions(partition="cpu", account="proj1", qos="normal", time="02:00:00", mem="16G",
                        cpus_per_task=8, constraint="skylake|icelake", max_parallel=64,
                        extra_sbatch=("--exclusive", "#SBATCH --comment=shardprep"), signal_seconds=300)
    environ = {"PATH": "/opt/py/bin:/usr/bin", "PYTHONPATH": "/src", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
               "HF_TOKEN": "hf_abc", "RAYON_NUM_THREADS": "4", "HOME": "/home/u"}
    (array,) = plan_arrays(range(10, 20), 1001)
    text = render_tokenize(opts, tmp_path, array, environ=environ)
    assert SBATCH_MARKER not in text
    assert effective(text, "--array") == "0-9%64"
    assert effective(text, "--output") == f"{tmp_path}/logs/%A_%a.out"
    for name, value in [("--partition", "cpu"), ("--account", "proj1"), ("--qos", "normal"),
                        ("--time", "02:00:00"), ("--mem", "16G"), ("--cpus-per-task", "8"),
                        ("--constraint", "skylake|icelake"), ("--signal", "B:USR1@300"),
                        ("--export", "NONE"), ("--comment", "shardprep")]:
        assert effective(text, name) == value, name
    assert "--exclusive" in sbatch_lines(text) and "--requeue" in sbatch_lines(text)
    assert "export SHARDPREP_TASK_OFFSET=10" in text and f"export SHARDPREP_OUTPUT={tmp_path}" in text
    assert "export PYTHONPATH=/src" in text and "export RAYON_NUM_THREADS=4" in text
    assert "s3cr3t" not in text and "hf_abc" not in text and "/home/u" not in text
    # every #SBATCH line precedes the first command, or sbatch would ignore it
    first_command = next(i for i, line in enumerate(text.splitlines()) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(text.splitlines()) if line.startswith("#SBATCH")) < first_command
    script = tmp_path / "t.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_repo_slurm_scripts_are_the_packaged_templates():
    for name in TEMPLATES:
        link = REPO / "slurm" / f"{name}.sbatch"
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.read_text() == template_text(name)
        assert subprocess.run(["bash", "-n", str(link)]).returncode == 0


def test_max_array_size_splits_and_chains_the_throttle(tmp_path):
    """10 tasks, MaxArraySize 4, throttle 2: three arrays, each %2, each after the previous (afterany),
    so at most 2 tasks run at a time overall; one finalize afterok on all three."""
    ex = SlurmExecutor(SlurmOptions(max_parallel=2))
    plan = ex.plan(tmp_path, list(range(10)), 4)
    jobs = ex.render(tmp_path, plan, 1)
    arrays = [j for j in jobs if j.kind == "tokenize"]
    assert [effective(j.text, "--array") for j in arrays] == ["0-3%2", "0-3%2", "0-1%2"]
    assert [j.array.offset for j in arrays] == [0, 4, 8]
    assert [j.array.after for j in arrays] == [None, 0, 1] and jobs[-1].kind == "finalize"
    text = "\n".join(ex._dry_run_text(tmp_path, plan))
    assert "--dependency=afterany:<job id of array 0>" in text
    assert "--dependency=afterany:<job id of array 1>" in text
    assert ("--dependency=afterok:<job id of array 0>:<job id of array 1>:<job id of array 2> "
            "--kill-on-invalid-dep=yes") in text
    # without a throttle nothing is chained: the arrays may run side by side
    free = SlurmExecutor(SlurmOptions()).plan(tmp_path, list(range(10)), 4)
    assert [a.after for a in free.arrays] == [None, None, None]


# The dry-run output (scripts, sbatch command lines, submitit calls) of these submissions, as rendered by
# the executors before they shared the SubmissionPlan (tests/fixtures/slurm_golden/, with the interpreter
# replaced by @PYTHON@).  The same plan must render byte-identical scripts.  If a template or the rendering
# changes on purpose, regenerate them: SHARDPREP_REGEN_GOLDEN=1 pytest tests/test_slurm_render.py -k golden
_RICH = dict(partition="cpu", account="proj1", qos="normal", time="02:00:00", mem="16G", cpus_per_task=8,
             constraint="skylake|icelake", extra_sbatch=("--exclusive", "#SBATCH --comment=shardprep"),
             signal_seconds=300, job_name="tok")
GOLDEN_CASES = {
    "chained": (list(range(10)), 4, SlurmOptions(max_parallel=2, **_RICH), True),
    "split-free": (list(range(10)), 4, SlurmOptions(), True),
    "sparse-resume": ([3, 1500, 1502], 1001, SlurmOptions(max_parallel=5, time="30"), True),
    "single": ([0, 1, 2], 1001, SlurmOptions(), True),
    "single-throttled": ([0, 2, 5, 6, 7], 1001, SlurmOptions(max_parallel=3, **_RICH), True),
    "no-finalize": (list(range(5)), 2, SlurmOptions(max_parallel=1), False),
    "finalize-only": ([], 1001, SlurmOptions(partition="p"), True),
}


@pytest.mark.parametrize("executor", [SlurmExecutor, SubmititExecutor], ids=lambda c: c.name)
@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_dry_run_output_is_byte_identical_to_the_golden_files(case, executor, monkeypatch):
    ids, max_size, options, finalize = GOLDEN_CASES[case]
    for name in PASSED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(slurm_cmd, "max_array_size", lambda: (max_size, "golden"))
    output = Path("/nonexistent/shardprep-golden/out")
    report = executor(options, finalize=finalize).launch(output, ids, dry_run=True)
    text = "\n".join(report.scripts).replace(sys.executable, "@PYTHON@")
    golden = GOLDEN / f"{executor.name}-{case}.txt"
    if os.environ.get("SHARDPREP_REGEN_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_dry_run_prints_scripts_matching_the_options_and_submits_nothing(tmp_path, sample_tokenizer):
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(3):
        (inp / f"{i}.txt").write_text(f"document {i}\nanother line {i}\n")
    out = tmp_path / "out"
    proc = run_cli("submit", "--one-file-per-task", "--executor", "slurm", "--dry-run", "-i", inp, "-o", out, "-t", sample_tokenizer,
                   "--partition", "debug", "--time", "00:20:00", "--mem", "2G", "--cpus-per-task", "3",
                   "--max-parallel", "2", "--signal-seconds", "90", "--sbatch-extra", "nice=10",
                   env={"SHARDPREP_TEST_SECRET": "do-not-copy"})
    scripts = [s for s in re.split(r"^# ---- ", proc.stdout, flags=re.M)[1:]]
    assert len(scripts) == 2 and scripts[0].startswith("tokenize (tasks 0-2): sbatch --parsable ")
    tok, fin = scripts
    assert effective(tok, "--array") == "0-2%2"
    assert (effective(tok, "--partition"), effective(tok, "--time"), effective(tok, "--mem"),
            effective(tok, "--cpus-per-task"), effective(tok, "--signal"), effective(tok, "--nice")) == \
           ("debug", "00:20:00", "2G", "3", "B:USR1@90", "10")
    assert effective(tok, "--output") == f"{out.resolve()}/logs/%A_%a.out"
    assert fin.startswith("finalize: sbatch --parsable --dependency=afterok:<job id of array 0> "
                          "--kill-on-invalid-dep=yes")
    assert effective(fin, "--partition") == "debug" and effective(fin, "--cpus-per-task") == "1"
    assert "do-not-copy" not in proc.stdout
    assert not (out / "slurm").exists() and not (out / "logs").exists()   # nothing submitted or written


def test_submitit_dry_run_reports_chunks(tmp_path):
    ex = SubmititExecutor(SlurmOptions(max_parallel=3, time="1:00:00"))
    params = ex.parameters(tmp_path)
    assert params["timeout_min"] == 60 and params["slurm_signal_delay_s"] == 120
    assert params["slurm_additional_parameters"]["export"] == "NONE"


# --- status parsing ------------------------------------------------------------------------------------

def test_exit_status_comes_from_the_last_attempt_in_an_appended_log(tmp_path):
    log = tmp_path / "12_3.out"
    log.write_text("shardprep: task 3 = array element 12_3, attempt 1, on n1\n"
                   "shardprep-task-exit: task=3 status=75\n")
    assert read_task_log(log).status == 75
    with open(log, "a") as f:
        f.write("shardprep: task 3 = array element 12_3, attempt 2, on n1\n")
    assert read_task_log(log).status is None          # second attempt still running / killed
    with open(log, "a") as f:
        f.write("shardprep-task-exit: task=3 status=3\n")
    assert read_task_log(log).status == 3
    assert read_task_log(tmp_path / "absent.out").status is None


def test_latest_attempt_maps_indices_to_tasks():
    subs = [
        Submission(seq=1, arrays=(ArrayRecord("10", "0-3", "0-3", "logs/{job}_{index}.out"),
                                  ArrayRecord("11", "0-1", "4-5", "logs/{job}_{index}.out"))),
        Submission(seq=2, arrays=(ArrayRecord("20", "0,2", "3,5", "logs/{job}_{index}.out"),)),
    ]
    att = latest_attempts(subs)
    assert (att[4].job_id, att[4].index, att[4].log) == ("11", 0, "logs/11_0.out")
    assert (att[5].job_id, att[5].index, att[5].seq) == ("20", 2, 2)
    assert (att[3].job_id, att[3].index) == ("20", 0)
    assert att[0].log == "logs/10_0.out"


# --- the batch script's signal handling, run by bash with a stand-in task --------------------------------

FAKE_TASK = r'''
import signal, sys, time
from pathlib import Path
def stop(signum, frame):
    print("fake task: stopping at a safe point", flush=True)
    sys.exit(75)
signal.signal(signal.SIGUSR1, stop)
Path(sys.argv[1]).write_text("ready")
time.sleep(30)
sys.exit(0)
'''


def _script_with_stand_in(tmp_path: Path, task: int, bindir: Path, fake_python: Path) -> Path:
    """The rendered tokenize script for ``task``, with ``fake_python`` in place of the interpreter."""
    fake_python.chmod(0o755)
    (array,) = plan_arrays([task], 1001)
    text = render_tokenize(SlurmOptions(), tmp_path, array, environ={"PATH": f"{bindir}:/usr/bin:/bin"})
    script = tmp_path / "t.sbatch"
    interpreter = f"export SHARDPREP_PYTHON={sys.executable}"
    script.write_text(text.replace(interpreter, f"export SHARDPREP_PYTHON={fake_python}"))
    return script


def test_batch_script_forwards_usr1_and_requeues_on_exit_75(tmp_path):
    """The tokenize script run by bash: USR1 to the script reaches the task, exit 75 -> scontrol requeue."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ready = tmp_path / "ready"
    (tmp_path / "task.py").write_text(FAKE_TASK)
    fake_python = bindir / "fakepy"                     # stands in for `python -m shardprep run-task ...`
    fake_python.write_text(f"#!/bin/bash\nexec {sys.executable} {tmp_path / 'task.py'} {ready}\n")
    scontrol = bindir / "scontrol"                      # records the requeue instead of talking to Slurm
    scontrol.write_text(f"#!/bin/bash\necho \"$@\" > {tmp_path / 'scontrol.args'}\n")
    scontrol.chmod(0o755)
    script = _script_with_stand_in(tmp_path, 7, bindir, fake_python)
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "55"}
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "stand-in task did not start"
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 75, out
    assert "USR1 received" in out and "fake task: stopping at a safe point" in out
    assert "shardprep-task-exit: task=7 status=75" in out
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "55_0"]


def test_batch_script_passes_on_a_failure_without_requeue(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake_python = bindir / "fakepy"
    fake_python.write_text("#!/bin/bash\necho 'error: bad input /data/x.txt line 3' >&2\nexit 3\n")
    script = _script_with_stand_in(tmp_path, 2, bindir, fake_python)
    proc = subprocess.run(["bash", str(script)], env={"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "9"},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert "shardprep-task-exit: task=2 status=3" in proc.stdout and "requeue" not in proc.stdout
    log = tmp_path / "9_0.out"
    log.write_text(proc.stdout + proc.stderr)
    assert read_task_log(log).status == 3


def test_status_without_slurm_answers_reads_failures_from_the_logs(tmp_path, sample_tokenizer):
    """Slurm forgot the jobs (or there is no Slurm): status still tells done, failed (with the log tail)
    and missing tasks from sidecars, jobs.json and the logs."""
    out = planned_with_slurm_record(tmp_path, sample_tokenizer, SlurmOptions().to_dict(), "987654321", finalize={
        "job_id": "987654322", "dependency": "afterok:987654321", "log": "logs/finalize-987654322.out"})
    run_cli("run-task", out, "--task-id", "0")
    (out / "logs" / "987654321_1.out").write_text(
        "shardprep: task 1 = array element 987654321_1, attempt 1, on n1 at 2026-01-01T00:00:00\n"
        "shardprep run-task: error: /data/1.txt:7: invalid utf8 (--strict)\n"
        "shardprep-task-exit: task=1 status=3\n")
    proc = run_cli("status", out, check=5, env={"PATH": os.path.dirname(sys.executable)})  # no Slurm tools
    assert "failed:        1  [1]" in proc.stdout and "missing:       1  [2]" in proc.stdout
    assert "task 1 failed (exit 3; element 987654321_1, log logs/987654321_1.out)" in proc.stdout
    assert "| shardprep run-task: error: /data/1.txt:7: invalid utf8 (--strict)" in proc.stdout
    assert "finalize job 987654322: did not run" in proc.stdout
    assert "from sidecars, logs" in proc.stdout


def test_resume_keeps_recorded_options_unless_given_again():
    import argparse

    from shardprep.cli._slurm import add_slurm_arguments, slurm_options_from_args

    p = argparse.ArgumentParser()
    add_slurm_arguments(p)
    recorded = SlurmOptions(partition="cpu", time="02:00:00", cpus_per_task=8, max_parallel=64).to_dict()
    opts = slurm_options_from_args(p.parse_args(["--partition", "long"]), SlurmOptions.from_dict(recorded))
    assert (opts.partition, opts.time, opts.cpus_per_task, opts.max_parallel) == ("long", "02:00:00", 8, 64)
    fresh = slurm_options_from_args(p.parse_args([]))
    assert (fresh.cpus_per_task, fresh.signal_seconds, fresh.max_parallel) == (1, 120, None)


# --- OUTPUT/slurm/jobs.json: typed records ------------------------------------------------------------------

def _jobs_file(out: Path, submissions: list[dict]) -> None:
    (out / "slurm").mkdir(parents=True, exist_ok=True)
    (out / "slurm" / "jobs.json").write_bytes(orjson.dumps({"submissions": submissions}))


def test_jobs_json_records_round_trip(tmp_path):
    from shardprep.executor.slurm.jobs import FinalizeRecord, read_submissions, write_submissions

    subs = [
        Submission(seq=1, submitted_at="2026-01-01T00:00:00+00:00", executor="slurm", tasks="0-5", max_array_size=4,
                   max_array_size_source="scontrol", throttle="chained", options=SlurmOptions(max_parallel=2).to_dict(),
                   arrays=(ArrayRecord("10", "0-3", "0-3", "logs/{job}_{index}.out", offset=0, array="0-3%2",
                                       script="slurm/001-tokenize-0.sbatch"),
                           ArrayRecord("11", "0-1", "4-5", "logs/{job}_{index}.out", offset=4, array="0-1%2",
                                       dependency="afterany:10")),
                   finalize=FinalizeRecord("12", "logs/finalize-12.out", "slurm/001-finalize.sbatch", "afterok:10:11")),
        Submission(seq=2, executor="submitit", tasks="3", options={},
                   arrays=(ArrayRecord("20", "0", "3", "slurm/submitit/{job}_0_log.out", plain=True),)),
        Submission(seq=3, executor="slurm-stage", job_id="30", script="/d/.shardprep-stage/slurm/003-stage.sbatch",
                   log="/d/.shardprep-stage/slurm/stage-30.out", then_submit=("--input", "/d"), options={}),
    ]
    write_submissions(tmp_path, subs)
    assert read_submissions(tmp_path) == subs
    write_submissions(tmp_path, read_submissions(tmp_path))
    assert read_submissions(tmp_path) == subs


def test_jobs_json_written_before_the_records_were_typed_still_reads(tmp_path):
    """Files as sbatch.py, submitit.py and stage_job.py wrote them as dicts: missing keys take defaults, a
    submission from before --max-requeues keeps an unlimited cap, and what status (the attempts) and --resume
    (the options) take from them is the same; a wrong type names the file and the field."""
    from shardprep.executor.slurm.jobs import read_submissions

    old_sbatch = {"seq": 1, "submitted_at": "2026-01-01T00:00:00+00:00", "executor": "slurm", "tasks": "0-2",
                  "max_array_size": 1001, "max_array_size_source": "scontrol", "throttle": "none",
                  "options": {"partition": "cpu", "cpus_per_task": 2},
                  "arrays": [{"job_id": "10", "script": "slurm/001-tokenize-0.sbatch", "dependency": None, "offset": 0,
                              "array": "0-2", "indices": "0-2", "tasks": "0-2", "log": "logs/{job}_{index}.out"}],
                  "finalize": {"job_id": "11", "script": "slurm/001-finalize.sbatch", "dependency": "afterok:10",
                               "log": "logs/finalize-11.out"}}
    old_submitit = {"seq": 2, "executor": "submitit", "tasks": "1", "options": {"max_requeues": 2},
                    "arrays": [{"job_id": "20", "offset": None, "indices": "0", "tasks": "1", "dependency": None,
                                "plain": True, "log": "slurm/submitit/{job}_0_log.out"}], "finalize": None}
    _jobs_file(tmp_path, [old_sbatch, old_submitit])
    first, second = read_submissions(tmp_path)
    assert first.arrays[0].array == "0-2" and not first.arrays[0].plain and first.finalize.job_id == "11"
    assert first.max_attempts is None and second.max_attempts == 3
    assert first.slurm_options() == SlurmOptions(partition="cpu", cpus_per_task=2)
    assert latest_attempts([first, second])[1].element == "20"
    _jobs_file(tmp_path, [{"seq": 1, "executor": "slurm", "arrays": [{"job_id": 7, "indices": "0", "tasks": "0",
                                                                         "log": "x"}]}])
    with pytest.raises(RecordError, match=r"jobs.json: field 'submissions\[0\].arrays\[0\].job_id': expected a string"):
        read_submissions(tmp_path)
