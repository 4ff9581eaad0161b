"""Issue 31, item 5: no shell through options.

``--sbatch-extra`` with a newline wrote a bare shell line into the batch script, and the array job ran it.
Every value that reaches a rendered script is now either refused (an ``#SBATCH`` line is one line: a
newline, NUL or other control character in any Slurm option is one error line naming the option, exit 2,
before anything is planned or written) or shell-quoted (the export block: paths, environment values, the
stage job's arguments), and a script that carries hostile but legal values runs them as data: bash is
run on the rendered scripts and nothing but the stand-in interpreter is executed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli

from shardprep.errors import EXIT_USAGE, ConfigError
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.render import render, render_tokenize, template_text
from shardprep.executor.slurm.stage_job import render_stage
from shardprep.executor.slurm.submission import SubmissionPlan
from shardprep.executor.slurm.submitit import SubmititExecutor

HOSTILE = "a b $(touch {canary}) `touch {canary}` ; touch {canary} '\"\\ \n touch {canary}"



@pytest.fixture
def text_input(tmp_path: Path) -> Path:
    path = tmp_path / "a.txt"
    path.write_text("hello world\nanother document\n")
    return path


@pytest.mark.parametrize("flag, value", [
    ("--sbatch-extra", "--exclusive\necho>{canary}"),      # the reported one: a bare shell line
    ("--sbatch-extra", "comment=x\ntouch {canary}"),
    ("--sbatch-extra", "#SBATCH --exclusive\n#SBATCH --nice=5"),
    ("--sbatch-extra", "--exclusive\r"),
    ("--job-name", "tok\ntouch {canary}"),
    ("--job-name", "tok\n"),                               # re's $ matched before a final newline
    ("--partition", "cpu\n"),
    ("--account", "proj\ntouch"),
    ("--qos", "normal\t"),
    ("--constraint", "skylake\n"),
    ("--time", "\n30"),
    ("--mem", "16G\n"),
])
@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_a_control_character_in_a_slurm_option_is_one_error_line(capsys, tmp_path, text_input, sample_tokenizer,
                                                                  flag, value, executor):
    canary = tmp_path / "canary"
    out = tmp_path / "out"
    code, stdout, err = cli("submit", "--executor", executor, "--dry-run", "-i", text_input, "-o", out,
                             "-t", sample_tokenizer, f"{flag}={value.format(canary=canary)}")
    assert code == EXIT_USAGE, (code, stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardprep submit: error: ") and flag in lines[0], err
    assert "#SBATCH" not in stdout and not canary.exists() and not out.exists()


@pytest.mark.requires("s3")
def test_the_stage_job_refuses_them_too(capsys, tmp_path):
    code, stdout, err = cli("stage", "s3://bucket/raw/", tmp_path / "dest", "--submit", "--dry-run",
                             "--sbatch-extra=--exclusive\ntouch /tmp/x")
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1 and "--sbatch-extra" in err, err


def test_nul_and_other_control_characters_are_refused_by_the_options():
    for kwargs in ({"extra_sbatch": ("--exclusive\x00",)}, {"job_name": "a\x00b"}, {"partition": "p\x1b"},
                   {"extra_sbatch": ("--comment=a\x85b",)}):
        with pytest.raises(ConfigError) as e:
            SlurmOptions(**kwargs)
        assert "\n" not in str(e.value) and "--" in str(e.value)


def test_the_renderer_refuses_a_multi_line_directive_whoever_built_it():
    with pytest.raises(ConfigError, match="#SBATCH --output"):
        render(template_text("finalize"), ["--output=/x\ntouch /tmp/y"], {})
    with pytest.raises(ConfigError, match="name"):
        render(template_text("finalize"), [], {"A\nB": "x"})


def test_ordinary_sbatch_extra_still_renders(capsys, tmp_path, text_input, sample_tokenizer):
    code, stdout, err = cli("submit", "--executor", "slurm", "--dry-run", "-i", text_input, "-o",
                             tmp_path / "out", "-t", sample_tokenizer, "--sbatch-extra", "gres=gpu:1",
                             "--sbatch-extra=#SBATCH --mail-type END", "--job-name", "tok-1")
    assert code == 0, err
    assert "#SBATCH --gres=gpu:1\n" in stdout and "#SBATCH --mail-type=END\n" in stdout
    assert "#SBATCH --job-name=tok-1-tokenize\n" in stdout


def _exports(script: str) -> str:
    """The rendered export block of ``script``: everything before the template's code, with the comments
    and ``#SBATCH`` lines (a value spanning lines is inside quotes, so no line of it starts with ``#``)."""
    return script.split("\nset -", 1)[0]


