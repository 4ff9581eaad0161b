"""``--input`` URLs (issue 22): objects in ``s3://``, ``gs://``, ``az://``/``abfs://`` and ``http(s)://`` stores as
inputs, with no staging copy.

A URL names one object, a "directory" (every object under ``URL/``), or a glob on the key (``*`` and ``?``
within one path segment, ``**`` across segments, ``[...]`` classes, as ``glob.glob(recursive=True)``).
Each spec costs one listing of its longest literal prefix through the store (``RemoteStore.walk``: one
paginated LIST on S3, GCS and Azure; HTTP has no listings, so an ``http(s)://`` URL names exactly one file,
checked with one HEAD).  The listing gives each object's size and identity, which the plan freezes.

As for local directories: names starting with ``.`` are skipped below the listed prefix, zero-byte
``folder/`` markers are not objects, and a prefix holding a shardprep ``job.json`` (an uploaded output)
is never an input.  Arrow files are read memory-mapped, from local disks only: a remote one is refused.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from shardprep.errors import InputDataError, ShardprepError
from shardprep.storage.locations import StorageOptions, remote_store_for, scheme
from shardprep.storage.objects import ObjectInfo

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.discover import InputFile

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
CONCURRENCY = 16            # objects read at once while planning (parquet footers, jsonl heads)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_GLOB = re.compile(r"[*?\[]")
UNSAFE_SHOWN = 5            # unsafe keys named in the warning (and how many more)


def is_input_url(spec: str) -> bool:
    """``scheme://...``: an object store URL, not a path."""
    return _URL.match(spec) is not None


