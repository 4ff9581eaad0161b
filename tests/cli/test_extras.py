"""The core install is small, and a missing extra is one line naming it.

Each test runs the real CLI (or API) in a subprocess in which the optional packages are made
unimportable: a ``sitecustomize`` module on PYTHONPATH sets ``sys.modules[name] = None`` at start-up, so
the block also holds in the local executor's spawned task processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli as _run_cli

from shardprep._extras import EXTRA_OF

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    """The CLI in a process of its own: what it may import is decided at its start-up (``without``)."""
    return _run_cli(*args, process=True, **kwargs)


@pytest.fixture
def without(tmp_path):
    """``without(*names)`` -> the environment of a process in which ``names`` cannot be imported."""

    def env(*names: str) -> dict[str, str]:
        site = tmp_path / ("site-" + "-".join(names))
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(
            "import sys\n" + "".join(f"sys.modules[{n!r}] = None\n" for n in names))
        return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    return env


def _one_line_naming(proc: subprocess.CompletedProcess, package: str, extra: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 8, proc.stderr                    # EnvironmentProblem: a missing tool
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert package in lines[0] and f"pip install 'shardprep[{extra}]'" in lines[0], lines[0]


@pytest.fixture
def text_input(tmp_path) -> Path:
    f = tmp_path / "in" / "a.txt"
    f.parent.mkdir()
    f.write_text("hello world\nsecond document\n")
    return f


def test_stage_and_upload_without_boto3_name_the_s3_extra(tmp_path, without):
    env = without("boto3", "botocore")
    _one_line_naming(run_cli("stage", "s3://bkt/raw/", tmp_path / "d", check=False, env=env), "boto3", "s3")
    _one_line_naming(run_cli("upload", tmp_path, "s3://bkt/out/", check=False, env=env), "boto3", "s3")


def test_submitit_executor_without_submitit_names_the_slurm_extra_before_planning(tmp_path, without,
                                                                                   text_input, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("submit", "--executor", "submitit", "--dry-run", "-i", text_input, "-o", out,
                   "-t", sample_tokenizer, check=False, env=without("submitit"))
    _one_line_naming(proc, "submitit", "slurm")
    assert not out.exists()                                      # failed before anything was written


def test_export_hf_without_datasets_names_the_hf_extra(tmp_path, without, text_input):
    proc = run_cli("export-hf", "text", "--data-files", text_input, "-n", "1", "-o", tmp_path / "out",
                   check=False, env=without("datasets"))
    _one_line_naming(proc, "datasets", "hf")


def test_hub_tokenizer_without_transformers_names_the_hf_extra(tmp_path, without, text_input):
    proc = run_cli("plan", "-i", text_input, "-o", tmp_path / "out", "-t", "gpt2", check=False,
                   env={**without("transformers"), "HF_HUB_OFFLINE": "1"})
    _one_line_naming(proc, "transformers", "hf")


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_loader_without_torch_names_the_loader_extra(without):
    code = ("import shardprep.loader.order, shardprep.loader.distribute\n"   # the pure parts need no torch
            "from shardprep._extras import MissingExtra\n"
            "try:\n    from shardprep.loader import ShardDataset\n"
            "except MissingExtra as e:\n    print(e.exit_code, e)\n")
    proc = _python(code, without("torch"))
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"8 shardprep\.loader\.ShardDataset needs the optional package torch, which is not "
                        r"installed \(hint: pip install 'shardprep\[loader\]'\)\n", proc.stdout), proc.stdout


def test_legacy_brace_patterns_without_braceexpand_name_the_loader_extra(without):
    code = ("from shardprep.loader.legacy import expand_legacy\n"
            "from shardprep._extras import MissingExtra\n"
            "try:\n    expand_legacy('/data/shard-{0..3}.tar')\n"
            "except MissingExtra as e:\n    print(e)\n")
    proc = _python(code, without("braceexpand"))
    assert "braceexpand" in proc.stdout and "shardprep[loader]" in proc.stdout, proc.stdout + proc.stderr


def test_gigatoken_missing_fails_an_explicit_request_and_auto_falls_back(without, sample_tokenizer):
    code = (f"from pathlib import Path\n"
            f"from shardprep.errors import TokenizerError\n"
            f"from shardprep.tokenizer.backend import select_backend\n"
            f"tok = Path({str(sample_tokenizer)!r}).read_text()\n"
            f"backend, record = select_backend('auto', tok, allow_special_tokens=False)\n"
            f"print(record.name, '|', record.fallback_reason)\n"
            f"try:\n    select_backend('gigatoken', tok, allow_special_tokens=False)\n"
            f"except TokenizerError as e:\n    print(e.exit_code, e)\n")
    proc = _python(code, without("gigatoken"))
    assert proc.returncode == 0, proc.stderr
    auto, explicit = proc.stdout.strip().splitlines()
    assert auto.startswith("hf |") and "shardprep[fast]" in auto
    assert explicit.startswith("6 --backend=gigatoken: ") and "shardprep[fast]" in explicit


@pytest.mark.slow
def test_the_core_install_tokenizes_without_any_extra(tmp_path, without, text_input, sample_tokenizer):
    """submit (local) -> finalize -> verify with every optional package blocked, in the task processes too."""
    env = without(*EXTRA_OF)
    out = tmp_path / "out"
    run_cli("submit", "-i", text_input, "-o", out, "-t", sample_tokenizer, "--no-progress", env=env)
    run_cli("verify", out, env=env)
    sidecar = (out / "shard-00000.json").read_text()
    assert '"fallback_reason"' in sidecar and "shardprep[fast]" in sidecar   # auto ran without gigatoken


def test_every_optional_package_is_in_its_extra_and_out_of_the_core():
    tomllib = pytest.importorskip("tomllib")                     # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}

    distribution = {"yaml": "pyyaml"}                            # import name -> name on PyPI, where they differ
    for package, extra in EXTRA_OF.items():
        package = distribution.get(package, package)
        if package != "botocore":                                # comes with boto3
            assert package in names(extras[extra]), (package, extra)
        assert package not in names(project["dependencies"]), package
    (everything,) = extras["all"]                               # [all] is every feature extra, by name
    assert set(everything.removeprefix("shardprep[").removesuffix("]").split(",")) == set(EXTRA_OF.values())
    assert "webdataset" in names(extras["test"]) and "webdataset" not in names(project["dependencies"])
