"""The command line's defaults are the option dataclasses' defaults (one place), and the library takes
option objects, not parsed command lines."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from shardprep.cli._slurm import executor_from_args, slurm_options_from_args
from shardprep.cli._transfer import transfer_options_from_args
from shardprep.cli.args import field_default, from_fields, size_text
from shardprep.cli.main import build_parser
from shardprep.errors import ConfigError
from shardprep.executor import make_executor
from shardprep.executor.local import LocalExecutor, LocalOptions
from shardprep.executor.slurm.jobs import Submission, write_submissions
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.stage_job import STAGE_JOB_OPTIONS
from shardprep.hf.export import ExportRequest
from shardprep.job.options import PlanOptions, TokenizeOptions, parse_size
from shardprep.staging.stage import StageOptions
from shardprep.staging.upload import UploadOptions
from shardprep.storage.s3 import ClientOptions


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _bound_actions() -> list[tuple[str, argparse.Action]]:
    return [(name, action) for name, parser in _commands().items() for action in parser._actions
            if hasattr(action, "bound_field")]


def _as_field_value(action: argparse.Action):
    """What argparse hands the program when the option is not given (string defaults go through type)."""
    value = action.default
    if isinstance(value, str) and action.type is not None:
        value = action.type(value)
    return tuple(value) if isinstance(value, list) else value


def test_every_cli_default_is_the_dataclass_default():
    checked = set()
    for command, action in _bound_actions():
        owner, name = action.bound_field
        checked.add((owner, name))
        if action.default is argparse.SUPPRESS:    # merged later (Slurm): checked below through the builder
            continue
        assert _as_field_value(action) == field_default(owner, name), (command, action.option_strings)
    # every field a user can set on the command line is bound, so none can grow a second default
    must = {(TokenizeOptions, f.name) for f in dataclasses.fields(TokenizeOptions)}
    must |= {(c, f.name) for c in (PlanOptions, SlurmOptions, LocalOptions) for f in dataclasses.fields(c)}
    must |= {(ClientOptions, n) for n in ("endpoint_url", "profile", "region", "max_attempts")}
    must |= {(c, n) for c in (StageOptions, UploadOptions)
             for n in ("include", "exclude", "concurrency", "multipart_chunksize", "progress")}
    must |= {(UploadOptions, "checksum_algorithm")} | {(ExportRequest, n) for n in ("format", "text_field")}
    assert must <= checked, must - checked


def test_options_built_from_a_bare_command_line_equal_the_dataclass_defaults(tmp_path):
    parse = build_parser().parse_args
    args = parse(["submit"])
    assert from_fields(TokenizeOptions, args) == TokenizeOptions()
    assert from_fields(PlanOptions, args) == PlanOptions()
    assert executor_from_args(args) == ("local", LocalOptions())
    assert slurm_options_from_args(args) == SlurmOptions()
    stage = transfer_options_from_args(StageOptions, parse(["stage", "s3://bkt/raw/", str(tmp_path)]))
    pool = stage.client.max_pool_connections           # sized for the concurrency, not a default
    assert stage == StageOptions("s3://bkt/raw/", tmp_path, client=ClientOptions(max_pool_connections=pool))
    upload = transfer_options_from_args(UploadOptions, parse(["upload", str(tmp_path), "s3://bkt/out/"]))
    pool = upload.client.max_pool_connections
    assert upload == UploadOptions(tmp_path, "s3://bkt/out/", client=ClientOptions(max_pool_connections=pool))
    stage_job = slurm_options_from_args(parse(["stage", "s3://bkt/raw/", str(tmp_path)]), STAGE_JOB_OPTIONS)
    assert stage_job == STAGE_JOB_OPTIONS and stage_job.cpus_per_task != SlurmOptions().cpus_per_task


def test_help_names_the_dataclass_defaults():
    submit = " ".join(_commands()["submit"].format_help().split())
    assert f"CPUs per task (default {SlurmOptions().cpus_per_task})" in submit
    assert f"(default {SlurmOptions().signal_seconds})" in submit
    assert f"(default: {size_text(TokenizeOptions().max_doc_bytes)})" in submit
    assert f"(default: {TokenizeOptions().chunk_tokens})" in submit
    stage = " ".join(_commands()["stage"].format_help().split())
    assert f"CPUs of the stage job (default {STAGE_JOB_OPTIONS.cpus_per_task})" in stage
    assert f"(default: {StageOptions.__dataclass_fields__['concurrency'].default})" in stage
    upload = " ".join(_commands()["upload"].format_help().split())
    assert f"(default: {UploadOptions.__dataclass_fields__['concurrency'].default})" in upload


@pytest.mark.parametrize("n", [1, 1000, 1 << 10, 16 << 20, 3 << 30, (5 << 40) + 1])
def test_size_text_reads_back(n):
    assert parse_size(size_text(n)) == n


def test_resume_takes_the_recorded_executor_and_options(tmp_path):
    recorded = SlurmOptions(partition="cpu", max_parallel=4)
    write_submissions(tmp_path, [Submission(seq=1, executor="submitit", options=recorded.to_dict())])
    args = build_parser().parse_args(["submit", "--resume", str(tmp_path), "--time", "10"])
    name, options = executor_from_args(args, resume=tmp_path)
    assert name == "submitit" and options == dataclasses.replace(recorded, time="10")


def test_make_executor_takes_option_objects():
    ex = make_executor("local", LocalOptions(workers=2, show_progress=False), finalize=False)
    assert isinstance(ex, LocalExecutor) and ex.options.workers == 2 and not ex.finalize
    assert make_executor("slurm", SlurmOptions()).options == SlurmOptions()
    with pytest.raises(TypeError, match="SlurmOptions"):
        make_executor("submitit", LocalOptions())
    with pytest.raises(ConfigError, match="--executor='pbs'"):
        make_executor("pbs", LocalOptions())
    with pytest.raises(ConfigError, match="--workers"):
        LocalOptions(workers=0)


def test_every_registered_executor_answers_its_own_task_slots(monkeypatch):
    """The registry is the only place that knows executors by name: each class builds its options, and each
    executor says how many tasks it runs at once (the default sizing divides by that)."""
    from shardprep.executor import EXECUTORS, executor_class
    from shardprep.executor.slurm import commands as slurm_cmd

    monkeypatch.setattr(slurm_cmd, "partition_cpus", lambda partition: (64, partition or "dev"))
    assert LocalExecutor(LocalOptions(workers=3)).task_slots() == (3, "--workers")
    for name in EXECUTORS:
        if name == "submitit":
            pytest.importorskip("submitit")
        args = build_parser("submit").parse_args(["submit", "--executor", name, "--cpus-per-task", "4"])
        expected = LocalOptions() if name == "local" else SlurmOptions(cpus_per_task=4)
        assert executor_from_args(args) == (name, expected)
        assert type(make_executor(name, expected)) is executor_class(name)
    slurm = make_executor("slurm", SlurmOptions(partition="cpu", cpus_per_task=4))
    assert slurm.task_slots() == (16, "partition cpu: 64 CPUs / --cpus-per-task 4")
    assert make_executor("slurm", SlurmOptions(max_parallel=5)).task_slots() == (5, "--max-parallel")


def test_resume_keeps_recorded_slurm_options_only_for_slurm_executors(tmp_path):
    recorded = SlurmOptions(partition="cpu", time="1:00:00")
    write_submissions(tmp_path, [Submission(seq=1, executor="slurm", options=recorded.to_dict())])
    local = build_parser().parse_args(["submit", "--resume", str(tmp_path), "--executor", "local", "--workers", "2"])
    assert executor_from_args(local, resume=tmp_path) == ("local", LocalOptions(workers=2))
    again = build_parser().parse_args(["submit", "--resume", str(tmp_path), "--sbatch-extra", "exclusive"])
    assert executor_from_args(again, resume=tmp_path) == ("slurm", dataclasses.replace(recorded,
                                                                                        extra_sbatch=("exclusive",)))


def test_the_generic_argument_module_imports_no_executor_or_storage_code():
    """cli/args.py holds only the binders every command shares (each command's own arguments live with it), so
    importing it costs a command nothing it does not use: run-task, once per array task, included."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import shardprep.cli.args"],
                          capture_output=True, text=True, check=True, timeout=120)
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "shardprep.cli.args" in imported
    assert [m for m in imported if m.startswith(("shardprep.executor", "shardprep.storage"))] == []
    source = Path(__file__).resolve().parents[2] / "shardprep" / "cli" / "args.py"
    assert len(source.read_text(encoding="utf-8").splitlines()) < 150
