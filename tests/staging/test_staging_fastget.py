"""The direct GET for small objects (``shardprep.staging.fastget``) against moto's server on 127.0.0.1.

What must hold for it to replace ``client.get_object``: botocore's standard retries (count and backoff),
the same errors and reasons (500 after the retries, 412 from ``If-Match``), the same URL as botocore for
any key and addressing style, bytes exactly as stored (no transparent decompression), a fallback to
``get_object`` for redirects, and credentials that never reach a log, a reason or a file.

It uses two private botocore attributes, so the installed botocore must be the pinned, tested one and the
fast path must really be taken with it (a botocore that moves them fails here, not silently in users'
stages); with moved internals a stage still works, through ``get_object``, with a warning.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from s3_server import FAKE_CREDENTIALS, FaultProxy, aws_env, make_bucket, s3_client  # noqa: E402

from shardprep.staging import fastget  # noqa: E402
from shardprep.staging.fastget import BucketEndpoint, SigningCapture, direct_getter, endpoint_from_request  # noqa: E402

MAX_ATTEMPTS = 3
TRICKY_KEYS = ("raw/plain.txt", "raw/ünï cødé/日本語 ✓.txt", "raw/a+b=c&d?e#f%20g~h.txt",
               "raw/sp ace/'q'\"x\".bin", "raw/semi;colon,comma:colon@at$dollar!(x)*.txt")


@pytest.fixture
def bucket(s3_endpoint):
    return make_bucket(s3_endpoint, "fastget")


def botocore_client(endpoint: str, **config):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}, **config))


def getter_for(client, bucket: str, key: str, sleeps: list[float] | None = None):
    """A DirectGetter set up the way a stage does it: from one real get_object of ``key``."""
    with SigningCapture(client) as capture:
        client.get_object(Bucket=bucket, Key=key)["Body"].read()
    getter = direct_getter(client, capture, key, max_attempts=MAX_ATTEMPTS)
    assert getter is not None, capture.seen
    if sleeps is not None:
        getter._retry._sleep = sleeps.append
    return getter


@contextlib.contextmanager
def proxied_getter(endpoint: str, bucket: str, objects: dict[str, bytes], sleeps: list[float] | None = None):
    """Put ``objects`` (and ``raw/first.txt``, the probe), then yield a FaultProxy and a getter through it."""
    c = s3_client(endpoint)
    for key, body in {"raw/first.txt": b"first", **objects}.items():
        c.put_object(Bucket=bucket, Key=key, Body=body)
    with FaultProxy(endpoint) as proxy:
        yield proxy, getter_for(botocore_client(proxy.url), bucket, "raw/first.txt", sleeps)


def read_all(body) -> bytes:
    return b"".join(body.iter_chunks(1 << 20))


def etag_of(client, bucket: str, key: str) -> str:
    return client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')


# ------------------------------------------------------------------------------ endpoint (pure rules)

@pytest.mark.requires("s3")
@pytest.mark.parametrize("url,key,base,region", [
    ("http://127.0.0.1:9000/bkt/raw/a%20b.txt", "raw/a b.txt", "http://127.0.0.1:9000/bkt/", "us-east-1"),
    ("https://bkt.s3.eu-west-1.amazonaws.com/raw/%C3%BC.txt", "raw/ü.txt", "https://bkt.s3.eu-west-1.amazonaws.com/",
     "eu-west-1"),
])
def test_endpoint_is_the_captured_url_minus_the_quoted_key(url, key, base, region):
    seen = {"url": url, "signature_version": "s3v4", "region": region, "signing_name": "s3",
            "special_identity": False}
    endpoint = endpoint_from_request(seen, key)
    assert endpoint == BucketEndpoint(base, region, "s3")
    assert endpoint.url_for(key) == url


@pytest.mark.requires("s3")
@pytest.mark.parametrize("change", [
    {"signature_version": "v4a"},                           # multi-region access point
    {"signature_version": "s3"},                            # SigV2
    {"special_identity": True},                             # S3 Express session credentials
    {"url": "http://127.0.0.1:9000/bkt/raw/x.txt?versionId=1"},
    {"url": "http://127.0.0.1:9000/bkt/raw/other.txt"},
])
def test_requests_that_cannot_be_mirrored_fall_back_to_get_object(change):
    seen = {"url": "http://127.0.0.1:9000/bkt/raw/x.txt", "signature_version": "s3v4", "region": "us-east-1",
            "signing_name": "s3", "special_identity": False, **change}
    assert endpoint_from_request(seen, "raw/x.txt") is None


@pytest.mark.requires("s3")
def test_virtual_hosted_urls_and_signing_scope_match_botocore_for_any_key(monkeypatch):
    """AWS-shaped client (virtual-hosted style, a region, a session token), requests answered offline."""
    import boto3
    from botocore.awsrequest import AWSResponse

    for name, value in {**FAKE_CREDENTIALS, "AWS_SESSION_TOKEN": "token-for-the-test"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # a session of its own: boto3's default one keeps the credentials it resolved for an earlier test
    client = boto3.session.Session().client("s3", region_name="eu-central-1")
    sent = []

    class _Raw:
        def __init__(self):
            self.data = b"x"

        def read(self, amt=None):
            data, self.data = self.data, b""
            return data

        def stream(self, amt=None, decode_content=None):
            yield self.read()

    def answer(request, **kwargs):
        sent.append(request)
        return AWSResponse(request.url, 200, {"Content-Length": "1"}, _Raw())

    client.meta.events.register("before-send.s3.GetObject", answer)
    getter = getter_for(client, "my-bucket", TRICKY_KEYS[0])
    for key in TRICKY_KEYS:
        client.get_object(Bucket="my-bucket", Key=key)["Body"].read()
        assert read_all(getter.get(key, "0" * 32)) == b"x"
        theirs, ours = sent[-2], sent[-1]
        assert ours.url == theirs.url and ours.url.startswith("https://my-bucket.s3.eu-central-1.amazonaws.com/")
        assert f"Credential={FAKE_CREDENTIALS['AWS_ACCESS_KEY_ID']}/" in header(ours, "Authorization")
        assert "/eu-central-1/s3/aws4_request, SignedHeaders=" in header(ours, "Authorization")
        assert header(ours, "X-Amz-Security-Token") == "token-for-the-test"
        assert header(ours, "If-Match") == '"' + "0" * 32 + '"'


def header(request, name: str) -> str:
    value = request.headers[name]
    return value.decode() if isinstance(value, bytes) else value


# ------------------------------------------------------------------------------------ against moto

@pytest.mark.s3
def test_retries_server_errors_then_succeeds(s3_endpoint, bucket):
    sleeps: list[float] = []
    with proxied_getter(s3_endpoint, bucket, {"raw/flaky.txt": b"eventually"}, sleeps) as (proxy, getter):
        proxy.fail("/raw/flaky.txt", times=2, status=503)
        body = getter.get("raw/flaky.txt", etag_of(s3_client(s3_endpoint), bucket, "raw/flaky.txt"))
        assert read_all(body) == b"eventually"
        assert [r.status for r in proxy.requests_for("/raw/flaky.txt", "GET")] == [503, 503, 200]
    # botocore standard mode: full jitter, at most min(scale * 2**(attempt-1), 20) s with scale <= 1
    assert len(sleeps) == 2 and all(0 <= s <= 2 ** i for i, s in enumerate(sleeps))


@pytest.mark.s3
def test_gives_up_after_max_attempts_with_the_s3_error(s3_endpoint, bucket):
    from botocore.exceptions import ClientError

    from shardprep.staging.stage import _reason

    sleeps: list[float] = []
    with proxied_getter(s3_endpoint, bucket, {"raw/broken.txt": b"never"}, sleeps) as (proxy, getter):
        proxy.fail("/raw/broken.txt")  # 500 forever
        with pytest.raises(ClientError) as info:
            getter.get("raw/broken.txt", etag_of(s3_client(s3_endpoint), bucket, "raw/broken.txt"))
        assert len(proxy.requests_for("/raw/broken.txt", "GET")) == MAX_ATTEMPTS
    assert len(sleeps) == MAX_ATTEMPTS - 1
    assert _reason(info.value) == "download: InternalError (HTTP 500): injected by FaultProxy"


@pytest.mark.requires("s3")
def test_connection_errors_are_retried_then_raised(monkeypatch):
    """Nothing listens on the port: the first get_object fails, but its request was seen and signed."""
    import socket

    from botocore.exceptions import EndpointConnectionError

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = botocore_client(dead)
    waits: list[float] = []
    with monkeypatch.context() as m, SigningCapture(client) as capture, pytest.raises(EndpointConnectionError):
        # botocore's own retries of this capture call, without their real backoff (seconds of sleep)
        m.setattr("botocore.endpoint.time.sleep", waits.append)
        client.get_object(Bucket="bkt", Key="raw/x.txt")
    assert len(waits) == MAX_ATTEMPTS - 1
    getter = direct_getter(client, capture, "raw/x.txt", max_attempts=MAX_ATTEMPTS)
    sleeps: list[float] = []
    getter._retry._sleep = sleeps.append
    with pytest.raises(EndpointConnectionError):
        getter.get("raw/y.txt", None)
    assert len(sleeps) == MAX_ATTEMPTS - 1


@pytest.mark.s3
def test_changed_object_gives_412_once_and_the_changed_reason(s3_endpoint, bucket):
    from botocore.exceptions import ClientError

    from shardprep.staging.stage import _reason

    c = s3_client(s3_endpoint)
    c.put_object(Bucket=bucket, Key="raw/doc.txt", Body=b"version one")
    listed = etag_of(c, bucket, "raw/doc.txt")
    with proxied_getter(s3_endpoint, bucket, {"raw/doc.txt": b"version two"}) as (proxy, getter):
        with pytest.raises(ClientError) as info:
            getter.get("raw/doc.txt", listed)
        assert [r.status for r in proxy.requests_for("/raw/doc.txt", "GET")] == [412]   # not retried
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    assert "changed since it was listed" in _reason(info.value)


@pytest.mark.s3
def test_redirect_is_handed_back_to_get_object(s3_endpoint, bucket):
    with proxied_getter(s3_endpoint, bucket, {"raw/moved.txt": b"moved"}) as (proxy, getter):
        proxy.fail("/raw/moved.txt", times=1, status=307)
        assert getter.get("raw/moved.txt", etag_of(s3_client(s3_endpoint), bucket, "raw/moved.txt")) is None
        assert len(proxy.requests_for("/raw/moved.txt", "GET")) == 1


def stage_counting_get_object(endpoint: str, bucket: str, dest: Path):
    """Stage ``s3://bucket/raw/`` into ``dest``: (summary, the keys that went through ``get_object``)."""
    from shardprep.staging.stage import StageOptions, stage_prefix
    from shardprep.storage.s3 import ClientOptions, make_client

    options = StageOptions(f"s3://{bucket}/raw/", dest, progress=False, engine="builtin",
                           client=ClientOptions(endpoint_url=endpoint))
    client = make_client(options.client)
    via_botocore: list[str] = []
    client.meta.events.register("before-parameter-build.s3.GetObject",
                                lambda params, **kw: via_botocore.append(params["Key"]))
    return stage_prefix(options, client=client), via_botocore


