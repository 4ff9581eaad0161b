"""Per-task fixed cost (issue 12) without losing safety: the ``auto`` check's hard cases run once at plan
time and a task trusts that record only when its own libraries and tokenizer match it; its own-sample
check always runs; a small task's gigatoken never imports awkward; ``run-task`` imports nothing it does
not use."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import run_cli
from test_backends import _no_regex_bpe

from shardprep.api import plan_job
from shardprep.job.options import TokenizeOptions
from shardprep.job.task import run_task

pytest.importorskip("gigatoken")

DOCS = ["The quick brown fox jumps over the lazy dog.", "Tokenizers split text into ids; shards hold them.",
        "한국어 문장 and emoji 👩‍👩‍👧‍👦 with   spaces", "digits 1234567890 and more text " * 20]


def _inputs(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS * 5))
    return path


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory, gpt2_tokenizer: Path) -> tuple[Path, Any]:
    """One ``auto`` plan of the documents (its hard cases checked once), and its job; tests run copies."""
    root = tmp_path_factory.mktemp("planned")
    _, job = plan_job([_inputs(root)], root / "out", gpt2_tokenizer, TokenizeOptions())
    return root / "out", job


def _copy(planned: tuple[Path, Any], tmp_path: Path, name: str = "out") -> Path:
    """A copy of the planned output (job.json names inputs, never its own directory): a test's own job."""
    return Path(shutil.copytree(planned[0], tmp_path / name, symlinks=True))


def _edit_job(output: Path, **changes: object) -> None:
    """Change job.json's backend_check (informational, not fingerprinted: the plan stays the same plan)."""
    job = json.loads((output / "job.json").read_text())
    job["backend_check"].update(changes)
    (output / "job.json").write_text(json.dumps(job, indent=2))


def _check(output: Path) -> dict:
    return json.loads((output / "shard-00000.json").read_text())["backend"]["check"]


def test_plan_records_the_hard_cases_and_a_matching_task_trusts_them(tmp_path, planned):
    import gigatoken  # noqa: F401
    import tokenizers

    _copy(planned, tmp_path)
    job = planned[1]
    record = job.backend_check
    assert record is not None and record.passed is True and record.load_dependent is False
    assert record.reference == f"hf {tokenizers.__version__}" and record.candidate.startswith("gigatoken ")
    assert record.tokenizer_fingerprint == job.tokenizer.fingerprint and record.hard_cases > 30
    stored = json.loads((tmp_path / "out" / "job.json").read_text())["backend_check"]
    assert stored == record.to_dict()                              # written, and parsed back as written
    result = run_task(tmp_path / "out", 0)
    check = _check(tmp_path / "out")
    assert result.sidecar.backend.name == "gigatoken"
    assert check["hard_cases_checked"] == "plan" and check["hard_cases"] == record.hard_cases
    assert check["passed"] is True and check["sample_documents"] == len(DOCS) * 5   # own sample: every task
    assert "plan_check_ignored" not in check


@pytest.mark.parametrize("field, value", [("candidate", "gigatoken 0.0.1"), ("reference", "hf 0.0.1"),
                                          ("tokenizer_fingerprint", "0" * 64), ("load_dependent", True)])
def test_a_task_that_does_not_match_the_record_runs_the_hard_cases_itself(tmp_path, planned, field, value):
    out = _copy(planned, tmp_path)
    _edit_job(out, **{field: value})
    run_task(out, 0)
    check = _check(out)
    assert check["hard_cases_checked"] == "task" and check["passed"] is True
    assert field in check["plan_check_ignored"] or "per load" in check["plan_check_ignored"]


def test_hf_plans_record_nothing_and_old_plans_check_in_the_task(tmp_path, gpt2_tokenizer, planned):
    _, job = plan_job([_inputs(tmp_path)], tmp_path / "hf", gpt2_tokenizer, TokenizeOptions(backend="hf"))
    assert job.backend_check is None and "backend_check" not in (tmp_path / "hf" / "job.json").read_text()
    out = _copy(planned, tmp_path, "old")
    job_json = json.loads((out / "job.json").read_text())
    del job_json["backend_check"]                                   # as planned before issue 12
    (out / "job.json").write_text(json.dumps(job_json, indent=2))
    run_task(out, 0)
    assert _check(out)["hard_cases_checked"] == "task" and "plan_check_ignored" not in _check(out)