def test_hostile_environment_values_are_exported_as_data(tmp_path):
    """PATH-like values and object-store settings copied into the script: bash reads them back exactly,
    and nothing in them runs (the whole script also parses: ``bash -n``)."""
    canary = tmp_path / "canary"
    hostile = HOSTILE.format(canary=canary)
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": hostile, "LD_LIBRARY_PATH": "/opt/lib dir/$HOME"}
    (array,) = SubmissionPlan.build([0], max_array_size=1001, indexing="offset").arrays
    script = render_tokenize(SlurmOptions(), tmp_path / "out", array, environ=environ)
    script_path = tmp_path / "t.sbatch"
    script_path.write_text(script)
    assert subprocess.run(["bash", "-n", str(script_path)], capture_output=True).returncode == 0
    probe = _exports(script) + '\nprintf "%s\\0" "$PYTHONPATH" "$LD_LIBRARY_PATH" "$SHARDPREP_OUTPUT"\n'
    proc = subprocess.run(["bash", "-c", probe], capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(b"\0")[:3] == [os.fsencode(v) for v in (hostile, environ["LD_LIBRARY_PATH"],
                                                                       str(tmp_path / "out"))]
    assert not canary.exists()


def test_submitit_setup_lines_are_the_same_quoted_exports(tmp_path, monkeypatch):
    hostile = HOSTILE.format(canary=tmp_path / "canary")
    monkeypatch.setenv("PYTHONPATH", hostile)
    ex = SubmititExecutor.__new__(SubmititExecutor)       # no submitit needed to build its parameters
    ex.options, ex.finalize = SlurmOptions(), True
    assert f"export PYTHONPATH={shlex.quote(hostile)}" in ex.parameters(tmp_path / "out")["slurm_setup"]


def test_the_stage_job_runs_hostile_arguments_as_arguments(tmp_path):
    """The stage job's arguments (a key with spaces, ``$(...)``, backticks, quotes and a newline; a
    ``--then-tokenize`` list) reach ``shardprep stage`` / ``submit`` exactly, through the script's ``eval``;
    the script is run by bash with a stand-in interpreter that records its argv."""
    canary = tmp_path / "canary"
    hostile = HOSTILE.format(canary=canary)
    stage_argv = [f"s3://bucket/raw {hostile}/", str(tmp_path / "dest"), "--include", hostile]
    submit_argv = ["--output", str(tmp_path / "dest" / "out"), "--tokenizer", hostile]
    script = render_stage(stage_argv, submit_argv, SlurmOptions(), tmp_path / "logs",
                          environ={"PATH": "/usr/bin:/bin"})
    record = tmp_path / "argv"
    stub = tmp_path / "python-stub"
    stub.write_text(f"#!{sys.executable}\nimport sys\nopen({str(record)!r}, 'ab').write("
                    "b'\\x01'.join(a.encode() for a in sys.argv[1:]) + b'\\x02')\n")
    stub.chmod(0o755)
    lines = [f"export SHARDPREP_PYTHON={stub}" if line.startswith("export SHARDPREP_PYTHON=") else line
             for line in script.splitlines()]
    script_path = tmp_path / "stage.sbatch"
    script_path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["bash", str(script_path)], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [c.split(b"\x01") for c in record.read_bytes().split(b"\x02")[:-1]]
    assert calls == [[b"-m", b"shardprep", b"stage", *(a.encode() for a in stage_argv)],
                     [b"-m", b"shardprep", b"submit", *(a.encode() for a in submit_argv)]]
    assert not canary.exists()
