"""A lean GET for small objects: botocore's signer, transport and retry rules without its per-call machinery.

Why: staging many small objects is bound by the client's CPU per request, and ``client.get_object`` spends
about 2 ms of CPU per call (parameter validation, endpoint ruleset evaluation, a dozen event emissions,
response parsing) of which only the signing and the HTTP exchange are needed for a plain GET.  This module
learns what does not change between the objects of a bucket from one real ``get_object`` (the endpoint URL
and addressing style, the signing region and name) and then, per object, signs one request with botocore's
``S3SigV4Auth`` and sends it on the client's own HTTP session: about 0.8 ms of CPU instead of 2.2 ms (see
docs/staging.md, "Speed").

Nothing botocore decides is re-implemented here:

* the URL and signing scope are those of the client's own first ``GetObject`` (:class:`SigningCapture`), so
  custom endpoints, path or virtual-hosted style and regions are whatever the client itself uses; keys
  are quoted as botocore quotes them (``quote(key, safe="/~")``);
* credentials are the client's (refreshable ones are refreshed per request by ``get_frozen_credentials``),
  and they only go into the request's ``Authorization`` and ``X-Amz-Security-Token`` headers, which are
  never logged here;
* the HTTP session is the client's (its pool, timeouts, proxies, TLS and CA settings) and ``before-send``
  handlers (botocore's stubbing hook, moto's ``mock_aws``) still see every request;
* retries use botocore's *standard* mode classes (the same conditions, backoff with jitter, retry quota
  and ``max_attempts``); errors are parsed by botocore's S3 parser and raised as the ``ClientError`` that
  ``get_object`` would raise, so callers report them exactly as before (HTTP 412 from ``If-Match`` stays
  "object changed since it was listed").

Redirects and region errors are handed back to the caller (``get`` returns None) to repeat with
``client.get_object``, whose redirect handling knows what to do.  When the client's request is not one
this can mirror (SigV4a, SigV2, S3 Express session auth, an unexpected URL shape, not a botocore client),
:func:`direct_getter` returns None and staging uses ``get_object`` for every object.

The client's HTTP session and credentials are private botocore attributes (``_endpoint.http_session``,
``_request_signer._credentials``).  The ``[s3]`` extra pins botocore to :data:`TESTED_BOTOCORE`, the range
the tests ran against, and a test fails when the fast path is not taken against the S3 test server, so a
botocore release that moves them is seen in CI.  A user on another botocore still gets a working stage:
``get_object`` for every object, with a warning that says why (about 2.2 ms of client CPU per object
instead of 0.8 ms).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)

_SAFE = "/~"  # botocore's quoting of the greedy {Key+} label

# The botocore versions this module was tested with: [lowest, first untested).  pyproject.toml's [s3]
# extra pins the same range (tests/test_staging_fastget.py keeps the two equal).
TESTED_BOTOCORE = ((1, 34), (1, 44))


def tested_botocore_spec() -> str:
    """``>=1.34,<1.44``: :data:`TESTED_BOTOCORE` as a version specifier."""
    (lo, hi) = (".".join(map(str, v)) for v in TESTED_BOTOCORE)
    return f">={lo},<{hi}"


def botocore_is_tested(version: str) -> bool:
    """Whether ``version`` (e.g. ``1.43.11``) falls in :data:`TESTED_BOTOCORE`."""
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    return TESTED_BOTOCORE[0] <= major_minor < TESTED_BOTOCORE[1]


def client_internals(client: Any) -> tuple[Any, Any]:
    """The client's HTTP session and credentials provider: the two private botocore attributes used here.

    ``AttributeError`` when this botocore keeps them elsewhere (:func:`direct_getter` then falls back).
    """
    return client._endpoint.http_session, client._request_signer._credentials


@dataclass(frozen=True)
class BucketEndpoint:
    """Where a bucket's objects are and how requests to it are signed.

    ``base`` is everything before the quoted key (``http://host:port/bucket/`` for path style,
    ``https://bucket.s3.region.amazonaws.com/`` for virtual-hosted style); ``region`` is None for an
    unsigned client.
    """

    base: str
    region: str | None
    signing_name: str = "s3"

    def url_for(self, key: str) -> str:
        return self.base + urllib.parse.quote(key, safe=_SAFE)


class SigningCapture:
    """Records how botocore addresses and signs a ``GetObject`` while registered (a context manager).

    The first small object of a stage is fetched with ``get_object`` inside this; its request (URL and
    signing scope, after endpoint rules and any region redirect) then describes every other key of the
    bucket.  A presigned URL would not do: S3 presigning may pick another signer (SigV2) and another host
    (the global endpoint) than the requests themselves.
    """

    _EVENT = "before-sign.s3.GetObject"

    def __init__(self, client: Any):
        self._events = getattr(getattr(client, "meta", None), "events", None)  # None: not a botocore client
        self._id = f"shardprep-capture-{id(self)}"
        self.seen: dict[str, Any] | None = None

    def __enter__(self) -> "SigningCapture":
        if self._events is not None:
            self._events.register(self._EVENT, self._record, unique_id=self._id)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._events is not None:
            self._events.unregister(self._EVENT, self._record, unique_id=self._id)

    def _record(self, request: Any, signature_version: Any, region_name: str | None, signing_name: str,
                **kwargs: Any) -> None:
        signing = request.context.get("signing") or {}
        self.seen = {"url": request.url, "signature_version": signature_version,
                     "region": signing.get("region") or region_name,
                     "signing_name": signing.get("signing_name") or signing_name,
                     "special_identity": bool(signing.get("request_credentials") or signing.get("identity_cache"))}

    def endpoint(self, key: str) -> BucketEndpoint | None:
        """The bucket endpoint seen while fetching ``key``; None when it is not a plain SigV4 (or unsigned) one."""
        return endpoint_from_request(self.seen, key) if self.seen else None


def endpoint_from_request(seen: dict[str, Any], key: str) -> BucketEndpoint | None:
    """Split a captured request URL at the quoted ``key``; keep its signing scope if it is plain SigV4."""
    from botocore import UNSIGNED

    url, version = seen["url"], seen["signature_version"]
    quoted = "/" + urllib.parse.quote(key, safe=_SAFE)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.query or not parts.path.endswith(quoted):
        return None
    base = url[:len(url) - len(quoted) + 1]
    if version is UNSIGNED:
        return BucketEndpoint(base, None)
    if version not in ("s3v4", "v4") or seen["special_identity"] or not seen["region"]:
        return None  # SigV4a (multi-region access points), SigV2, S3 Express session auth
    return BucketEndpoint(base, region=seen["region"], signing_name=seen["signing_name"])


class DirectGetter:
    """Signed GETs of one bucket's objects on the client's HTTP session, with standard-mode retries.

    Thread-safe: the retry quota has its own lock and everything else is per call.
    """

    def __init__(self, client: Any, endpoint: BucketEndpoint, *, max_attempts: int,
                 sleep: Callable[[float], None] = time.sleep):
        import botocore
        from botocore.parsers import create_parser

        from shardprep import __version__

        self.endpoint = endpoint
        self._http, self._credentials = client_internals(client)   # the client's pool, TLS; its credentials
        self._events = client.meta.events
        self._operation = client.meta.service_model.operation_model("GetObject")
        self._parser = create_parser("rest-xml")
        self._retry = StandardRetries(max_attempts, sleep=sleep)
        self._user_agent = f"shardprep/{__version__} botocore/{botocore.__version__}"

    def get(self, key: str, etag: str | None) -> Any | None:
        """The object's body as a botocore ``StreamingBody``; None when ``get_object`` must handle it.

        Sends ``If-Match: "<etag>"`` when an ETag is given.  Raises ``ClientError`` (HTTP errors, after the
        retries for retryable ones) or botocore's connection errors once the attempts are used up.
        """
        from botocore.exceptions import ClientError
        from botocore.response import StreamingBody

        url = self.endpoint.url_for(key)
        headers = {"User-Agent": self._user_agent}
        if etag:
            headers["If-Match"] = f'"{etag}"'
        state = self._retry.start()
        while True:
            response, error = self._send(url, headers)
            if response is not None and response.status_code < 300:
                self._retry.succeeded(state, response)
                length = response.headers.get("Content-Length")
                return StreamingBody(response.raw, int(length) if length is not None else None)
            parsed = None
            if response is not None:
                parsed = self._parse_error(response)
                if _needs_redirect_handling(response.status_code, parsed):
                    return None
            if self._retry.wait_before_retry(state, self._operation, response, parsed, error):
                continue
            if error is not None:
                raise error
            raise ClientError(parsed, "GetObject")

    def _send(self, url: str, headers: dict[str, str]) -> tuple[Any | None, Exception | None]:
        """One signed attempt: (response, None), or (None, the exception) as botocore's endpoint does."""
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method="GET", url=url, headers=dict(headers))
        try:
            self._sign(request)
            prepared = request.prepare()
            prepared.stream_output = True
            responses = self._events.emit("before-send.s3.GetObject", request=prepared)
            stubbed = next((r for _, r in responses if r is not None), None)
            return (stubbed if stubbed is not None else self._http.send(prepared)), None
        except Exception as e:  # classified by the retry rules, like botocore's endpoint does
            return None, e

    def _sign(self, request: Any) -> None:
        from botocore.auth import S3SigV4Auth

        if self.endpoint.region is None:
            return
        if self._credentials is None:
            from botocore.exceptions import NoCredentialsError
            raise NoCredentialsError()
        frozen = self._credentials.get_frozen_credentials()  # refreshes expiring credentials
        S3SigV4Auth(frozen, self.endpoint.signing_name, self.endpoint.region).add_auth(request)

    def _parse_error(self, response: Any) -> dict[str, Any]:
        """botocore's parse of an error response (``Error.Code``/``Message``, ``ResponseMetadata``)."""
        body = response.content  # reads (and so releases) the connection
        return self._parser.parse({"status_code": response.status_code, "headers": response.headers,
                                   "body": body}, self._operation.output_shape)


