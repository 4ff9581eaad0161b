"""Creating the S3 client: endpoint, profile, region, retries; credentials only from the standard chain.

There is deliberately no way to pass access keys here: they come from boto3's standard chain
(environment, ``~/.aws`` files, SSO, instance or task role), so they never appear on a command line, in
``ps`` output or in a generated Slurm script.  Retries use botocore's *standard* mode (exponential backoff
with jitter, retrying throttling, 5xx and connection errors) with a configurable attempt count.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from shardprep.errors import ConfigError, TransferError

log = logging.getLogger(__name__)

# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (the parts that matter here)
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix/``; ``prefix`` is empty or ends with ``/`` (directory semantics)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_url(url: str, *, what: str = "S3 URL") -> S3Location:
    """Parse ``s3://bucket/prefix``; a prefix always means a "directory", so ``raw`` becomes ``raw/``.

    ``what`` names the argument in the error (e.g. ``"SOURCE"``), so the user knows which one is wrong.
    """
    if not url.startswith("s3://"):
        raise ConfigError(f"{what} must start with s3:// (got {url!r})")
    rest = url[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET_RE.match(bucket):
        raise ConfigError(f"{what}: {bucket!r} is not a valid S3 bucket name (in {url!r})")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Location(bucket, prefix)


@dataclass(frozen=True)
class ClientOptions:
    """Everything that shapes the client; credentials are intentionally absent (standard chain only)."""

    endpoint_url: str | None = None
    profile: str | None = None
    region: str | None = None
    max_attempts: int = 5
    max_pool_connections: int = 64
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"--max-attempts must be at least 1 (got {self.max_attempts})")
        if self.endpoint_url is not None and not re.match(r"^https?://", self.endpoint_url):
            raise ConfigError(f"--endpoint-url must start with http:// or https:// (got {self.endpoint_url!r})")


MIB = 1 << 20
MIN_PART_SIZE = 5 * MIB          # S3's minimum for every part but the last
DEFAULT_PART_SIZE = 16 * MIB


def check_transfer_settings(concurrency: int, part_size: int) -> None:
    """Shared validation for stage and upload options (the messages name the CLI option)."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
    if part_size < MIN_PART_SIZE:
        raise ConfigError(f"--part-size must be at least 5M, the S3 minimum (got {part_size} bytes)")


def make_client(options: ClientOptions) -> Any:
    """A botocore S3 client configured from ``options`` (thread-safe; share one per process)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ProfileNotFound

    try:
        session = boto3.session.Session(profile_name=options.profile, region_name=options.region)
    except ProfileNotFound as e:
        raise ConfigError(f"--profile {options.profile!r}: {e}") from e
    config = Config(
        retries={"mode": "standard", "total_max_attempts": options.max_attempts},  # first try included
        max_pool_connections=options.max_pool_connections,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
    )
    return session.client("s3", endpoint_url=options.endpoint_url, config=config)


def describe_client_error(exc: BaseException, *, what: str) -> str:
    """A one-line description of a botocore failure, naming what was being done."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{what}: {err.get('Code', 'error')} (HTTP {status}): {err.get('Message', '')}".rstrip(": ")
    return f"{what}: {type(exc).__name__}: {exc}"


def transfer_error(exc: BaseException, *, what: str) -> TransferError:
    """Turn a botocore exception into a :class:`TransferError` with a useful hint."""
    from botocore.exceptions import NoCredentialsError, EndpointConnectionError

    hint = None
    if isinstance(exc, NoCredentialsError):
        hint = "configure credentials via AWS_PROFILE/--profile, environment variables or an instance role"
    elif isinstance(exc, EndpointConnectionError):
        hint = "check --endpoint-url and the network"
    return TransferError(describe_client_error(exc, what=what), hint=hint)