def test_explicit_gigatoken_that_fails_the_check_still_fails(tmp_path):
    """Recorded failure (the plan saw it): the task fails without encoding; forged pass: the task's own
    sample still catches the difference.  Both exit 6 and write no shard."""
    tokenizer = _no_regex_bpe(tmp_path / "noregex.json")
    inputs = _inputs(tmp_path)
    out = tmp_path / "explicit"
    run_cli("plan", "-i", inputs, "-o", out, "-t", tokenizer, "--backend", "gigatoken")
    record = json.loads((out / "job.json").read_text())["backend_check"]
    assert record["passed"] is False and "ids differ" in record["reason"]
    proc = run_cli("run-task", out, "--task-id", "0", check=6)
    assert "hard cases checked at plan time" in proc.stderr
    _edit_job(out, passed=True, reason=None, mismatch=None)
    proc = run_cli("run-task", out, "--task-id", "0", check=6)
    assert "task document" in proc.stderr and not (out / "shard-00000.tar").exists()
    auto = tmp_path / "auto"
    run_cli("plan", "-i", inputs, "-o", auto, "-t", tokenizer)
    run_cli("run-task", auto, "--task-id", "0")
    backend = json.loads((auto / "shard-00000.json").read_text())["backend"]
    assert backend["name"] == "hf" and "hard cases checked at plan time" in backend["fallback_reason"]


def test_flat_result_stand_in_gives_awkwards_ids_for_lists_and_buffers(gpt2_tokenizer):
    """gigatoken's result taken through the awkward stand-in (no awkward import) equals the result built
    by the real awkward, for a list of texts and for a newline-separated buffer of the same texts."""
    import subprocess

    from shardprep.inputs.fastpath import DocBatch
    from shardprep.tokenizer.backend import BACKENDS
    from shardprep.tokenizer.gigatoken_backend import _FlatResult

    tok_json = gpt2_tokenizer.read_text()
    backend = BACKENDS["gigatoken"](tok_json, False)
    texts = DOCS + ["x", " a", "a" * 5000]
    assert _FlatResult.usable(backend.describe()["version"]), "the installed gigatoken is not the tested one"
    flat, lengths = backend.encode_batch(texts)
    buffer = DocBatch(len(texts), buffer="\n".join(texts).encode() + b"\n")
    bflat, blengths = backend.encode(buffer)
    assert flat.dtype == bflat.dtype == np.uint32 and lengths.dtype == blengths.dtype == np.int64
    assert np.array_equal(flat, bflat) and np.array_equal(lengths, blengths)
    assert backend.encode_batch([])[0].size == 0 and not _FlatResult.broken
    code = ("import sys, json, awkward\nimport numpy as np\nfrom shardprep.tokenizer.backend import BACKENDS\n"
            f"b = BACKENDS['gigatoken'](open({str(gpt2_tokenizer)!r}).read(), False)\n"
            f"f, n = b.encode_batch(json.loads({json.dumps(json.dumps(texts))}))\n"
            "print(json.dumps([f.tolist(), n.tolist()]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == [flat.tolist(), lengths.tolist()]      # through the real awkward


# Modules a run-task never uses: importing them costs every array task start-up time (issue 12).
NOT_IMPORTED = ("torch", "boto3", "botocore", "s3transfer", "pyarrow", "fsspec", "awkward", "transformers",
                "datasets", "matplotlib", "pandas", "webdataset", "shardprep.loader", "shardprep.staging",
                "shardprep.report", "shardprep.executor", "shardprep.doctor", "shardprep.hf", "shardprep.cli.plan",
                "shardprep.cli._slurm", "shardprep.cli._transfer")


@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_run_task_imports_only_what_it_uses(tmp_path, gpt2_tokenizer, backend):
    out = tmp_path / "out"
    plan_job([_inputs(tmp_path)], out, gpt2_tokenizer, TokenizeOptions(backend=backend))
    code = ("import sys\nfrom shardprep.cli.main import main\n"
            f"assert main(['run-task', {str(out)!r}, '--task-id', '0']) == 0\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_IMPORTED!r} or m in {NOT_IMPORTED!r} "
            f"or any(m.startswith(p + '.') for p in {NOT_IMPORTED!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert json.loads((out / "shard-00000.json").read_text())["backend"]["requested"] == backend


def test_stage_start_up_does_not_import_numpy():
    """`stage` runs on login nodes and in short jobs: its start-up stays without numpy (issue 6), which
    the plan records reach through ``job.schema`` (the sizing record must not pull numpy in)."""
    code = ("import sys\nfrom shardprep.cli.main import build_parser\nbuild_parser('stage')\n"
            "import shardprep.cli.stage, shardprep.job.schema\nprint('numpy' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
