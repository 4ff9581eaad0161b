"""Mapping S3 keys to local paths without ever escaping the destination.

S3 keys are arbitrary strings: ``data/../evil.txt``, ``/etc/passwd``, ``a//b`` and ``a/./b`` are all valid
keys and are listed verbatim.  Written naively under a destination directory they escape it, land on
surprising paths, or two keys land on the same file.  This module decides, as pure functions over the
complete listing, which keys are safe, *before* anything is written: a stage either writes every selected
key to its own path inside the destination or writes nothing and reports the offending keys.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Iterable

# Linux limits (NAME_MAX, PATH_MAX); Lustre uses the same.
MAX_SEGMENT_BYTES = 255
MAX_PATH_BYTES = 4000  # leaves room for the destination prefix under PATH_MAX = 4096


@dataclass(frozen=True)
class RefusedKey:
    """A key that cannot be staged, with the reason shown to the user."""

    key: str
    reason: str


def relative_key(key: str, prefix: str) -> str:
    """The part of ``key`` below ``prefix`` (the listing only returns keys that start with it)."""
    if not key.startswith(prefix):
        raise ValueError(f"key {key!r} is not under prefix {prefix!r}")
    return key[len(prefix):]


def is_directory_marker(relative: str, size: int) -> bool:
    """Zero-byte keys ending in ``/`` are "folders" created by consoles; they carry no data."""
    return relative.endswith("/") and size == 0


def key_problem(relative: str) -> str | None:
    """Why ``relative`` (a key below the prefix) cannot become a local path, or None when it can."""
    if relative == "":
        return "empty name (the key equals the prefix)"
    if "\x00" in relative:
        return "contains a NUL byte"
    if relative.startswith("/"):
        return "absolute path"
    segments = relative.split("/")
    for seg in segments:
        if seg == "":
            return "empty path segment ('//' or a trailing '/')"
        if seg in (".", ".."):
            return f"'{seg}' path segment"
        if len(seg.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            return f"path segment longer than {MAX_SEGMENT_BYTES} bytes"
    if len(relative.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"path longer than {MAX_PATH_BYTES} bytes"
    return None


def normalised(relative: str) -> str:
    """The form two keys are compared in for collisions.

    NFC because the same visible name can be spelt with composed or decomposed characters (``é`` vs
    ``e`` + combining accent); on Linux they are different files, but a user (and macOS clients of the
    same data) sees one name, so staging both silently is a trap.
    """
    return unicodedata.normalize("NFC", relative)


def plan_local_paths(relatives: Iterable[str]) -> tuple[dict[str, PurePosixPath], list[RefusedKey]]:
    """Map each safe relative key to a relative local path; return the refused ones separately.

    Refused: keys with a :func:`key_problem`, keys equal after :func:`normalised`, and keys whose path is
    also a directory of another key (``a`` and ``a/b`` cannot both exist on a POSIX file system).
    """
    relatives = list(dict.fromkeys(relatives))  # a listing has unique keys; be safe with repeats
    refused: list[RefusedKey] = []
    safe: list[str] = []
    for rel in relatives:
        problem = key_problem(rel)
        if problem:
            refused.append(RefusedKey(rel, problem))
        else:
            safe.append(rel)

    by_norm: dict[str, list[str]] = {}
    for rel in safe:
        by_norm.setdefault(normalised(rel), []).append(rel)
    colliding = {rel for group in by_norm.values() if len(group) > 1 for rel in group}
    for rel in sorted(colliding):
        others = [o for o in by_norm[normalised(rel)] if o != rel]
        refused.append(RefusedKey(rel, f"same name after Unicode normalisation as {others[0]!r}"))

    # A file path that is also a parent directory of another key.
    directories: set[str] = set()
    for norm in by_norm:
        parts = norm.split("/")
        for i in range(1, len(parts)):
            directories.add("/".join(parts[:i]))
    for rel in safe:
        if rel not in colliding and normalised(rel) in directories:
            refused.append(RefusedKey(rel, "is both a file and the directory of other keys"))

    refused_keys = {r.key for r in refused}
    mapping = {rel: PurePosixPath(rel) for rel in safe if rel not in refused_keys}
    return mapping, refused


def case_collisions(relatives: Iterable[str]) -> list[list[str]]:
    """Groups of keys equal but for letter case.  Staged anyway (they are different files on Linux and
    Lustre) but worth a warning: copied on to a case-insensitive file system (macOS, Windows shares) they
    become one file, silently."""
    groups: dict[str, list[str]] = {}
    for rel in relatives:
        groups.setdefault(normalised(rel).casefold(), []).append(rel)
    return [sorted(g) for _, g in sorted(groups.items()) if len(g) > 1]


def format_refused(refused: list[RefusedKey], *, limit: int = 20) -> str:
    """A readable multi-line list for the error message (longest listings are truncated)."""
    lines = [f"  {r.key!r}: {r.reason}" for r in refused[:limit]]
    if len(refused) > limit:
        lines.append(f"  ... and {len(refused) - limit} more")
    return "\n".join(lines)
