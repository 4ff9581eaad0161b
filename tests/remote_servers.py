"""Real object-store emulators on 127.0.0.1 for the remote-shard tests, one ``Backend`` per kind of URL.

``conftest.py`` registers this module as a plugin.  Each backend is a real server speaking its store's
HTTP API: moto (``s3://``, from ``s3_server``), gcp-storage-emulator (``gs://`` through gcsfs), Azurite
(``az://`` through adlfs; installed with npm into ``.cache/azurite`` of the repository on first use) and a
small HTTP server with ``Range`` support (``http://``).  A ``Backend`` uploads a local directory and says
how ``ShardDataset`` reaches it through a given endpoint, so a test can put ``s3_server.FaultProxy`` in
front and count the requests and bytes the store really served.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

# gcsfs's experimental bucket-type probe speaks gRPC to the endpoint (which an emulator does not answer,
# costing a 60 s timeout per bucket); it is read when gcsfs is first imported, here or in a subprocess.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

REPO = Path(__file__).resolve().parents[1]
AZURITE_DIR = REPO / ".cache" / "azurite"
AZURITE_VERSION = "3"
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_names = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """Until something accepts connections on ``port`` (or ``proc`` exited, or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@contextlib.contextmanager
def serving(argv: list[str], port: int) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------- backends

@dataclass
class Backend:
    """A store with a real API on 127.0.0.1: ``put_dir`` uploads, ``reach`` says how to read it back."""

    name: str
    endpoint: str                 # http://127.0.0.1:PORT of the server itself

    def put_dir(self, local: Path) -> str:
        """Upload the files of ``local`` under a fresh prefix; return the URL of that prefix."""
        raise NotImplementedError

    def reach(self, url: str, endpoint: str | None = None) -> tuple[str, dict[str, Any]]:
        """``(url, ShardDataset keyword arguments)`` reading ``url`` through ``endpoint`` (default: direct)."""
        raise NotImplementedError

    def cli_env(self, endpoint: str | None = None) -> dict[str, str]:
        """Environment for the CLI (which takes no storage options) to reach the store through ``endpoint``."""
        return {}


class S3Backend(Backend):
    def put_dir(self, local: Path) -> str:
        from s3_server import make_bucket, s3_client

        bucket = make_bucket(self.endpoint, "remote")
        client = s3_client(self.endpoint)
        for f in sorted(p for p in local.iterdir() if p.is_file()):
            client.upload_file(str(f), bucket, f"shards/{f.name}")
        return f"s3://{bucket}/shards"

    def reach(self, url: str, endpoint: str | None = None) -> tuple[str, dict[str, Any]]:
        return url, {"endpoint_url": endpoint or self.endpoint}

    def cli_env(self, endpoint: str | None = None) -> dict[str, str]:
        from s3_server import aws_env

        return aws_env({"AWS_ENDPOINT_URL": endpoint or self.endpoint})


class GcsBackend(Backend):
    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"endpoint_url": endpoint or self.endpoint, "token": "anon", "project": "shardprep-test"}

    def put_dir(self, local: Path) -> str:
        import fsspec

        fs = fsspec.filesystem("gs", **self.options())
        bucket = f"remote-{os.getpid()}-{next(_names)}"
        fs.mkdir(bucket)
        fs.put([str(p) for p in sorted(local.iterdir()) if p.is_file()], f"{bucket}/shards/")
        return f"gs://{bucket}/shards"

    def reach(self, url: str, endpoint: str | None = None) -> tuple[str, dict[str, Any]]:
        return url, {"storage_options": self.options(endpoint)}

    def cli_env(self, endpoint: str | None = None) -> dict[str, str]:
        return {f"FSSPEC_GS_{k.upper()}": v for k, v in self.options(endpoint).items()}   # fsspec's own config


class AzureBackend(Backend):
    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"connection_string": f"DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};"
                                     f"BlobEndpoint={endpoint or self.endpoint}/{AZ_ACCOUNT};"}

    def put_dir(self, local: Path) -> str:
        import fsspec

        fs = fsspec.filesystem("az", **self.options())
        container = f"remote-{os.getpid()}-{next(_names)}"
        fs.mkdir(container)
        for p in sorted(local.iterdir()):
            if p.is_file():
                fs.put_file(str(p), f"{container}/shards/{p.name}")
        return f"az://{container}/shards"

    def reach(self, url: str, endpoint: str | None = None) -> tuple[str, dict[str, Any]]:
        return url, {"storage_options": self.options(endpoint)}

    def cli_env(self, endpoint: str | None = None) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.options(endpoint)["connection_string"]}   # adlfs reads it