@pytest.mark.s3
def test_stage_uses_the_direct_get_for_unicode_and_encoded_objects(s3_endpoint, bucket, tmp_path):
    """Every key but the probe goes direct; bytes land exactly as stored, even gzip-encoded ones."""
    c = s3_client(s3_endpoint)
    expected = {key: f"body of {key}".encode() for key in TRICKY_KEYS}
    for key, body in expected.items():
        c.put_object(Bucket=bucket, Key=key, Body=body)
    packed = gzip.compress(b"text that must stay compressed " * 50)
    c.put_object(Bucket=bucket, Key="raw/packed.json.gz", Body=packed, ContentEncoding="gzip")
    expected["raw/packed.json.gz"] = packed
    summary, via_botocore = stage_counting_get_object(s3_endpoint, bucket, tmp_path / "dest")
    assert summary.files == len(expected) and not summary.failed, summary.failed
    for key, body in expected.items():
        assert (tmp_path / "dest" / key[len("raw/"):]).read_bytes() == body, key
    assert via_botocore == ["raw/plain.txt"]                     # the smallest: the probe
    assert hashlib.md5(packed).hexdigest() == etag_of(c, bucket, "raw/packed.json.gz")


# ----------------------------------------------------------------------------------------- secrets

SECRETS = {"AWS_ACCESS_KEY_ID": "AKIASHARDPREPTEST001", "AWS_SECRET_ACCESS_KEY": "sEcReT/shardprep+never-log-me",
           "AWS_SESSION_TOKEN": "ToKeN-shardprep-never-log-me"}


