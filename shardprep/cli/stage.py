"""``shardprep stage s3://bucket/prefix/ DEST``: copy raw data from S3 to a (Lustre) directory."""

from __future__ import annotations

import argparse

from shardprep.cli._transfer import add_transfer_arguments, finish, print_dry_run
from shardprep.errors import ConfigError
from shardprep.storage.lustre import STAGED_INPUT_LAYOUT, add_stripe_arguments, stripe_layout_from_args
from shardprep.storage.s3 import client_options_from_args, make_client

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
    p.add_argument("source", metavar="s3://BUCKET/PREFIX/", help="S3 prefix to copy (treated as a directory)")
    p.add_argument("dest", metavar="DEST", help="destination directory (created if missing)")
    add_transfer_arguments(p, what="keys (below the prefix)", concurrency=32,
                           part_help="objects at least this big are fetched as concurrent ranged parts of this size")
    add_stripe_arguments(p, default_help="a single stripe per file (-c 1 -S 1M)")
    from shardprep.executor.slurm.stage_job import add_stage_submit_arguments  # the Slurm helper's options

    add_stage_submit_arguments(p)


def options_from_args(args: argparse.Namespace):
    from shardprep.staging.stage import StageOptions

    return StageOptions(
        source=args.source, dest=args.dest, include=tuple(args.include), exclude=tuple(args.exclude),
        concurrency=args.concurrency, multipart_threshold=args.part_size, multipart_chunksize=args.part_size,
        layout=stripe_layout_from_args(args, default=STAGED_INPUT_LAYOUT), progress=args.progress,
        client=client_options_from_args(args, concurrency=args.concurrency),
    )


def run(args: argparse.Namespace) -> int:
    from shardprep.staging.stage import plan_stage, stage_prefix

    options = options_from_args(args)
    if args.then_tokenize is not None and not args.submit:
        raise ConfigError("--then-tokenize needs --submit (it runs inside the Slurm stage job)")
    if args.submit:
        from shardprep.executor.slurm.stage_job import submit_stage

        record = submit_stage(options, args, dry_run=args.dry_run)
        print(record["script"] if args.dry_run else record["job_id"])
        return 0
    if args.dry_run:
        plan = plan_stage(options, make_client(options.client))
        moves = [(i.obj.size, plan.source + i.relative, str(options.dest / i.relative)) for i in plan.todo]
        return print_dry_run(moves, verb="copy", noun="objects", skipped=len(plan.skipped),
                             skipped_as="already verified", as_json=args.json)
    return finish(stage_prefix(options), as_json=args.json)
