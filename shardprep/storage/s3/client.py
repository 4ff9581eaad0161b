"""The one S3 layer: URLs, client options and clients, error mapping, and the object reads and listings that
staging, the loader and the S3 store (``store.py``, ``inputs.py``: they build on this module, never the
reverse) need.

Staging (``stage``/``upload``) and the loader both come here.  There is deliberately no way to pass
access keys: they come from boto3's standard chain (environment, ``~/.aws`` files, SSO, instance or task
role), so they never appear on a command line, in ``ps`` output or in a generated Slurm script.

Retries are botocore's *standard* mode only (exponential backoff with full jitter, retrying throttling,
5xx and connection errors, never 4xx) with a configurable attempt count: nothing here loops around a
botocore call.  The one exception is a body that breaks while it streams (botocore has already returned
the response, so its retries cannot help): the reads below repeat such a request once, after a jittered
pause, and never for an HTTP error.

Clients are cached per process id and options (:func:`shared_client`): DataLoader workers fork, and a
boto3 client (its connection pool) must not cross a fork.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from shardprep.errors import ConfigError, TransferError
from shardprep.storage.objects import ObjectChanged
from shardprep.storage.store import exact

log = logging.getLogger(__name__)

# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (the parts that matter here)
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
T = TypeVar("T")


def is_s3_url(location: object) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix/``; ``prefix`` is empty or ends with ``/`` (directory semantics)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class S3Object:
    """``s3://bucket/key``: one object."""

    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def split_url(url: str, what: str) -> tuple[str, str]:
    """``(bucket, rest)`` of an ``s3://`` URL; ``what`` names the argument in the error."""
    if not is_s3_url(url):
        raise ConfigError(f"{what} must start with s3:// (got {url!r})")
    bucket, _, rest = url[len("s3://"):].partition("/")
    if not _BUCKET_RE.match(bucket):
        raise ConfigError(f"{what}: {bucket!r} is not a valid S3 bucket name (in {url!r})")
    return bucket, rest


def parse_s3_url(url: str, *, what: str = "S3 URL") -> S3Location:
    """Parse ``s3://bucket/prefix``; a prefix always means a "directory", so ``raw`` becomes ``raw/``.

    ``what`` names the argument in the error (e.g. ``"SOURCE"``), so the user knows which one is wrong.
    """
    bucket, prefix = split_url(url, what)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Location(bucket, prefix)


def parse_s3_object(url: str, *, what: str = "S3 object URL") -> S3Object:
    """Parse ``s3://bucket/key`` (a key is required and taken verbatim)."""
    bucket, key = split_url(url, what)
    if not key or key.endswith("/"):
        raise ConfigError(f"{what}: {url!r} names no object (s3://bucket/key expected)")
    return S3Object(bucket, key)


@dataclass(frozen=True)
class ClientOptions:
    """Everything that shapes the client; credentials are intentionally absent (standard chain only)."""

    endpoint_url: str | None = None
    profile: str | None = None
    region: str | None = None
    max_attempts: int = 5
    max_pool_connections: int = 64
    # seconds per attempt: botocore's 60 s made an endpoint that never answers cost a plan 10 min (issue 31)
    connect_timeout: float = 10.0
    read_timeout: float = 20.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"--max-attempts must be at least 1 (got {self.max_attempts})")
        for flag, seconds in (("--connect-timeout", self.connect_timeout), ("--read-timeout", self.read_timeout)):
            if not seconds > 0:
                raise ConfigError(f"{flag} must be more than 0 seconds (got {seconds})")
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
    return _client_from(_session(options), options)


def _session(options: ClientOptions) -> Any:
    from shardprep._extras import require

    boto3 = require("boto3", feature="S3 access (stage, upload, s3:// shards)")
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.session.Session(profile_name=options.profile, region_name=options.region)
    except ProfileNotFound as e:
        raise ConfigError(f"--profile {options.profile!r}: {e}") from e


def _client_from(session: Any, options: ClientOptions) -> Any:
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "total_max_attempts": options.max_attempts},  # first try included
        max_pool_connections=options.max_pool_connections,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
    )
    return session.client("s3", endpoint_url=options.endpoint_url, config=config)


