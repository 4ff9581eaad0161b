"""Planning a stage: list once, filter, refuse unsafe keys before anything is written, find what to skip.

Separate from the transfer (``stage.py``) because it is the layer every engine shares: whoever moves
the bytes (our own GETs or s5cmd), what is fetched, where it lands and what counts as already done is
decided here, from one listing snapshot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardprep.errors import ConfigError, InputDataError
from shardprep.staging.manifest import RemoteObject, VerifiedJournal, list_prefix, matches_filters
from shardprep.storage import keys as keymod
from shardprep.storage.s3.client import parse_s3_url, transfer_error

if TYPE_CHECKING:
    from shardprep.staging.options import StageOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageItem:
    obj: RemoteObject
    relative: str        # local path relative to the destination (POSIX form)


@dataclass
class StagePlan:
    """The outcome of listing and checking: what would be copied and what is already there."""

    source: str
    bucket: str
    todo: list[StageItem]
    skipped: list[StageItem]

    @property
    def todo_bytes(self) -> int:
        return sum(i.obj.size for i in self.todo)


def select_objects(listing: list[RemoteObject], prefix: str, include: tuple[str, ...],
                   exclude: tuple[str, ...]) -> list[tuple[RemoteObject, str]]:
    """(object, key below the prefix) for every non-folder object passing the filters."""
    chosen = []
    for obj in listing:
        rel = keymod.relative_key(obj.key, prefix)
        if keymod.is_directory_marker(rel, obj.size) or (rel == "" and obj.size == 0):
            continue
        if matches_filters(rel, include, exclude):
            chosen.append((obj, rel))
    return chosen


def check_destination(dest: Path) -> None:
    """DEST must be a directory, or not exist yet below a directory: refuse a file there (or on the way)
    with one line now, rather than a traceback once the first object arrives."""
    for path in (dest, *dest.absolute().parents):
        if path.is_dir():
            return
        if path.exists() or path.is_symlink():
            what = "DEST" if path == dest else f"DEST {dest}: its parent"
            raise ConfigError(f"{what} {path} is a file, not a directory", hint="name a directory to stage into")


def plan_stage(options: StageOptions, client: Any) -> StagePlan:
    """List once, filter, refuse unsafe keys (raising before anything is written), find what to skip."""
    from botocore.exceptions import BotoCoreError, ClientError

    check_destination(options.dest)
    loc = parse_s3_url(options.source, what="SOURCE")
    try:
        listing = list_prefix(client, loc.bucket, loc.prefix)
    except (BotoCoreError, ClientError) as e:
        raise transfer_error(e, what=f"listing {loc.url}") from e
    selected = select_objects(listing, loc.prefix, options.include, options.exclude)
    if not selected:
        raise InputDataError(f"no objects under {loc.url} match the filters "
                             f"({len(listing)} listed; include={list(options.include)} "
                             f"exclude={list(options.exclude)})")
    mapping, refused = keymod.plan_local_paths(rel for _, rel in selected)
    if refused:
        log.error("keys that cannot be staged safely:\n%s", keymod.format_refused(refused, limit=1000))
        shown = "; ".join(f"{r.key!r} ({r.reason})" for r in refused[:3])
        more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise InputDataError(f"{len(refused)} key(s) under {loc.url} would escape or collide in {options.dest}: "
                             f"{shown}{more}; nothing was written",
                             hint="leave them out with --exclude")
    cased = keymod.case_collisions(mapping)
    if cased:
        log.warning("%d group(s) of keys under %s differ only by letter case (one file on a case-insensitive "
                    "file system): %s", len(cased), loc.url, "; ".join(" / ".join(g) for g in cased[:5]))
    verified = VerifiedJournal(options.dest).load()
    todo, skipped = [], []
    for obj, rel in selected:
        item = StageItem(obj, str(mapping[rel]))
        rec = verified.get(obj.key)
        if rec is not None and rec.path == item.relative and rec.still_valid(obj, options.dest / item.relative):
            skipped.append(item)
        else:
            todo.append(item)
    return StagePlan(loc.url, loc.bucket, todo, skipped)
