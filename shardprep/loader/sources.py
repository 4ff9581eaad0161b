"""Where shard bytes come from: local/Lustre paths (``LocalSource``) or ``s3://`` URLs (``S3Source``).

Both implement ``shardprep.shard.reader.ByteSource`` (``read(offset, size)``), so decoding is the same
for both.  An S3 shard is never downloaded whole: each sample is one ranged ``GetObject`` using the byte
offsets from the sidecar's chunk table.

boto3 clients are not safe to share across ``fork`` (DataLoader workers fork), so clients are cached per
process id.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

from shardprep.errors import InputDataError, TransferError
from shardprep.storage.atomic import sha256_file
from shardprep.shard.reader import ByteSource, LocalSource

log = logging.getLogger(__name__)

_CLIENTS: dict[tuple[int, str | None], object] = {}
_READ_ATTEMPTS = 4


def is_s3(location: str | os.PathLike) -> bool:
    return str(location).startswith("s3://")


def split_s3(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``(bucket, key)``."""
    rest = url[len("s3://"):]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InputDataError(f"{url!r} is not an s3://bucket/key URL")
    return bucket, key


def join(root: str, name: str) -> str:
    """``root/name`` for a directory path or an ``s3://`` prefix."""
    if is_s3(root):
        return root.rstrip("/") + "/" + name
    return str(Path(root) / name)


def s3_client(endpoint_url: str | None = None):
    """A boto3 S3 client for this process (standard retry mode: throttling and 5xx are retried)."""
    key = (os.getpid(), endpoint_url)
    client = _CLIENTS.get(key)
    if client is None:
        import boto3
        from botocore.config import Config

        config = Config(retries={"max_attempts": 8, "mode": "standard"}, max_pool_connections=16)
        client = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)
        _CLIENTS[key] = client
    return client


class S3Source:
    """One S3 object read with ranged GETs; raises EOFError when the object is shorter than asked."""

    def __init__(self, url: str, *, endpoint_url: str | None = None):
        self.path = url
        self.bucket, self.key = split_s3(url)
        self.endpoint_url = endpoint_url

    def read(self, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client(self.endpoint_url)
        rng = f"bytes={offset}-{offset + size - 1}"
        for attempt in range(1, _READ_ATTEMPTS + 1):
            try:
                resp = client.get_object(Bucket=self.bucket, Key=self.key, Range=rng)
                data = resp["Body"].read()
                break
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code == "InvalidRange":
                    raise EOFError(f"{self.path}: truncated: no bytes at offset {offset}") from None
                if code in ("NoSuchKey", "404", "NoSuchBucket", "AccessDenied", "403"):
                    raise InputDataError(f"{self.path}: cannot read ({code})") from None
                err: Exception = e
            except BotoCoreError as e:  # connection reset, read timeout, incomplete body
                err = e
            if attempt == _READ_ATTEMPTS:
                raise TransferError(f"{self.path}: ranged GET {rng} failed after {attempt} attempts: {err}")
            log.warning("%s: ranged GET %s failed (%s), retrying", self.path, rng, err)
            time.sleep(0.2 * 2 ** attempt)
        if len(data) != size:
            raise EOFError(f"{self.path}: truncated: wanted {size} bytes at offset {offset}, got {len(data)}")
        return data

    def close(self) -> None:  # the client is shared per process; nothing to release
        pass


def open_source(location: str, *, endpoint_url: str | None = None) -> ByteSource:
    """A ByteSource for a local path or an ``s3://`` URL."""
    if is_s3(location):
        return S3Source(location, endpoint_url=endpoint_url)
    try:
        return LocalSource(location)
    except FileNotFoundError:
        raise InputDataError(f"{location}: shard is missing") from None


def read_bytes(location: str, *, endpoint_url: str | None = None) -> bytes:
    """A whole small file (index.json, a sidecar); FileNotFoundError when it does not exist."""
    if not is_s3(location):
        return Path(location).read_bytes()
    from botocore.exceptions import ClientError

    bucket, key = split_s3(location)
    try:
        return s3_client(endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise FileNotFoundError(location) from None
        raise TransferError(f"{location}: {e}") from None


def object_sizes(root: str, *, endpoint_url: str | None = None) -> dict[str, int]:
    """Sizes of the files directly under ``root`` (one LIST per 1,000 objects on S3, a scandir locally)."""
    if not is_s3(root):
        with os.scandir(root) as it:
            return {e.name: e.stat().st_size for e in it if e.is_file()}
    bucket, prefix = split_s3(root.rstrip("/") + "/")
    sizes: dict[str, int] = {}
    pages = s3_client(endpoint_url).get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix, Delimiter="/")
    for page in pages:
        for obj in page.get("Contents", []):
            sizes[obj["Key"][len(prefix):]] = int(obj["Size"])
    return sizes


def sha256_of(location: str, *, endpoint_url: str | None = None, block: int = 8 << 20) -> str:
    """sha256 of a whole shard, streamed (``verify=True``); local files go through storage.atomic."""
    if not is_s3(location):
        return sha256_file(Path(location), block=block)
    bucket, key = split_s3(location)
    h = hashlib.sha256()
    for data in s3_client(endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(block):
        h.update(data)
    return h.hexdigest()
