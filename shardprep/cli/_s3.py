"""The S3 connection options, one set for every command that reaches S3: ``stage`` and ``upload``, the
commands that take an output's URL (``verify``, ``inspect``, ``report``, ``status``), and those that take
input URLs (``plan``, ``submit``, ``doctor``; the plan records them for its tasks).

Credentials are never among them (boto3's standard chain only).  Unset, each falls back to the
environment (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``AWS_REGION``) as boto3 does.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from shardprep.cli.args import add_field, from_fields
from shardprep.errors import ConfigError
from shardprep.storage.s3.client import ClientOptions

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.storage.locations import StorageOptions


def add_s3_arguments(p: argparse.ArgumentParser) -> None:
    """``--endpoint-url``, ``--profile``, ``--region``, ``--max-attempts`` and the timeouts as their own help group."""
    g = p.add_argument_group("S3 connection (credentials come from the standard AWS chain only)")
    add_field(g, "--endpoint-url", owner=ClientOptions,
              help="S3-compatible endpoint, e.g. http://127.0.0.1:9000; unset means AWS")
    add_field(g, "--profile", owner=ClientOptions, help="named profile from ~/.aws/config")
    add_field(g, "--region", owner=ClientOptions, help="AWS region; unset means the profile's or AWS_REGION")
    add_field(g, "--max-attempts", owner=ClientOptions, type=int,
              help="attempts per request, retries with backoff in botocore's standard mode")
    add_field(g, "--connect-timeout", owner=ClientOptions, type=float, metavar="SECONDS",
              help="give up connecting to the endpoint after this long, per attempt")
    add_field(g, "--read-timeout", owner=ClientOptions, type=float, metavar="SECONDS",
              help="give up waiting for the endpoint's answer after this long, per attempt (a request fails "
                   "after --max-attempts such waits; a listing says which endpoint it waits for after 5 s)")


def client_options_from_args(args: argparse.Namespace, **overrides: Any) -> ClientOptions:
    return from_fields(ClientOptions, args, **overrides)


def storage_from_args(args: argparse.Namespace) -> StorageOptions:
    """How the read commands reach an ``s3://`` output (other URLs take their options from the environment)."""
    from shardprep.storage.locations import StorageOptions  # not for stage and upload, which use the client

    return StorageOptions(s3=client_options_from_args(args))


def refuse_other_storage(args: argparse.Namespace, planned: StorageOptions | None) -> None:
    """``submit --resume``: S3 options typed that differ from the plan's are refused, not dropped (the tasks
    reach their inputs as the plan's ``storage`` record says).  A plan of files reaches no store: nothing to
    refuse."""
    if planned is None:
        return
    given = client_options_from_args(args)
    default, frozen = ClientOptions(), planned.s3

    def typed(options: ClientOptions, name: str) -> str:
        return f"--{name.replace('_', '-')} {getattr(options, name)}"

    names = [f.name for f in dataclasses.fields(ClientOptions)]     # every option, one added later too
    differ = [typed(given, n) for n in names if getattr(given, n) not in (getattr(default, n), getattr(frozen, n))]
    if differ:
        recorded = ", ".join(typed(frozen, n) for n in names if getattr(frozen, n) != getattr(default, n))
        raise ConfigError(f"{', '.join(differ)}: the frozen plan reaches its inputs as it was planned "
                          f"({recorded or 'with the default S3 options'}; job.json 'storage')",
                          hint="re-plan with the new options (the submit command with --overwrite, or a new --output)")
