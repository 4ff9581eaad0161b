"""``shardprep doctor``: check this machine, the tokenizer and the data before submitting a job."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from shardprep.cli._s3 import add_s3_arguments, storage_from_args
from shardprep.cli.args import add_field
from shardprep.executor import EXECUTORS
from shardprep.job.options import TXT_MODES, TokenizeOptions

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.doctor.checks import Report

NAME = "doctor"
HELP = "check tokenizer, CPUs, memory, output file system, free space, Slurm and environment before a job"
DESCRIPTION = """Run every check and print a verdict (ok / warn / fail) with the fix for each.

fail: the job would fail (exit status: 6 tokenizer, 3 input, 8 environment: the first failing check wins).
warn: the job would run, but slower or less conveniently than it could (exit 0).
The tokenizer speed is measured on one core, on the first documents of --input (or generated text).
--json prints the report as one JSON object (schema: docs/doctor.md)."""

_MARK = {"ok": " ok ", "warn": "WARN", "fail": "FAIL"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", "-t", required=True, metavar="SPEC",
                   help="tokenizer.json file, directory with tokenizer files, or hub id (as for submit)")
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="where the shards will go (need not exist)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="PATH",
                   help="the job's inputs (as for submit; repeatable): checked, sampled for speed, and used to "
                        "estimate the output size")
    add_field(p, "--text-field", owner=TokenizeOptions, help="jsonl key / parquet or arrow column holding the text")
    add_field(p, "--txt-mode", owner=TokenizeOptions, choices=TXT_MODES,
              help="txt inputs: one document per line, or blank-line separated paragraphs (as for submit; "
                   "txt inputs that look like paragraphs under line are a warning)")
    p.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="the executor you will use; with slurm or submitit a missing or unreachable Slurm is a "
                        "failure, otherwise a warning")
    p.add_argument("--json", action="store_true", help="print the report as JSON (schema in docs/doctor.md)")
    add_s3_arguments(p)


def _print_text(report: Report) -> None:
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        print(f"[{_MARK[c.verdict]}] {c.name:<{width}}  {c.message}")
        if c.fix:
            print(f"       {'':<{width}}  fix: {c.fix}")
    s = report.to_dict()["summary"]
    print(f"\n{s['ok']} ok, {s['warn']} warning(s), {s['fail']} failure(s)"
          + ("" if not s["fail"] else f"; exit status {report.exit_code}"))


def run(args: argparse.Namespace) -> int:
    import orjson

    from shardprep.doctor.checks import run_doctor
    from shardprep.job.resources import set_tokenizer_threads

    environ = dict(os.environ)     # what the user has set, before the speed test pins one thread
    set_tokenizer_threads(1)
    report = run_doctor(args.tokenizer, args.output, args.input, text_field=args.text_field,
                        executor=args.executor, environ=environ, storage=storage_from_args(args),
                        txt_mode=args.txt_mode, task_slots=_task_slots(args))
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_text(report)
    return report.exit_code


def _task_slots(args: argparse.Namespace) -> tuple[int, str] | None:
    """The task slots ``submit --executor NAME`` sizes its tasks by (that executor with its default options:
    the Slurm partition's CPUs over the default --cpus-per-task); None without --executor or when it cannot
    be built here (a missing extra is the slurm check's to report)."""
    if args.executor is None:
        return None
    from shardprep.cli.submit import executor_for
    from shardprep.errors import ShardprepError

    try:
        return executor_for(args).task_slots()
    except ShardprepError:
        return None
