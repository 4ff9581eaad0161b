"""Deciding whether a downloaded file is byte-for-byte the object that was listed.

S3 offers three kinds of evidence and we use the strongest one that is actually available:

1. A single-part ETag (32 hex digits, no ``-N`` suffix) is the MD5 of the content, unless the object is
   encrypted with SSE-KMS or SSE-C (then it is opaque).
2. A *full-object* checksum (``ChecksumType: FULL_OBJECT``; CRC32, CRC32C, CRC64NVME, SHA1, SHA256) is a
   digest of the whole content.  Only trusted when S3 says FULL_OBJECT: a COMPOSITE checksum (the default
   for multipart uploads with SHA checksums) is a checksum of part checksums, and some S3 implementations
   return values that are neither.
3. A multipart ETag (``<hex>-N``) is the MD5 of the concatenated binary MD5s of the N parts, so it can
   be recomputed once the part size is known: inferred from N and the object size when exactly one common
   part size fits, otherwise read from ``HEAD ?partNumber=1`` (the first part's length).

Only when none applies (an SSE-KMS object without checksum) do we fall back to the size, and say so.
Functions here take a ``head`` callable instead of a client so the decisions are testable on their own.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

MIB = 1 << 20
_BLOCK = 4 * MIB
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")
_MULTIPART_RE = re.compile(r"^([0-9a-f]{32})-(\d+)$")

# Part sizes that real uploaders use (aws cli / boto3 8 MiB, the S3 minimum 5 MiB, s3cmd 15 MiB, rclone
# 5 MiB, our own uploads 16 MiB, big-file tools 64 MiB and up).
COMMON_PART_SIZES = (5 * MIB, 8 * MIB, 15 * MIB, 16 * MIB, 32 * MIB, 50 * MIB, 64 * MIB, 100 * MIB,
                     128 * MIB, 256 * MIB, 512 * MIB, 1024 * MIB)

# HEAD response field per algorithm; hashlib/zlib ones need no extra package.
CHECKSUM_FIELDS = {"CRC32": "ChecksumCRC32", "CRC32C": "ChecksumCRC32C", "CRC64NVME": "ChecksumCRC64NVME",
                   "SHA1": "ChecksumSHA1", "SHA256": "ChecksumSHA256"}

HeadFn = Callable[..., dict[str, Any]]


class VerificationFailed(Exception):
    """The local bytes do not match the object (or the object changed while it was being read)."""


@dataclass(frozen=True)
class Verified:
    method: str    # md5 | multipart-etag | crc32 | sha256 | ... | size-only
    value: str


def is_single_part_etag(etag: str) -> bool:
    return bool(_MD5_RE.match(etag))


def multipart_parts(etag: str) -> int | None:
    """N for a multipart ETag ``<hex>-N``, else None."""
    m = _MULTIPART_RE.match(etag)
    return int(m.group(2)) if m else None


def part_size_fits(size: int, parts: int, part_size: int) -> bool:
    """True when uploading ``size`` bytes in ``part_size`` parts gives exactly ``parts`` parts."""
    if parts == 1:
        return 0 < size <= part_size or size == 0
    return (parts - 1) * part_size < size <= parts * part_size


def infer_part_size(size: int, parts: int, candidates: Iterable[int] = COMMON_PART_SIZES) -> int | None:
    """The one common part size consistent with ``size`` and ``parts``; None when zero or several fit."""
    fits = [p for p in candidates if part_size_fits(size, parts, p)]
    return fits[0] if len(fits) == 1 else None


def _iter_blocks(path: Path, block: int = _BLOCK) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(block):
            yield chunk


def md5_hex(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    for chunk in _iter_blocks(path):
        h.update(chunk)
    return h.hexdigest()


class PartMD5s:
    """MD5s of consecutive ``every``-byte pieces of a byte stream fed in chunks of any size.

    The parts of a multipart ETag, whether the bytes come from a file (:func:`multipart_etag`) or from a
    ranged GET spanning several upload parts while it streams (``ranged.stream_into``).
    """

    def __init__(self, every: int):
        self._every = every
        self._digests: list[bytes] = []
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._filled = 0

    def update(self, chunk: bytes | memoryview) -> None:
        view = memoryview(chunk)
        while view:
            take = min(len(view), self._every - self._filled)
            self._md5.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self._every:
                self._digests.append(self._md5.digest())
                self._md5, self._filled = hashlib.md5(usedforsecurity=False), 0

    def digests(self) -> tuple[bytes, ...]:
        if self._filled or not self._digests:   # the shorter last piece; an empty stream is one empty piece
            return (*self._digests, self._md5.digest())
        return tuple(self._digests)


def multipart_etag(path: Path, part_size: int) -> str:
    """The ETag S3 gives ``path`` uploaded in parts of ``part_size`` (``<md5 of part md5s>-N``)."""
    parts = PartMD5s(part_size)
    for chunk in _iter_blocks(path):
        parts.update(chunk)
    return combine_part_md5s(parts.digests())


def combine_part_md5s(digests: Iterable[bytes]) -> str:
    """``<md5 of the concatenated part MD5s>-N``: S3's multipart ETag from the parts' binary MD5s."""
    parts = list(digests) or [hashlib.md5(b"", usedforsecurity=False).digest()]  # empty: one empty part
    combined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
    return f"{combined}-{len(parts)}"


def _crt_checksum(algorithm: str) -> Any | None:
    """botocore's awscrt-backed CRC32C/CRC64NVME when awscrt is installed, else None."""
    try:
        from botocore import httpchecksum
        cls = {"CRC32C": httpchecksum.CrtCrc32cChecksum, "CRC64NVME": httpchecksum.CrtCrc64NvmeChecksum}
        return cls[algorithm]()
    except Exception:  # awscrt missing: the algorithm is not computable here
        return None