def _needs_redirect_handling(status: int, parsed: dict[str, Any]) -> bool:
    """The responses botocore's S3 region redirector acts on (3xx, wrong signing region, opt-in region)."""
    code = parsed.get("Error", {}).get("Code")
    return 300 <= status < 400 or code in ("AuthorizationHeaderMalformed", "PermanentRedirect",
                                           "IllegalLocationConstraintException")


@dataclass
class _Attempts:
    """One request's retry state: the attempt number and botocore's request context (quota bookkeeping)."""

    attempt: int = 1
    context: dict[str, Any] = field(default_factory=dict)


class StandardRetries:
    """botocore's standard retry mode, assembled from its own classes as ``register_retry_handler`` does.

    Retryable: connection errors and timeouts, HTTP 500/502/503/504, throttling codes (``SlowDown``,
    ``Throttling`` ...), ``RequestTimeout``; delay ``rand() * min(scale * 2**(attempt-1), 20 s)``, scale
    0.05 s (1 s for throttling) in this botocore; at most ``max_attempts`` attempts (the first included) and
    no more retries once the shared retry quota is spent.
    """

    def __init__(self, max_attempts: int, *, sleep: Callable[[float], None] = time.sleep):
        from botocore.retries import quota, standard

        adapter = standard.RetryEventAdapter()
        throttling = standard.ThrottlingErrorDetector(adapter)
        self._policy = standard.RetryPolicy(
            retry_checker=standard.StandardRetryConditions(max_attempts=max_attempts),
            retry_backoff=standard.ExponentialBackoff(service_name="s3", throttling_detector=throttling))
        self._quota = standard.RetryQuotaChecker(quota.RetryQuota(), throttling)
        self._sleep = sleep

    def start(self) -> _Attempts:
        return _Attempts()

    def wait_before_retry(self, state: _Attempts, operation: Any, response: Any, parsed: Any,
                          error: Exception | None) -> bool:
        """Sleep and return True when the failed attempt should be retried."""
        from botocore.retries.standard import RetryContext

        ctx = RetryContext(attempt_number=state.attempt, operation_model=operation, parsed_response=parsed,
                           http_response=response, caught_exception=error, request_context=state.context)
        if not (self._policy.should_retry(ctx) and self._quota.acquire_retry_quota(ctx)):
            return False
        delay = self._policy.compute_retry_delay(ctx)
        what = f"HTTP {response.status_code}" if response is not None else type(error).__name__
        log.debug("retrying a GET after %s (attempt %d) in %.2f s", what, state.attempt, delay)
        self._sleep(delay)
        state.attempt += 1
        return True

    def succeeded(self, state: _Attempts, response: Any) -> None:
        """Give retry quota back, as botocore's ``after-call`` handler does."""
        self._quota.release_retry_quota(state.context, response)


def direct_getter(client: Any, capture: SigningCapture, key: str, *, max_attempts: int) -> DirectGetter | None:
    """A :class:`DirectGetter` shaped like the request ``capture`` saw for ``key``, or None (use get_object).

    None without a word when the request is not one this can mirror (a property of the bucket or the
    credentials); None with a warning when this botocore keeps its internals elsewhere.
    """
    import botocore

    endpoint = capture.endpoint(key)
    if endpoint is None:
        log.debug("no direct GET: the client's GetObject request is not a plain SigV4 one (%s)",
                  "not seen" if capture.seen is None else capture.seen["signature_version"])
        return None
    if not botocore_is_tested(botocore.__version__):
        log.warning("botocore %s is outside the range the fast small-object GET was tested with (%s); "
                    "pip install 'shardprep[s3]' installs a tested one", botocore.__version__, tested_botocore_spec())
    try:
        return DirectGetter(client, endpoint, max_attempts=max_attempts)
    except AttributeError as e:
        log.warning("fast small-object GET unavailable with botocore %s (%s; tested with %s): every object "
                    "goes through get_object (about 2.2 ms of client CPU per object instead of 0.8)", botocore.__version__, e,
                    tested_botocore_spec())
        return None
