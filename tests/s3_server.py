"""A real S3 API for tests: moto's server on 127.0.0.1, plus a small fault-injecting HTTP proxy.

``conftest.py`` registers this module as a plugin, so its fixtures are available everywhere; import the
plain helpers (``make_bucket``, ``s3_client``, ``aws_env``, ``FaultProxy``) where needed.

``s3_endpoint`` is a session fixture yielding ``http://127.0.0.1:PORT``; the process environment gets
dummy credentials (moto accepts any) and ``aws_env()`` gives the same for subprocesses, isolated from the
developer's ``~/.aws``.  ``FaultProxy`` sits between a client and moto to answer chosen requests with
HTTP errors (any S3 error code), cut response bodies mid-stream, throttle them, and log every request with
timestamps (for counting attempts and ordering checks).
"""

from __future__ import annotations

import http.client
import itertools
import logging
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
}
_DROP = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "HTTP_PROXY", "HTTPS_PROXY",
         "http_proxy", "https_proxy")
_bucket_counter = itertools.count()


def aws_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a subprocess talking to the test server (no real credentials can leak in)."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(FAKE_CREDENTIALS)
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Start moto's threaded server on a free 127.0.0.1 port for the whole session."""
    pytest.importorskip("moto.server")
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in (*FAKE_CREDENTIALS, *_DROP)}
    for k in _DROP:
        os.environ.pop(k, None)
    os.environ.update(FAKE_CREDENTIALS)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def make_bucket(endpoint: str, stem: str = "test") -> str:
    """Create a fresh, uniquely named bucket and return its name."""
    name = f"{stem}-{os.getpid()}-{next(_bucket_counter)}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


# --------------------------------------------------------------------------------------------- proxy


@dataclass
class RequestRecord:
    method: str
    path: str          # unquoted path, e.g. /bucket/key
    query: str
    status: int
    started: float
    ended: float       # the upstream's answer arrived (logged before the response goes out)
    range: str | None = None   # the request's Range header (Azure's x-ms-range)
    bytes: int = 0             # response body bytes sent


@dataclass
class FaultRule:
    substring: str     # matched against the unquoted path
    methods: tuple[str, ...]
    status: int        # 0: forward the request, then cut the response body in half and drop the connection
    remaining: int     # -1: forever
    code: str = "InternalError"


@dataclass
class HoldRule:
    """Matching requests wait (body read, not yet forwarded) until ``release`` is set; ``arrived`` tells
    the test that one is waiting, so it can act while a transfer is observably in flight."""

    substring: str
    methods: tuple[str, ...]
    query: str = ""    # also required in the query string, e.g. "partNumber=1"
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str, query: str) -> bool:
        return self.substring in path and method in self.methods and self.query in query


@dataclass
class _ProxyState:
    upstream: tuple[str, int]
    rules: list[FaultRule] = field(default_factory=list)
    holds: list[HoldRule] = field(default_factory=list)
    throttle_bps: float | None = None
    log: list[RequestRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    dead: threading.Event = field(default_factory=threading.Event)    # FaultProxy.kill: answer nothing


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True    # headers and body are separate writes: no delayed-ACK stall per request
    state: _ProxyState  # set on the subclass per proxy

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _read_body(self) -> bytes | None:
        """The request's body; None when the client went away before sending all of it (a killed
        uploader): such a request is never forwarded, as S3 never stores a body cut short."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                line = self.rfile.readline()
                if not line.strip():
                    return None
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    return None
                out += chunk
                self.rfile.readline()
        want = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(want)
        return body if len(body) == want else None

    def _fault(self, path: str) -> FaultRule | None:
        with self.state.lock:
            for rule in self.state.rules:
                if rule.substring in path and self.command in rule.methods and rule.remaining != 0:
                    if rule.remaining > 0:
                        rule.remaining -= 1
                    return rule
        return None

    def _record(self, path: str, query: str, status: int, started: float, sent: int = 0) -> None:
        """Log the request before its response is sent, so a client that has its answer finds it logged."""
        with self.state.lock:
            self.state.log.append(RequestRecord(self.command, path, query, status, started, time.monotonic(),
                                                self.headers.get("Range") or self.headers.get("x-ms-range"), sent))

    def _proxy(self) -> None:
        started = time.monotonic()
        parsed = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(parsed.path)
        body = self._read_body()
        if body is None:
            self.close_connection = True
            return
        for hold in list(self.state.holds):
            if hold.matches(self.command, path, parsed.query):
                hold.arrived.set()
                hold.release.wait(timeout=300)
        if self.state.dead.is_set():      # a killed server: the connection drops without an answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        rule = self._fault(path)
        if rule is not None and rule.status:
            status = rule.status
            payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{rule.code}</Code>'
                       f"<Message>injected by FaultProxy</Message></Error>").encode()
            self._record(path, parsed.query, status, started, len(payload))
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*self.state.upstream, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "connection")}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read() if self.command != "HEAD" else b""
        conn.close()
        cut = rule is not None   # a body that breaks mid-stream: half of it, then the connection drops
        self._record(path, parsed.query, resp.status, started, len(data) // 2 if cut else len(data))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                self.send_header(k, v)
        length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if cut:
            self.wfile.write(data[:len(data) // 2])
            self.close_connection = True
            return
        step = 64 << 10
        for i in range(0, len(data), step):
            self.wfile.write(data[i:i + step])
            if self.state.throttle_bps:
                time.sleep(step / self.state.throttle_bps)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _proxy


class FaultProxy:
    """HTTP proxy in front of ``upstream`` (``http://host:port``) with injected faults and a request log."""

    def __init__(self, upstream: str, *, throttle_bytes_per_s: float | None = None, port: int = 0):
        u = urllib.parse.urlsplit(upstream)
        self.state = _ProxyState(upstream=(u.hostname, u.port), throttle_bps=throttle_bytes_per_s)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def log(self) -> list[RequestRecord]:
        with self.state.lock:
            return list(self.state.log)

    def fail(self, substring: str, *, times: int = -1, methods: tuple[str, ...] = ("GET",), status: int = 500,
             code: str = "InternalError") -> None:
        """Answer matching requests with ``status`` and S3 error ``code`` (``times`` times, or forever with -1)."""
        with self.state.lock:
            self.state.rules.append(FaultRule(substring, methods, status, times, code))

    def cut(self, substring: str, *, times: int = -1) -> None:
        """Forward matching GETs but send only half of the response body, then drop the connection."""
        with self.state.lock:
            self.state.rules.append(FaultRule(substring, ("GET",), 0, times))

    def hold(self, substring: str, *, methods: tuple[str, ...] = ("PUT",), query: str = "") -> HoldRule:
        """Hold matching requests until the returned rule's ``release`` is set (see :class:`HoldRule`)."""
        rule = HoldRule(substring, methods, query)
        with self.state.lock:
            self.state.holds.append(rule)
        return rule

    def kill(self) -> None:
        """Die as a server does: stop listening (new connections are refused) and drop every request in
        flight, held ones included, without an answer.  A new proxy on the same ``port`` comes back."""
        self.state.dead.set()
        self._server.shutdown()
        self._server.server_close()
        for hold in self.state.holds:
            hold.release.set()

    def requests_for(self, substring: str, method: str | None = None) -> list[RequestRecord]:
        return [r for r in self.log if substring in r.path and (method is None or r.method == method)]

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.state.dead.is_set():
            return
        for hold in self.state.holds:
            hold.release.set()
        self._server.shutdown()
        self._server.server_close()