_CLIENTS: dict[tuple[int, ClientOptions], tuple[Any, Any]] = {}    # (pid, options) -> (session, client)
_CLIENTS_LOCK = threading.Lock()


def shared_client(options: ClientOptions) -> Any:
    """This process's client for ``options`` (created once; clients are thread-safe, not fork-safe).

    Keyed by process id, so a forked DataLoader worker or encode worker builds its own instead of using the
    parent's connection pool; it builds it from the parent's boto3 session (its loaded service model and
    credentials: ~10 ms instead of ~0.2 s for a new session).  The lock is there because creating boto3
    sessions and clients is not thread-safe.
    """
    pid = os.getpid()
    with _CLIENTS_LOCK:
        entry = _CLIENTS.get((pid, options))
        if entry is None:
            inherited = next((session for (p, o), (session, _) in _CLIENTS.items() if o == options), None)
            session = inherited if inherited is not None else _session(options)
            entry = _CLIENTS[pid, options] = (session, _client_from(session, options))
    return entry[1]


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
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, ReadTimeoutError

    hint = None
    if isinstance(exc, NoCredentialsError):
        hint = "configure credentials via AWS_PROFILE/--profile, environment variables or an instance role"
    elif isinstance(exc, (EndpointConnectionError, ReadTimeoutError)):
        hint = "check --endpoint-url (or AWS_ENDPOINT_URL) and the network; a slow endpoint: raise --read-timeout"
    return TransferError(describe_client_error(exc, what=what), hint=hint)


def error_code(exc: BaseException) -> str:
    """S3's error code of a ``ClientError`` (``NoSuchKey``, ``AccessDenied``, ``404`` for a HEAD), else ''."""
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


_MISSING = ("NoSuchKey", "NoSuchBucket", "404", "NotFound")
BODY_RETRY_MAX_DELAY = 1.0     # seconds; the one repeat of a request whose body broke waits rand() * this
SLOW_ANSWER_S = 5.0            # a listing with no answer for this long says which endpoint it waits for


# -- reads (the loader: index.json, sidecars, ranged shard reads, listings, sha256) -------------------------