def can_compute(algorithm: str) -> bool:
    return algorithm in ("CRC32", "SHA1", "SHA256") or _crt_checksum(algorithm) is not None


def full_object_checksum(path: Path, algorithm: str) -> str:
    """The base64 full-object checksum S3 would report for ``path`` with ``algorithm``."""
    if algorithm == "CRC32":
        crc = 0
        for chunk in _iter_blocks(path):
            crc = zlib.crc32(chunk, crc)
        return base64.b64encode(crc.to_bytes(4, "big")).decode()
    if algorithm in ("SHA1", "SHA256"):
        h = hashlib.new(algorithm.lower())
        for chunk in _iter_blocks(path):
            h.update(chunk)
        return base64.b64encode(h.digest()).decode()
    crt = _crt_checksum(algorithm)
    if crt is None:
        raise ValueError(f"cannot compute {algorithm} without awscrt")
    for chunk in _iter_blocks(path):
        crt.update(chunk)
    return base64.b64encode(crt.digest()).decode()


def full_checksum_of(head: dict[str, Any]) -> tuple[str, str] | None:
    """(algorithm, value) of a computable full-object checksum in a HEAD response, if there is one.

    A single-part object's checksum is always full-object; for multipart ones S3 says so with
    ``ChecksumType: FULL_OBJECT``.  Without that field we do not guess (COMPOSITE values are different).
    """
    kind = head.get("ChecksumType")
    for algorithm, field in CHECKSUM_FIELDS.items():
        value = head.get(field)
        if not value or "-" in value:
            continue
        if kind == "FULL_OBJECT" and can_compute(algorithm):
            return algorithm, value
    return None


def etag_is_opaque(head: dict[str, Any]) -> bool:
    """SSE-KMS and SSE-C objects have ETags that are not MD5 digests of the content."""
    return head.get("ServerSideEncryption") in ("aws:kms", "aws:kms:dsse") or bool(head.get("SSECustomerAlgorithm"))


def verify_download(path: Path, *, size: int, etag: str, head: HeadFn,
                    md5_of_stream: str | None = None, multipart_etag_of_stream: str | None = None) -> Verified:
    """Check ``path`` against the listed ``size`` and ``etag``; raise :class:`VerificationFailed`.

    ``head(**extra)`` performs a HEAD on the object (with e.g. ``ChecksumMode="ENABLED"`` or
    ``PartNumber=1``) and is only called when the ETag alone cannot decide.  ``md5_of_stream`` and
    ``multipart_etag_of_stream`` let a caller that hashed the bytes (whole, or in the upload's parts) while
    writing them skip re-reading the file; a multipart ETag matching that way needs no HEAD either (it is
    the same evidence the re-read would give).  When it does not match, the full procedure below runs.
    """
    actual = path.stat().st_size
    if actual != size:
        raise VerificationFailed(f"size {actual} != listed size {size}")

    if is_single_part_etag(etag):
        digest = md5_of_stream or md5_hex(path)
        if digest == etag:
            return Verified("md5", digest)
        return _fallback(path, head(ChecksumMode="ENABLED"), f"MD5 {digest} != ETag {etag}",
                         single_part=True)

    parts = multipart_parts(etag)
    if parts is not None and multipart_etag_of_stream == etag:
        return Verified("multipart-etag", etag)
    if parts is None:
        return _fallback(path, head(ChecksumMode="ENABLED"), f"ETag {etag!r} is not an MD5 form",
                         single_part=True)

    info = head(ChecksumMode="ENABLED")
    full = full_checksum_of(info)
    if full:
        return _check_full(path, *full)
    if etag_is_opaque(info):  # no point recomputing an ETag that is not an MD5 construction
        return _fallback(path, info, "opaque ETag", single_part=False)

    part_size = infer_part_size(size, parts)
    if part_size is not None:
        got = multipart_etag(path, part_size)
        if got == etag:
            return Verified("multipart-etag", got)
        log.debug("%s: inferred part size %d gave %s, asking S3 for part 1", path, part_size, got)
    first = head(PartNumber=1)
    part_size = int(first["ContentLength"])
    got = multipart_etag(path, part_size) if part_size > 0 else ""
    if got == etag:
        return Verified("multipart-etag", got)
    return _fallback(path, info, f"multipart ETag {got} (part size {part_size}) != {etag}",
                     single_part=False)


def _check_full(path: Path, algorithm: str, expected: str) -> Verified:
    got = full_object_checksum(path, algorithm)
    if got != expected:
        raise VerificationFailed(f"{algorithm} {got} != S3 checksum {expected}")
    return Verified(algorithm.lower(), got)


def _fallback(path: Path, info: dict[str, Any], mismatch: str, *, single_part: bool) -> Verified:
    """After an ETag mismatch: only acceptable when the ETag is opaque (SSE-KMS/SSE-C)."""
    if not etag_is_opaque(info):
        raise VerificationFailed(mismatch)
    kind = info.get("ChecksumType") or ("FULL_OBJECT" if single_part else None)
    full = full_checksum_of({**info, "ChecksumType": kind})
    if full:
        return _check_full(path, *full)
    log.warning("%s: encrypted object without a usable checksum; verified by size only", path)
    return Verified("size-only", str(path.stat().st_size))
