"""Expand ``--input`` specs (files, directories, globs, ``@list`` files, object-store URLs) into a sorted list
of inputs.  A URL (``s3://``, ``gs://``, ``az://``, ``https://`` ...) is listed through its store by
``inputs.remote``; an ``@list`` may mix paths and URLs.

The result is recorded in job.json with size and mtime, so a task can detect an input that changed
after planning, and re-planning the same inputs always yields the same order.

A directory written by Hugging Face ``Dataset.save_to_disk`` counts as its ``data-*.arrow`` files, in the
order its ``state.json`` lists them (see ``inputs.arrow``); other ``.arrow`` files are inputs only when
named explicitly.

Symbolic links are followed, but by real path: a directory is walked once however many links lead to
it, a link to one of its own ancestors (a loop) is not followed, and a file reached by several paths is
planned once (under the first of its paths in sorted order).  Loops and duplicates are reported as a
warning naming them; ``strict`` makes a loop an error (a duplicate stays a warning: it loses nothing).

shardprep's own outputs are never inputs: a directory holding a shardprep ``job.json`` (and everything
under it) is left out, with one log line naming the directories.  Why: an output directory inside an input
directory (``-i data -o data/shards``) would otherwise plan its own ``plan/tasks.jsonl`` as an input on the
next run, and the same command would then be refused as a different plan.
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from shardprep.errors import InputDataError
from shardprep.inputs import arrow
from shardprep.inputs.remote import expand_url, is_input_url, remote_inputs
from shardprep.records import NOT_WRITTEN, OMIT_NONE, Record
from shardprep.storage.locations import StorageOptions, is_url
from shardprep.storage.objects import ObjectInfo

log = logging.getLogger(__name__)

COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".zstd": "zst"}
FORMATS = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
           ".arrow": "arrow"}
SPLITTABLE = ("txt", "jsonl")  # uncompressed only: byte ranges need random access
TABULAR = ("parquet", "arrow")  # planned and read by row ranges
PLAN_FILE = "job.json"          # a shardprep output's frozen plan (shard.format.JOB_FILE; this layer is below it)


@dataclass(frozen=True)
class InputFile(Record):
    """One input as planned.  ``path`` is an absolute path, or the URL of a remote object (issue 22), whose
    ``identity`` (ETag, version, generation: ``storage.objects``) the plan freezes with its size.

    ``storage`` is how a remote object is reached (its store's options: the plan's, which job.json records
    and a task hands back with :meth:`reached_with`): every reader opens it through its store with them, so
    no process-wide default is needed.  It is context, not the record: never written, compared or
    fingerprinted."""

    path: str
    size: int
    mtime_ns: int
    format: str               # txt | jsonl | parquet | arrow
    compression: str | None   # None | gz | zst
    rows: int | None = None   # parquet/arrow: total rows (for row-range splitting)
    # a remote object's identity; None for files (absent from their records)
    identity: str | None = field(default=None, metadata=OMIT_NONE)
    storage: StorageOptions | None = field(default=None, compare=False, repr=False, metadata=NOT_WRITTEN)

    @classmethod
    def from_dict(cls, d: dict) -> "InputFile":
        return cls(**d)

    def reached_with(self, storage: StorageOptions | None) -> "InputFile":
        """This input reached with ``storage`` (a remote one; a file needs no store options)."""
        return replace(self, storage=storage) if storage is not None and is_url(self.path) else self

    @property
    def splittable(self) -> bool:
        return self.compression is None and self.format in SPLITTABLE

    @property
    def tabular(self) -> bool:
        return self.format in TABULAR


def classify(path: str) -> tuple[str, str | None] | None:
    """Return (format, compression) from the file name, or None when it is not a known input type."""
    name = path.lower()
    comp = None
    for suffix, c in COMPRESSIONS.items():
        if name.endswith(suffix):
            comp, name = c, name[: -len(suffix)]
            break
    for suffix, fmt in FORMATS.items():
        if name.endswith(suffix):
            if fmt in TABULAR and comp:
                return None  # parquet and arrow compress internally
            return fmt, comp
    return None


def _stat_input(path: str, fmt: str, comp: str | None) -> InputFile:
    try:
        st = os.stat(path)
        with open(path, "rb"):
            pass
    except OSError as e:
        raise InputDataError(f"input {path} is not readable: {e.strerror}") from None
    rows = None
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as e:  # pyarrow raises several types for junk files
            raise InputDataError(f"input {path} is not a readable parquet file: {e}") from None
    elif fmt == "arrow":
        rows = arrow.count_rows(path)
    return InputFile(os.path.abspath(path), st.st_size, st.st_mtime_ns, fmt, comp, rows)


@dataclass
class LinkReport:
    """What following symbolic links ran into: loops not followed, and paths that reached a seen target."""

    loops: dict[str, str] = field(default_factory=dict)        # link -> the ancestor it points at
    duplicates: dict[str, str] = field(default_factory=dict)   # path not used -> the path planned instead

    def warn(self, strict: bool) -> None:
        """Log one warning per kind (naming the first few); a loop under ``strict`` is an InputDataError."""
        if self.loops:
            named = "; ".join(f"{link} -> {target}" for link, target in list(self.loops.items())[:5])
            if strict:
                raise InputDataError(f"symlink loop in the inputs: {named} (--strict)",
                                     hint="remove the link or name the directories you mean explicitly")
            log.warning("input discovery: %d symlink loop(s) not followed: %s", len(self.loops), named)
        if self.duplicates:
            named = "; ".join(f"{p} (same as {kept})" for p, kept in list(self.duplicates.items())[:5])
            log.warning("input discovery: %d path(s) lead to a file or directory already found, planned once: %s",
                        len(self.duplicates), named)


def is_plan_bytes(data: bytes) -> bool:
    """Are these the bytes of a shardprep ``job.json`` (a file or an object read whole)?  Not JSON: no."""
    import orjson

    try:
        return is_shardprep_plan(orjson.loads(data))
    except ValueError:
        return False


def is_shardprep_plan(record: Any) -> bool:
    """Is this parsed ``job.json`` one shardprep wrote (plan format 2: ``created_by``; format 1 had no such
    field but held ``fingerprint``, ``inputs`` and ``tasks``)?"""
    return isinstance(record, dict) and (str(record.get("created_by", "")).startswith("shardprep")
                                         or {"fingerprint", "inputs", "tasks"} <= record.keys())


@dataclass
class OutputDirs:
    """Which directories are shardprep outputs (hold a shardprep ``job.json``): each directory is read once."""

    owners: dict[str, str | None] = field(default_factory=dict)   # directory -> the output it lies in
    found: dict[str, None] = field(default_factory=dict)          # output directories met, in order

    def holds_plan(self, directory: str) -> bool:
        try:
            with open(os.path.join(directory, PLAN_FILE), "rb") as f:
                return is_plan_bytes(f.read(1 << 20))
        except OSError:                     # none there, or unreadable: not one of ours
            return False

    def owner_of_dir(self, directory: str) -> str | None:
        """The output directory ``directory`` (absolute) is or lies in, or None."""
        if directory in self.owners:
            return self.owners[directory]
        parent = os.path.dirname(directory)
        owner = directory if self.holds_plan(directory) else None if parent == directory else self.owner_of_dir(parent)
        self.owners[directory] = owner
        return owner

    def owner(self, path: str) -> str | None:
        """The output directory file ``path`` lies in (a directory above it holds a shardprep plan), or None."""
        owner = self.owner_of_dir(os.path.dirname(os.path.abspath(path)))
        if owner is not None:
            self.found.setdefault(owner)
        return owner

    def log(self) -> None:
        if self.found:
            named = ", ".join(list(self.found)[:5]) + (" ..." if len(self.found) > 5 else "")
            log.info("input discovery: left out %d shardprep output director%s (never inputs): %s",
                     len(self.found), "y" if len(self.found) == 1 else "ies", named)


def _is_within(path: str, ancestor: str) -> bool:
    """``path`` is ``ancestor`` or below it (both real, absolute paths)."""
    return path == ancestor or path.startswith(ancestor.rstrip(os.sep) + os.sep)


def _walked_anyway(real: str, top_real: str) -> bool:
    """Would the walk of ``top_real`` reach directory ``real`` without following any link?"""
    if not _is_within(real, top_real):
        return False
    return not any(part.startswith(".") for part in Path(os.path.relpath(real, top_real)).parts)


def _walk(directory: str, links: LinkReport, outputs: OutputDirs) -> Iterable[tuple[str, bool]]:
    """(path, explicit) for files under ``directory``; a saved dataset's data files count as explicit.

    Follows links to directories once each by real path; loops and repeats are pruned into ``links``;
    shardprep output directories are not entered (``outputs`` records them).
    """
    top_real = os.path.realpath(directory)
    visited = {top_real}
    for root, dirs, files in os.walk(directory, followlinks=True):
        owner = outputs.owner_of_dir(os.path.abspath(root))
        if owner is not None:            # a shardprep output, never an input
            outputs.found.setdefault(owner)
            dirs[:] = []
            continue
        if arrow.is_saved_dataset(root):
            dirs[:] = []
            yield from ((p, True) for p in arrow.saved_dataset_files(root))
            continue
        root_real = os.path.realpath(root)
        keep = []
        for d in sorted(d for d in dirs if not d.startswith(".")):
            path = os.path.join(root, d)
            real = os.path.realpath(path)
            if _is_within(root_real, real):        # points at itself or an ancestor
                links.loops[path] = real
            elif real in visited or (os.path.islink(path) and _walked_anyway(real, top_real)):
                links.duplicates[path] = real
            else:
                visited.add(real)
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if not f.startswith("."):
                yield os.path.join(root, f), False


def _loop_link(path: str) -> tuple[str, str] | None:
    """The first directory link on ``path`` that points at one of its own ancestors (glob matches only:
    ``**`` follows such a link until the kernel's ELOOP), as (link, target)."""
    parent = os.path.dirname(os.path.abspath(path))
    prefix = os.sep
    for part in Path(parent).parts[1:]:
        here = os.path.join(prefix, part)
        if os.path.islink(here):
            real = os.path.realpath(here)
            if _is_within(os.path.realpath(prefix), real):
                return here, real
        prefix = here
    return None


def _expand_one(spec: str, links: LinkReport, outputs: OutputDirs, remote: dict[str, ObjectInfo],
                storage: StorageOptions | None) -> list[tuple[str, bool]]:
    """(path, explicit) pairs; explicit paths must be known input types, walked ones may be skipped.
    A URL's objects are listed once (``inputs.remote``, reached with ``storage``); their listing records go
    to ``remote``."""
    if is_input_url(spec):
        return expand_url(spec, remote, storage)
    if spec.startswith("@"):
        list_file = spec[1:]
        try:
            lines = Path(list_file).read_text().splitlines()
        except OSError as e:
            raise InputDataError(f"input list {list_file} is not readable: {e.strerror}") from None
        base = os.path.dirname(os.path.abspath(list_file))
        out = []
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if line and not line.startswith("#"):
                p = line if os.path.isabs(line) or is_input_url(line) else os.path.join(base, line)
                if not is_input_url(p) and not os.path.exists(p):
                    raise InputDataError(f"{list_file}:{n}: listed input {line} does not exist")
                out.extend(_expand_one(p, links, outputs, remote, storage))
        return out
    if os.path.isdir(spec):
        splits = arrow.saved_dataset_splits(spec)
        if splits is not None:
            raise InputDataError(f"input {spec} is a DatasetDict saved with save_to_disk (splits: {', '.join(splits)})",
                                 hint=f"pass one split's directory, e.g. {os.path.join(spec, splits[0] if splits else 'train')}")
        return list(_walk(spec, links, outputs))
    if any(ch in spec for ch in "*?["):
        matches = sorted(glob.glob(spec, recursive=True))
        if not matches:
            raise InputDataError(f"input glob {spec!r} matches no files")
        out = []
        for p in matches:
            loop = _loop_link(p) if os.path.isfile(p) else None
            if loop:
                links.loops.setdefault(*loop)
            elif os.path.isfile(p):
                out.append((p, True))
        return out
    if not os.path.exists(spec):
        raise InputDataError(f"input {spec} does not exist")
    return [(spec, True)]


def discover_inputs(specs: Iterable[str], *, strict: bool = False,
                    storage: StorageOptions | None = None) -> list[InputFile]:
    """All inputs named by ``specs``, de-duplicated by real path and sorted by path; URLs are listed and
    read with ``storage`` (None: the environment's), which their ``InputFile``s carry.

    Raises InputDataError when nothing usable is found, a named file is of an unknown type, a file
    cannot be read, or (``strict``) a symlink loop was met.
    """
    seen: dict[str, InputFile] = {}   # real path (a URL: itself) -> input (under its smallest path)
    links = LinkReport()
    outputs = OutputDirs()
    remote: dict[str, ObjectInfo] = {}  # URL -> what its listing said
    objects: dict[str, tuple[ObjectInfo, str, str | None]] = {}    # URL -> its listing, format, compression
    ignored = 0
    specs = list(specs)
    for spec in specs:
        for path, explicit in _expand_one(str(spec), links, outputs, remote, storage):
            if path not in remote and outputs.owner(path) is not None:
                continue
            kind = classify(path)
            if kind is not None and kind[0] == "arrow" and not explicit:
                kind = None  # loose .arrow files in a walk are usually caches, not data
            if kind is None:
                if explicit:
                    raise InputDataError(
                        f"input {path}: unknown file type; expected .txt, .jsonl, .parquet, .arrow "
                        f"(txt/jsonl optionally .gz or .zst) or a save_to_disk directory"
                    )
                ignored += 1
                continue
            if path in remote:
                objects.setdefault(path, (remote[path], *kind))
                continue
            real = os.path.realpath(path)
            known = seen.get(real)
            if known is not None and known.path == os.path.abspath(path):
                continue  # the same path named twice: not worth a warning
            inp = _stat_input(path, *kind)
            if known is None:
                seen[real] = inp
            else:
                first, second = sorted((known, inp), key=lambda i: i.path)
                seen[real] = first
                links.duplicates[second.path] = first.path
    seen.update((inp.path, inp) for inp in remote_inputs(list(objects.values()), storage))
    links.warn(strict)
    outputs.log()
    if ignored:
        log.info("ignored %d file(s) of unknown type under the input directories", ignored)
    if not seen:
        raise InputDataError(f"no input files found in {', '.join(specs) or '(nothing given)'}")
    return sorted(seen.values(), key=lambda i: i.path)