@pytest.mark.s3
def test_credentials_never_reach_logs_reasons_or_files(s3_endpoint, bucket, tmp_path, monkeypatch, caplog):
    from shardprep.staging.stage import StageOptions, stage_prefix
    from shardprep.storage.s3 import ClientOptions

    c = s3_client(s3_endpoint)
    for i in range(5):
        c.put_object(Bucket=bucket, Key=f"raw/f{i}.txt", Body=b"x" * (i + 1))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint) as proxy, caplog.at_level(logging.DEBUG):
        proxy.fail("/raw/f4.txt")
        summary = stage_prefix(StageOptions(f"s3://{bucket}/raw/", dest, progress=False, engine="builtin",
                                            client=ClientOptions(endpoint_url=proxy.url, max_attempts=2)))
    assert set(summary.failed) == {"raw/f4.txt"} and summary.files == 4
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("shardprep"))
    assert "retrying a GET after HTTP 500" in ours                 # the direct GET did log, and ...
    files = "".join(p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file())
    for value in SECRETS.values():
        assert value not in ours and value not in files and value not in str(summary.failed)
    assert SECRETS["AWS_SECRET_ACCESS_KEY"] not in caplog.text     # ... botocore's own debug log neither

    r = subprocess.run(
        [sys.executable, "-m", "shardprep", "-v", "stage", f"s3://{bucket}/raw/", str(tmp_path / "cli"),
         "--endpoint-url", s3_endpoint], env=aws_env(SECRETS), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert SECRETS["AWS_SECRET_ACCESS_KEY"] not in r.stdout + r.stderr


# ------------------------------------------------------------------------ the pinned botocore internals

@pytest.mark.requires("s3")
def test_pyproject_pins_the_tested_botocore_range():
    import botocore

    tomllib = pytest.importorskip("tomllib")   # Python 3.11+; the pin is the same file on 3.10
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    pins = [d for d in project["optional-dependencies"]["s3"] if d.startswith("botocore")]
    assert pins == [f"botocore{fastget.tested_botocore_spec()}"]
    assert fastget.botocore_is_tested(botocore.__version__), botocore.__version__
    assert [fastget.botocore_is_tested(v) for v in ("1.34.0", "1.43.11", "1.44.0", "1.33.99", "2.0.0")] == \
        [True, True, False, False, False]


@pytest.mark.s3
def test_the_fast_path_is_taken_with_the_installed_botocore(s3_endpoint, bucket, caplog):
    """A failure here means this botocore moved what fastget uses: fix fastget, then move the pin."""
    c = s3_client(s3_endpoint)
    c.put_object(Bucket=bucket, Key="raw/first.txt", Body=b"first")
    client = botocore_client(s3_endpoint)
    with caplog.at_level(logging.WARNING, logger="shardprep"):
        getter = getter_for(client, bucket, "raw/first.txt")
    assert isinstance(getter, fastget.DirectGetter) and not caplog.records
    assert getter._http is client._endpoint.http_session


@pytest.mark.s3
def test_moved_botocore_internals_fall_back_to_get_object_with_a_warning(s3_endpoint, bucket, tmp_path,
                                                                        monkeypatch, caplog):
    def moved(client):
        raise AttributeError("'S3' object has no attribute '_endpoint'")

    monkeypatch.setattr(fastget, "client_internals", moved)
    c = s3_client(s3_endpoint)
    for i in range(4):
        c.put_object(Bucket=bucket, Key=f"raw/f{i}.txt", Body=b"x" * (i + 1))
    with caplog.at_level(logging.WARNING, logger="shardprep"):
        summary, via_botocore = stage_counting_get_object(s3_endpoint, bucket, tmp_path / "dest")
    assert summary.files == 4 and not summary.failed
    assert sorted(via_botocore) == [f"raw/f{i}.txt" for i in range(4)]          # every object, the slow way
    [warning] = [r.getMessage() for r in caplog.records if r.name == "shardprep.staging.fastget"]
    assert "fast small-object GET unavailable with botocore" in warning and fastget.tested_botocore_spec() in warning
