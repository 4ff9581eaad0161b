"""``shardprep upload SRC_DIR s3://bucket/prefix/``: publish finished shards to S3, index last."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardprep.cli._transfer import add_transfer_arguments, finish, print_dry_run, transfer_options_from_args
from shardprep.cli.args import add_field

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.staging.upload import UploadOptions

NAME = "upload"
HELP = "upload an output directory (shards, sidecars, index.json last) to an S3 prefix"
DESCRIPTION = """\
Upload every non-hidden file under SRC_DIR to the S3 prefix, keeping relative paths.

Each upload carries an integrity checksum that S3 verifies (per part for multipart uploads).  Objects
already present with provably identical bytes (same size and ETag/checksum) are skipped.  index.json is
uploaded last and only when everything else succeeded, so readers never see an index pointing at missing
shards.  Credentials come from the standard AWS chain, never the command line.

A prefix that already holds another dataset (its index.json lists another plan or other shards, or it
holds shard files that are not this upload's) is refused; --replace replaces it: its index.json is
deleted before anything is uploaded, its leftover files (shardprep's names the filters select) after the
new index.json is up, so readers never see an index.json naming another dataset's shards.

A shardprep dataset (SRC_DIR's index.json, when it is uploaded) goes up only when it verifies, checked first
as `shardprep verify` checks it: index.json against itself and job.json, every shard re-hashed and read
against index.json and its sidecar.  One that does not is refused before anything is sent.

Exit codes: 0 all uploaded; 2 bad option; 3 SRC_DIR missing or empty; 4 the prefix holds another dataset
(no --replace); 5 the dataset does not verify (nothing uploaded: `shardprep repair SRC_DIR` first); 7 some
uploads failed, a shard outside a dataset differs from its sidecar's sha256, or a file changed after it was
verified or while it was uploaded (that object is deleted again).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardprep.staging.upload import CHECKSUM_ALGORITHMS, UploadOptions

    p.add_argument("source", metavar="SRC_DIR", help="directory to upload (e.g. a finished shardprep output)")
    p.add_argument("dest", metavar="s3://BUCKET/PREFIX/", help="destination prefix (treated as a directory)")
    add_transfer_arguments(p, UploadOptions, what="files (relative paths, e.g. 'logs/*')",
                           part_help="files at least this big go up as multipart uploads with parts of this size")
    add_field(p, "--checksum-algorithm", owner=UploadOptions, choices=CHECKSUM_ALGORITHMS,
              help="integrity checksum S3 verifies on every request and part")
    add_field(p, "--replace", owner=UploadOptions, action="store_true",
              help="if the prefix holds another dataset, replace it: delete its index.json first and its leftover "
                   "files last (default: refuse)")


def options_from_args(args: argparse.Namespace) -> UploadOptions:
    from shardprep.staging.upload import UploadOptions

    return transfer_options_from_args(UploadOptions, args, checksum_algorithm=args.checksum_algorithm,
                                      replace=args.replace)


def run(args: argparse.Namespace) -> int:
    from shardprep._extras import require
    from shardprep.staging.upload import plan_upload, run_upload
    from shardprep.storage.s3.client import make_client

    options = options_from_args(args)
    require("boto3", feature="uploading to S3")
    client = make_client(options.client)
    plan = plan_upload(options, client)
    if args.dry_run:
        moves = [(i.size, str(i.path), f"s3://{plan.bucket}/{i.key}") for i in plan.todo]
        deletes = [f"s3://{plan.bucket}/{key}" for key in plan.published.deletions]
        return print_dry_run(moves, verb="upload", noun="files", skipped=len(plan.skipped),
                             skipped_as="already identical", as_json=args.json, deletes=deletes)
    return finish(run_upload(options, client, plan), as_json=args.json)
