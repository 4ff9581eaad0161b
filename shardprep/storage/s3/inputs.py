"""S3 inputs (issue 22): objects listed with their identity, and read only in the version the plan froze.

The client, its options and retries, the error mapping and the GET with its body retry are ``client.py``'s;
this module adds what a tokenize task's inputs need on top (``S3Store``'s ``walk`` and ``open_version``,
``store.py``).  The identity is the ETag, plus the VersionId in a versioned bucket
(``storage.objects``).
"""

from __future__ import annotations

from typing import Any, Iterator

from shardprep.storage.objects import READS, ObjectChanged, ObjectInfo, compare, identity_parts, identity_text
from shardprep.storage.s3.client import (
    AnswerWatch,
    ClientOptions,
    S3Location,
    list_objects,
    parse_s3_object,
    read_range,
    s3_errors,
    shared_client,
)


def _object_info(url: str, size: int, modified: Any, etag: str | None, version: str | None) -> ObjectInfo:
    return ObjectInfo(url, int(size), int(modified.timestamp()) * 1_000_000_000,
                      identity_text(etag=etag, version=version))


def _versioned(client: Any, bucket: str) -> bool:
    """Whether the bucket keeps versions (then VersionIds are frozen too); False when we may not ask.  An
    endpoint that cannot be reached or does not answer is an error here: the listing would wait as long again."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, HTTPClientError

    try:
        with AnswerWatch(client, f"asking s3://{bucket} whether it keeps versions"):
            return client.get_bucket_versioning(Bucket=bucket).get("Status") in ("Enabled", "Suspended")
    except (EndpointConnectionError, HTTPClientError):     # HTTPClientError: read timeouts, dropped connections
        raise
    except (BotoCoreError, ClientError):
        return False


def walk_objects(client: Any, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
    """The objects whose key starts with ``prefix``: ListObjectsV2, or in a versioned bucket the current
    entries of ListObjectVersions (which alone carry the VersionId)."""
    with s3_errors(f"listing s3://{bucket}/{prefix}"):
        if _versioned(client, bucket):
            for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
                for v in page.get("Versions", ()):
                    if v.get("IsLatest"):
                        yield _object_info(f"s3://{bucket}/{v['Key']}", v["Size"], v["LastModified"], v.get("ETag"),
                                           v.get("VersionId"))
            return
        for e in list_objects(client, S3Location(bucket, prefix)):
            yield _object_info(f"s3://{bucket}/{e['Key']}", e["Size"], e["LastModified"], e.get("ETag"), None)


class S3Version:
    """One object's planned version as a ``ByteSource`` (a ``VersionSource``, see ``storage.objects``).

    Every ranged GET carries ``If-Match`` with the planned ETag (a replaced object answers 412) and, in a
    versioned bucket, must answer with the planned VersionId: the bytes of every read are the planned
    version's, so no HEAD is needed before or after.  Requests and botocore's retries are counted.
    """

    def __init__(self, url: str, options: ClientOptions, size: int, identity: str | None):
        self.path, self.obj, self.options = url, parse_s3_object(url), options
        self.size, self.identity = size, identity
        parts = identity_parts(identity)
        self.etag, self.version = parts.get("etag"), parts.get("version")
        self._read = False

    def _answered(self, response: dict) -> None:
        retries = int(response.get("ResponseMetadata", {}).get("RetryAttempts", 0))
        READS.add(requests=1 + retries, retries=retries)
        if self.version and response.get("VersionId") != self.version:
            raise ObjectChanged(self.path, f"version {self.version} -> {response.get('VersionId')}")

    def read(self, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        match = {"IfMatch": self.etag} if self.etag else {}
        data = read_range(shared_client(self.options), self.obj, offset, size, answered=self._answered, **match)
        READS.add(nbytes=len(data))
        self._read = True
        return data

    def check(self) -> None:
        """Every GET was held to the planned version; an object never read (empty) gets one HEAD."""
        if self._read:
            return
        with s3_errors(f"{self.path}: HEAD"):
            r = shared_client(self.options).head_object(Bucket=self.obj.bucket, Key=self.obj.key)
        READS.add(requests=1)
        now = _object_info(self.path, r["ContentLength"], r["LastModified"], r.get("ETag"),
                           r.get("VersionId") if self.version else None)
        change = compare(self.size, self.identity, now)
        if change:
            raise ObjectChanged(self.path, change)

    def close(self) -> None:
        pass