class HttpBackend(Backend):
    root: Path

    def put_dir(self, local: Path) -> str:
        name = f"d{next(_names)}"
        shutil.copytree(local, self.root / name / "shards", ignore=shutil.ignore_patterns("*.tmp", "slurm"))
        return f"{self.endpoint}/{name}/shards"

    def reach(self, url: str, endpoint: str | None = None) -> tuple[str, dict[str, Any]]:
        return (url.replace(self.endpoint, endpoint, 1) if endpoint else url), {}


# ------------------------------------------------------------------------------------ the HTTP server

class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with single ``Range: bytes=a-b`` support (206, 416), as object stores and CDNs answer."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True    # headers and body are two writes: no 40 ms delayed-ACK stall per request

    def log_message(self, *args: Any) -> None:
        pass

    def send_head(self):  # type: ignore[override]
        path = Path(self.translate_path(self.path))
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if not path.is_file() or not match:
            return super().send_head()
        size = path.stat().st_size
        start = int(match.group(1))
        end = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        f = open(path, "rb")  # noqa: SIM115 - SimpleHTTPRequestHandler copies and closes it
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return _Limited(f, end - start + 1)


class _Limited:
    """The ``length`` bytes of ``f`` from its position, as the file object ``copyfile`` reads."""

    def __init__(self, f: Any, length: int):
        self._f, self._left = f, length

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()


# ------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def s3_backend(s3_endpoint) -> Backend:
    return S3Backend("s3", s3_endpoint)


@pytest.fixture(scope="session")
def gs_backend() -> Iterator[Backend]:
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    port = free_port()
    argv = [sys.executable, "-m", "gcp_storage_emulator", "start", "-H", "127.0.0.1", "--port", str(port),
            "--in-memory", "--quiet"]
    with serving(argv, port):
        yield GcsBackend("gs", f"http://127.0.0.1:{port}")


def azurite_binary() -> Path:
    """Azurite's blob server, installed with npm into the repository's (ignored) cache on first use."""
    binary = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: cannot install Azurite for the az:// tests (apt-get install npm)")
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    # One install at a time: pytest-xdist workers that reach their first az:// test together would run two
    # npm installs into the same directory, and both fail.
    with open(AZURITE_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            subprocess.run(["npm", "install", "--prefix", str(AZURITE_DIR), "--silent", "--no-audit", "--no-fund",
                            f"azurite@{AZURITE_VERSION}"], check=True, timeout=600)
    return binary


@pytest.fixture(scope="session")
def az_backend() -> Iterator[Backend]:
    pytest.importorskip("adlfs")
    binary = azurite_binary()
    port = free_port()
    argv = [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence", "--silent",
            "--skipApiVersionCheck", "--disableTelemetry", "--loose"]
    with serving(argv, port):
        yield AzureBackend("az", f"http://127.0.0.1:{port}")


@pytest.fixture(scope="session")
def http_backend(tmp_path_factory) -> Iterator[Backend]:
    pytest.importorskip("aiohttp")     # fsspec's HTTP file system
    root = tmp_path_factory.mktemp("http-root")
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: RangeHandler(*a, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    backend = HttpBackend("http", f"http://127.0.0.1:{server.server_address[1]}")
    backend.root = root
    try:
        yield backend
    finally:
        server.shutdown()
        server.server_close()


REMOTE_BACKENDS = ("s3", "gs", "az", "http")
_uploaded: dict[tuple[str, Path], str] = {}


def dataset_in(request: pytest.FixtureRequest, store: str, local: Path) -> tuple[str | Path, dict[str, Any]]:
    """``(location, ShardDataset keyword arguments)`` of the local output ``local`` in ``store``.

    ``"local"`` is the directory itself; a remote store gets one upload per session.
    """
    if store == "local":
        return local, {}
    backend = request.getfixturevalue(f"{store}_backend")
    if (store, local) not in _uploaded:
        _uploaded[store, local] = backend.put_dir(local)
    return backend.reach(_uploaded[store, local])


@pytest.fixture(params=REMOTE_BACKENDS)
def backend(request) -> Backend:
    """Each remote store in turn."""
    return request.getfixturevalue(f"{request.param}_backend")