@contextlib.contextmanager
def s3_errors(what: str) -> Iterator[None]:
    """botocore's exceptions made ours, naming ``what``.

    A missing object or bucket is ``FileNotFoundError``, a range past the end (HTTP 416) ``EOFError`` and
    a failed ``If-Match`` ``ObjectChanged`` (the caller knows what they mean for its file); any other failure, after botocore's retries, is a
    :class:`TransferError`.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as e:
        if error_code(e) in _MISSING:
            raise FileNotFoundError(f"{what}: no such object ({error_code(e)})") from None
        if error_code(e) == "InvalidRange":
            raise EOFError(f"{what}: truncated: the range starts past the end of the object") from None
        if error_code(e) == "PreconditionFailed":    # an If-Match on the planned ETag (S3Version)
            raise ObjectChanged(what, "its ETag is no longer the planned one (HTTP 412)") from None
        raise transfer_error(e, what=what) from None
    except BotoCoreError as e:
        raise transfer_error(e, what=what) from None


def get_body(client: Any, obj: S3Object, consume: Callable[[Any], T], *, what: str,
         answered: Callable[[dict], None] | None = None, **params: Any) -> T:
    """One ``GetObject`` whose body ``consume`` reads; a body that breaks mid-stream is requested once more.

    botocore's retries end when the response headers arrive, so a connection that breaks while the body
    streams is retried here, once, after a jittered pause; HTTP errors are never retried here.
    ``answered`` sees each response (its headers and metadata) before the body is read.
    """
    from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

    for attempt in (1, 2):
        with s3_errors(what):
            response = client.get_object(Bucket=obj.bucket, Key=obj.key, **params)
        body = response["Body"]
        try:
            if answered is not None:
                answered(response)
            return consume(body)
        except S3_RETRYABLE_DOWNLOAD_ERRORS as e:
            if attempt == 2:
                raise transfer_error(e, what=what) from None
            delay = random.uniform(0, BODY_RETRY_MAX_DELAY)
            log.warning("%s: the response body broke (%s); requesting it once more in %.2f s",
                        what, type(e).__name__, delay)
            time.sleep(delay)
        finally:
            body.close()
    raise AssertionError("unreachable")


def read_range(client: Any, obj: S3Object, offset: int, size: int, *,
               answered: Callable[[dict], None] | None = None, **params: Any) -> bytes:
    """Exactly ``size`` bytes at ``offset`` with one ranged GET; ``EOFError`` when the object is shorter.
    ``answered`` and ``params`` (``IfMatch``...) as :func:`get_body` takes them."""
    if size <= 0:
        return b""
    byte_range = f"bytes={offset}-{offset + size - 1}"
    data = get_body(client, obj, lambda body: body.read(), what=f"{obj.url}: GET {byte_range}", answered=answered,
                    Range=byte_range, **params)
    return exact(data, obj.url, offset, size)


def read_object(client: Any, obj: S3Object) -> bytes:
    """A whole small object (index.json, a sidecar); ``FileNotFoundError`` when it does not exist."""
    return get_body(client, obj, lambda body: body.read(), what=f"{obj.url}: GET")


def sha256_object(client: Any, obj: S3Object, *, block: int = 8 << 20) -> str:
    """sha256 of a whole object, streamed in ``block``-byte reads (never held in memory whole)."""
    from shardprep.storage.atomic import sha256_reader

    return get_body(client, obj, lambda body: sha256_reader(body, block=block), what=f"{obj.url}: GET")


class AnswerWatch:
    """Says once, while a listing waits more than ``after`` seconds for an answer, which endpoint it waits for.

    Why (issue 31): an endpoint that accepts connections and never answers kept ``plan`` silent until the
    last attempt timed out.  ``answered()`` after each page restarts the wait: a long listing that is
    answering is not slow.  A daemon thread per listing (never per read)."""

    def __init__(self, client: Any, what: str, after: float = SLOW_ANSWER_S):
        self.client, self.what, self.config = client, what, client.meta.config
        self.after = min(after, self.config.read_timeout / 2)
        self._last, self._done = time.monotonic(), threading.Event()

    def __enter__(self) -> "AnswerWatch":
        threading.Thread(target=self._watch, name="shardprep-s3-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def answered(self) -> None:  # a page came: the next one has its own ``after`` seconds
        self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(max(0.0, self._last + self.after - time.monotonic())):
            if time.monotonic() - self._last >= self.after:
                attempts = (self.config.retries or {}).get("total_max_attempts", "?")
                log.warning("waiting for S3 endpoint %s (%s): no answer yet after %g s; each of %s attempt(s) "
                            "waits up to %g s (--max-attempts, --read-timeout)", self.client.meta.endpoint_url,
                            self.what, self.after, attempts, self.config.read_timeout)
                return


def list_objects(client: Any, loc: S3Location, *, delimiter: str | None = None) -> Iterator[dict[str, Any]]:
    """The listing entries under ``loc`` (all pages of ListObjectsV2, in key order; :class:`AnswerWatch`).

    With ``delimiter="/"`` only the objects directly under the prefix.  Errors are botocore's (callers
    decide what a failed listing means; wrap in :func:`s3_errors` for the usual mapping).
    """
    kwargs = {"Delimiter": delimiter} if delimiter else {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=loc.prefix, **kwargs)
    with AnswerWatch(client, f"listing {loc.url}") as watch:
        for page in pages:
            watch.answered()
            yield from page.get("Contents", ())


def object_sizes(client: Any, loc: S3Location) -> dict[str, int]:
    """``{name: size}`` of the objects directly under ``loc`` (one LIST per 1,000 objects)."""
    with s3_errors(f"listing {loc.url}"):
        return {e["Key"][len(loc.prefix):]: int(e["Size"]) for e in list_objects(client, loc, delimiter="/")}


class S3Source:
    """One S3 object as a ``ByteSource`` (``S3Store.open``): each read is one ranged GET of exact bytes.

    Holds no connection: the process's shared client is looked up per read, so a source created before a
    DataLoader worker forked is still safe to use in the worker.
    """

    def __init__(self, url: str, options: ClientOptions):
        self.path = url
        self.obj = parse_s3_object(url)
        self.options = options

    def read(self, offset: int, size: int) -> bytes:
        return read_range(shared_client(self.options), self.obj, offset, size)

    def close(self) -> None:  # the client is shared per process; nothing to release
        pass

