"""What an upload's destination prefix already publishes, and what ``upload --replace`` deletes.

Why (issue 23): uploading a dataset onto a prefix that holds another one used to overwrite its shards
under its still-published index.json (readers got a mix, and the loader refused the old dataset), and a
finished upload left the old dataset's extra shards behind.  Now an upload first asks whether the prefix
holds *another* dataset: its index.json lists another plan or other shards, or (no index.json there) it
holds shard files that are not this upload's.  That is refused in one line unless ``--replace``, which
deletes the old index.json before anything is overwritten and the old dataset's leftover files (shardprep's
names only, and only those the filters select, as rsync spares excluded files) after the new index.json
is up.  Killed at any point, the prefix therefore holds either no index.json or one that names only
shards of its own plan; running the same command again finishes the job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from shardprep.errors import PlanConflictError, RecordError
from shardprep.shard.format import INDEX_FILE
from shardprep.staging.manifest import RemoteObject, matches_filters
from shardprep.storage.s3.client import transfer_error

log = logging.getLogger(__name__)


@dataclass
class Published:
    """The other dataset at the prefix (``foreign``: why it is another one; None: there is none)."""

    foreign: str | None = None
    index_key: str | None = None            # its index.json: deleted first by --replace
    leftovers: list[str] = field(default_factory=list)   # its files this upload does not overwrite: deleted last

    @property
    def deletions(self) -> list[str]:
        """Every key ``--replace`` deletes, in order."""
        return ([self.index_key] if self.index_key else []) + self.leftovers


def _identity(data: bytes, where: str) -> tuple | None:
    """What makes an index.json the same dataset: its plan and its shards (None: not a shardprep index)."""
    from shardprep.shard.index import Index

    try:
        index = Index.parse(data, where, check=False)      # which dataset, even one whose entries are broken
    except RecordError:
        return None
    return index.plan_fingerprint, tuple((s.name, s.sha256) for s in index.shards)


def _describe(identity: tuple | None) -> str:
    if identity is None:
        return "an index.json shardprep cannot read"
    return f"plan {identity[0][:12]}, {len(identity[1])} shard(s)"


def _index_differs(client: Any, bucket: str, key: str, local: Path | None, url: str) -> str | None:
    """Why the remote index.json at ``key`` is another dataset than ``local`` (None: the same one)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        remote = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (BotoCoreError, ClientError) as e:
        raise transfer_error(e, what=f"reading {url}{INDEX_FILE}") from e
    theirs = _identity(remote, f"{url}{INDEX_FILE}")
    ours = _identity(local.read_bytes(), str(local)) if local is not None else None
    if theirs is not None and theirs == ours:
        return None
    uploading = "a directory without index.json" if local is None else _describe(ours)
    return f"its {INDEX_FILE} lists another dataset ({_describe(theirs)}; uploading {uploading})"


def inspect_prefix(client: Any, bucket: str, prefix: str, remote: dict[str, RemoteObject], local: dict[str, Path],
                   identical: Callable[[str], bool], include: tuple[str, ...], exclude: tuple[str, ...]) -> Published:
    """The other dataset, if any, among the ``remote`` objects under ``prefix``.

    ``local``: relative path -> file of this upload; ``identical(rel)``: the remote object at ``rel``
    provably holds that file's bytes.
    """
    from shardprep.job.plan import written_by_shardprep

    url = f"s3://{bucket}/{prefix}"
    rels = {key[len(prefix):]: key for key in remote}
    leftovers = [key for rel, key in sorted(rels.items()) if rel not in local and rel != INDEX_FILE
                 and written_by_shardprep(rel) and matches_filters(rel, include, exclude)]
    index_key = rels.get(INDEX_FILE)
    if index_key is not None:
        if INDEX_FILE in local and identical(INDEX_FILE):
            return Published(leftovers=leftovers)
        why = _index_differs(client, bucket, index_key, local.get(INDEX_FILE), url)
        return Published(why, index_key if why else None, leftovers)
    stray = [rel for rel in sorted(rels) if _is_shard_file(rel) and (rel not in local or not identical(rel))]
    if stray:
        why = (f"it holds {len(stray)} shard file(s) that are not this upload's and no {INDEX_FILE} (e.g. "
               f"{', '.join(stray[:3])}): another dataset's, or an unfinished --replace")
        return Published(why, None, leftovers)
    return Published(leftovers=leftovers)


def _is_shard_file(rel: str) -> bool:
    from shardprep.job.plan import written_by_shardprep

    return "/" not in rel and rel.startswith("shard-") and written_by_shardprep(rel)


def refuse_or_announce(published: Published, url: str, *, replace: bool) -> None:
    """Refuse another dataset at the prefix unless ``replace``; say what will be deleted, or left behind."""
    if published.foreign and not replace:
        raise PlanConflictError(f"{url} already holds another dataset: {published.foreign}",
                                hint="upload to another prefix, or add --replace to replace it (its index.json is "
                                     "deleted first, its leftover files after the new index.json is up)")
    if replace and published.deletions:
        log.warning("--replace: deleting %d object(s) of the dataset at %s: %s first, the rest after the new %s",
                    len(published.deletions), url, published.deletions[0], INDEX_FILE)
    elif published.leftovers:
        log.warning("%s holds %d file(s) of shardprep's that this dataset does not have (e.g. %s); --replace "
                    "deletes them", url, len(published.leftovers), ", ".join(published.leftovers[:3]))