def glob_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` (a URL with glob characters in its key) as a regular expression over whole URLs, with
    ``glob.glob(recursive=True)``'s meaning: ``**`` as a whole segment spans any number of directories
    (none included), anywhere else it is ``*``; ``*``, ``?`` and ``[...]`` stay within a segment."""
    out, i = [], 0
    while i < len(pattern):
        whole = i == 0 or pattern[i - 1] == "/"
        if whole and pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif whole and pattern.startswith("**", i) and i + 2 == len(pattern):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 2 if pattern.startswith("**", i) else 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1:close].replace("\\", "\\\\")
            body = "^" + body[1:] if body[0] == "!" else "\\" + body if body[0] == "^" else body
            out.append("(?!/)[" + body + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def _hidden(url: str, root: str) -> bool:
    """A name below the listed ``root`` starts with ``.`` (or is a ``folder/`` marker)."""
    rest = url[len(root):].strip("/")
    return url.endswith("/") or any(part.startswith(".") for part in rest.split("/"))


def _shown(infos: list[ObjectInfo], root: str) -> list[ObjectInfo]:
    """``infos`` without the hidden names below ``root``.  A hidden key that ``stage`` would also refuse
    (``raw/../x.txt``, ``raw/./y.txt``: not a dot-file but a path trick; ``storage.keys.key_problem``, the
    same test) is named in a warning with the count, never left out without a word."""
    from shardprep.storage.keys import key_problem

    shown, unsafe = [], []
    for info in infos:
        if not _hidden(info.url, root):
            shown.append(info)
        elif not info.url.endswith("/") and (problem := key_problem(info.url[len(root):])):
            unsafe.append(f"{info.url} ({problem})")
    if unsafe:
        more = f", ... ({len(unsafe) - UNSAFE_SHOWN} more)" if len(unsafe) > UNSAFE_SHOWN else ""
        log.warning("input %s: left out %d object(s) whose key is not a safe path (`stage` refuses them too): "
                    "%s%s", root, len(unsafe), ", ".join(unsafe[:UNSAFE_SHOWN]), more)
    return shown


def _outputs(infos: list[ObjectInfo], storage: StorageOptions | None) -> list[str]:
    """Prefixes (ending in ``/``) that hold a shardprep plan, read from the ``job.json`` objects listed."""
    from shardprep.inputs.discover import PLAN_FILE, is_plan_bytes

    found = []
    for info in infos:
        if info.url.rsplit("/", 1)[-1] == PLAN_FILE and info.size < (1 << 20):
            try:
                data = remote_store_for(info.url, storage).read_bytes(info.url)
            except (OSError, ValueError, ShardprepError):     # unreadable: not one of ours
                continue
            if is_plan_bytes(data):
                found.append(info.url[:-len(PLAN_FILE)])
    return found


def _listed(spec: str, storage: StorageOptions | None) -> tuple[list[ObjectInfo], bool]:
    """(the objects ``spec`` names, whether it named them explicitly: one object or a glob)."""
    store = remote_store_for(spec, storage)
    glob = _GLOB.search(spec, len(scheme(spec)) + 3)
    if glob and scheme(spec) in ("http", "https"):
        raise InputDataError(f"input {spec}: an HTTP server has no listings to match a glob against",
                             hint="name each file, e.g. in an @FILE list")
    try:
        if glob:
            root = spec[:spec.rfind("/", 0, glob.start()) + 1]
            rx = glob_regex(spec)
            infos = _shown([i for i in store.walk(root) if rx.fullmatch(i.url)], root)
            if not infos:
                raise InputDataError(f"input glob {spec!r} matches no objects")
            return infos, True
        infos = list(store.walk(spec))
    except FileNotFoundError as e:
        raise InputDataError(f"input {spec} does not exist ({e})") from None
    exact = [i for i in infos if i.url == spec and not spec.endswith("/")]
    if exact:
        return exact, True
    root = spec.rstrip("/") + "/"
    under = _shown([i for i in infos if i.url.startswith(root)], root)
    if not under:
        raise InputDataError(f"input {spec} does not exist (no object of that name, nor any under {root})")
    return under, False


def expand_url(spec: str, found: dict[str, ObjectInfo], storage: StorageOptions | None) -> list[tuple[str, bool]]:
    """(url, explicit) for the objects ``spec`` names (listed with ``storage``), in URL order; their listing
    records go to ``found``."""
    infos, explicit = _listed(spec, storage)
    outputs = _outputs(infos, storage)
    if outputs:
        log.info("input discovery: left out %d shardprep output prefix(es) (never inputs): %s", len(outputs),
                 ", ".join(outputs[:5]))
        infos = [i for i in infos if not any(i.url.startswith(o) for o in outputs)]
    for info in infos:
        found[info.url] = info
    return [(info.url, explicit) for info in infos]


def in_parallel(work: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[work(i) for i in items]``, ``CONCURRENCY`` requests at a time when there are several: a plan of
    thousands of objects waits for one round trip per ``CONCURRENCY`` of them, not per object."""
    if len(items) < 2:
        return [work(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(CONCURRENCY, len(items)), thread_name_prefix="shardprep-plan") as pool:
        return list(pool.map(work, items))


def remote_inputs(objects: Sequence[tuple[ObjectInfo, str, str | None]],
                  storage: StorageOptions | None) -> list["InputFile"]:
    """The planned records of listed objects, (listing, format, compression) each (``remote_input``); the
    parquet footers are read several at once."""
    parquet = [o for o in objects if o[1] == "parquet"]
    return ([remote_input(*o, storage) for o in objects if o[1] != "parquet"]
            + in_parallel(lambda o: remote_input(*o, storage), parquet))


def remote_input(info: ObjectInfo, fmt: str, compression: str | None,
                 storage: StorageOptions | None) -> "InputFile":
    """The planned record of a listed object, reached with ``storage`` (a parquet object's rows read from its
    footer)."""
    from shardprep.inputs.discover import InputFile
    from shardprep.inputs.planned import OpenInput, parquet_file

    if fmt == "arrow":
        raise InputDataError(f"input {info.url}: Arrow files are read memory-mapped from a local disk only",
                             hint="stage them (`shardprep stage`), or name parquet/jsonl objects instead")
    inp = InputFile(info.url, info.size, info.mtime_ns, fmt, compression, None, info.identity, storage)
    if fmt != "parquet":
        return inp
    with OpenInput(inp) as opened:
        rows = parquet_file(opened).metadata.num_rows
    return replace(inp, rows=rows)
