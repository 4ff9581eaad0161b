"""The loader's options, decided once at the door: ``LoaderConfig``, the source, and the caller's placement.

``ShardDataset(path, mode="pack", seq_len=2048, seed=..., ...)`` keeps the keyword constructor streaming
and litdata users expect; ``from_keywords`` turns those keywords into three typed values and nothing past
it sees a keyword again:

- ``LoaderConfig``: the layout (``Pack``/``Pad``/``Doc``, ``loader.layout``), order and read options, and
  ``storage``, the one storage argument (``endpoint_url=``, ``s3=`` and ``storage_options=`` are folded
  into it here and nowhere else in the loader);
- the source (``source_from``): ``Dataset`` (a finalized output), a ``MixSpec`` (a mixture) or
  ``LegacyTars``, decided once from the path's shape;
- ``Placement``: ``rank=``/``world_size=``, which belong to the DataLoader (``make_dataloader`` takes
  them); the dataset only keeps them as the default its loader falls back on.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from shardprep.errors import ConfigError, InputDataError
from shardprep.loader.layout import ConversationPacking, Extras, Layout, layout_of
from shardprep.loader.mixture import MixSpec, mixture_spec
from shardprep.loader.world import Placement
from shardprep.shard.format import INDEX_FILE, JOB_FILE
from shardprep.storage.locations import StorageOptions, is_url

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.storage.s3.client import ClientOptions


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """Everything that decides which units a pass yields and how they are read, checked at construction.

    ``conversations``: how pack mode packs chat data (whole conversations per row); unused otherwise.

    ``shuffle_block`` (units; None: about 8M tokens' worth) and ``cache_bytes`` (None: 3 blocks, >= 64 MiB)
    are sized per dataset once it is open.  Frozen: it travels to DataLoader workers as is.
    """

    layout: Layout
    seed: int = 0
    shuffle: bool = True
    shuffle_block: int | None = None
    extras: Extras = Extras()
    cache_bytes: int | None = None
    verify: bool = False
    storage: StorageOptions = field(default_factory=StorageOptions)
    conversations: ConversationPacking = ConversationPacking()

    def __post_init__(self) -> None:
        if int(self.seed) < 0:
            raise ConfigError(f"seed={self.seed} is invalid: must be >= 0")
        if self.shuffle_block is not None and int(self.shuffle_block) < 1:
            raise ConfigError(f"shuffle_block={self.shuffle_block} is invalid: must be >= 1 (1 disables the buffer)")
        if not isinstance(self.storage, StorageOptions):
            raise ConfigError(f"storage={self.storage!r} is invalid: a StorageOptions "
                              f"(from shardprep.storage.locations import StorageOptions)")
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "shuffle", bool(self.shuffle))


# -- the source ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dataset:
    """A finalized output: a directory or URL prefix with index.json."""

    location: str


@dataclass(frozen=True)
class LegacyTars:
    """Hand-written ``token_ids.json`` tars (``loader.legacy``), already expanded to their paths."""

    paths: tuple[str, ...]


Source = Dataset | MixSpec | LegacyTars


def source_from(path: object, *, total_tokens: int | None = None, allow_tokenizer_mismatch: bool | None = None,
                storage: StorageOptions | None = None) -> Source:
    """What ``path`` names: a mixture (pairs, a dict, a ``MixSpec``, a spec file, or one dataset with
    ``total_tokens``), a finalized output, or legacy tars (a list, a directory, a glob, a ``.tar``)."""
    if isinstance(path, (Dataset, LegacyTars)):
        if total_tokens is None:
            return path
        # a budget makes a dataset a mixture of one (legacy tars are refused there, as a path to them is)
        path = [(path.location, 1.0)] if isinstance(path, Dataset) else list(path.paths)
    spec = mixture_spec(path, total_tokens=total_tokens, allow_tokenizer_mismatch=allow_tokenizer_mismatch,
                        storage=storage)
    if spec is not None:
        return spec
    if isinstance(path, (list, tuple)):
        return LegacyTars(tuple(str(p) for p in path))
    if not isinstance(path, (str, Path)):
        raise ConfigError(f"path={path!r}: expected a dataset (directory or URL), legacy tars, or a mixture")
    location = str(path)
    p = Path(location)
    if is_url(location) or p.is_dir() and (p / INDEX_FILE).exists():
        return Dataset(location)
    if p.is_dir() and (p / JOB_FILE).exists():
        raise InputDataError(f"{location} is a shardprep output without {INDEX_FILE}: the job is not finalized",
                             hint=f"run `shardprep status {location}` and `shardprep finalize {location}`")
    if p.is_dir() or glob.has_magic(location) or "{" in location or p.suffix == ".tar":
        from shardprep.loader.legacy import expand_legacy
        return LegacyTars(tuple(expand_legacy(location)))
    raise ConfigError(f"path={location!r}: no index.json there and not a directory, glob or .tar of legacy shards")


# -- the keyword door ------------------------------------------------------------------------------------
class LoaderKeywords(TypedDict, total=False):
    """``ShardDataset``'s keywords (docs/loader.md); each becomes part of one of the door's typed values."""

    mode: str
    seq_len: int | None
    pad_id: int | None
    seed: int
    shuffle: bool
    shuffle_block: int | None
    return_position_ids: bool
    return_doc_info: bool
    verify: bool
    cache_bytes: int | None
    storage: StorageOptions | None
    endpoint_url: str | None
    s3: ClientOptions | None
    storage_options: dict | None
    rank: int | None
    world_size: int | None
    total_tokens: int | None
    allow_tokenizer_mismatch: bool | None
    pack_window: int
    overflow: str


_SOURCE_KEYS = ("total_tokens", "allow_tokenizer_mismatch")
_PLACEMENT_KEYS = ("rank", "world_size")


def storage_from(storage: StorageOptions | None = None, *, endpoint_url: str | None = None,
                 s3: ClientOptions | None = None, storage_options: dict | None = None) -> StorageOptions:
    """The one storage argument; the older spellings fold into it, never beside it (which one would win?)."""
    older = {"endpoint_url": endpoint_url, "s3": s3, "storage_options": storage_options}
    given = [k for k, v in older.items() if v is not None]
    if storage is None:
        return StorageOptions.build(endpoint_url=endpoint_url, s3=s3, storage_options=storage_options)
    if given:
        raise ConfigError(f"storage=... and {given[0]}=... both given: put every storage option in "
                          f"storage=StorageOptions(s3=ClientOptions(...), fsspec={{...}}) only")
    return storage


def config_from(keywords: LoaderKeywords) -> LoaderConfig:
    """The ``LoaderConfig`` the option keywords describe (defaults as the keyword constructor's)."""
    kw: dict[str, Any] = dict(keywords)
    return LoaderConfig(
        layout=layout_of(kw.get("mode", "pack"), kw.get("seq_len"), kw.get("pad_id")),
        seed=kw.get("seed", 0), shuffle=kw.get("shuffle", True), shuffle_block=kw.get("shuffle_block"),
        extras=Extras(position_ids=bool(kw.get("return_position_ids", False)),
                      doc_info=bool(kw.get("return_doc_info", False))),
        cache_bytes=kw.get("cache_bytes"), verify=bool(kw.get("verify", False)),
        conversations=ConversationPacking(kw.get("pack_window", 1024), kw.get("overflow", "truncate")),
        storage=storage_from(kw.get("storage"), endpoint_url=kw.get("endpoint_url"), s3=kw.get("s3"),
                             storage_options=kw.get("storage_options")))


def from_keywords(path: object, config: LoaderConfig | None,
                  keywords: LoaderKeywords) -> tuple[Source, LoaderConfig, Placement]:
    """``ShardDataset``'s door: the source, the config and the placement, each decided here once.

    With ``config=`` the option keywords are refused (the config already says them); the source's
    (``total_tokens``, ``allow_tokenizer_mismatch``) and the placement's still apply.
    """
    unknown = sorted(set(keywords) - LoaderKeywords.__optional_keys__)
    if unknown:
        raise TypeError(f"ShardDataset() got an unexpected keyword argument {unknown[0]!r}")
    kw: dict[str, Any] = dict(keywords)
    placement = Placement(kw.pop("rank", None), kw.pop("world_size", None))
    source_kw = {k: kw.pop(k) for k in _SOURCE_KEYS if k in kw}
    if config is None:
        config = config_from(LoaderKeywords(**kw))     # type: ignore[typeddict-item]  # checked above
    elif kw:
        raise ConfigError(f"config=LoaderConfig(...) and {sorted(kw)[0]}= both given: set it in the config only")
    elif not isinstance(config, LoaderConfig):
        raise ConfigError(f"config={config!r} is invalid: a LoaderConfig")
    return source_from(path, storage=config.storage, **source_kw), config, placement
