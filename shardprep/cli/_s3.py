"""The S3 connection options, one set for every command that reaches S3: ``stage`` and ``upload``, and the
commands that take an output's URL (``verify``, ``inspect``, ``report``, ``status``).

Credentials are never among them (boto3's standard chain only).  Unset, each falls back to the
environment (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``AWS_REGION``) as boto3 does.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from shardprep.cli.args import add_field, from_fields
from shardprep.storage.s3 import ClientOptions

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.storage.locations import StorageOptions


def add_s3_arguments(p: argparse.ArgumentParser) -> None:
    """``--endpoint-url``, ``--profile``, ``--region`` and ``--max-attempts`` as their own help group."""
    g = p.add_argument_group("S3 connection (credentials come from the standard AWS chain only)")
    add_field(g, "--endpoint-url", owner=ClientOptions,
              help="S3-compatible endpoint, e.g. http://127.0.0.1:9000; unset means AWS")
    add_field(g, "--profile", owner=ClientOptions, help="named profile from ~/.aws/config")
    add_field(g, "--region", owner=ClientOptions, help="AWS region; unset means the profile's or AWS_REGION")
    add_field(g, "--max-attempts", owner=ClientOptions, type=int,
              help="attempts per request, retries with backoff in botocore's standard mode")


def client_options_from_args(args: argparse.Namespace, **overrides: Any) -> ClientOptions:
    return from_fields(ClientOptions, args, **overrides)


def storage_from_args(args: argparse.Namespace) -> StorageOptions:
    """How the read commands reach an ``s3://`` output (other URLs take their options from the environment)."""
    from shardprep.storage.locations import StorageOptions    # not for stage and upload, which use the client

    return StorageOptions(s3=client_options_from_args(args))
