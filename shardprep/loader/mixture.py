"""A mixture of finalized outputs: the spec, its checks, and the sizes and schedule of a run.

A spec is several sources with **token** weights, given in Python (``[("s3://b/web", 0.6), ("/fsx/code",
0.3), ...]``, or dicts with ``path``, ``weight`` and an optional ``name``) or as a small JSON or YAML file
a training config points to::

    {"sources": [{"name": "web", "path": "s3://b/web", "weight": 0.6},
                 {"name": "code", "path": "/fsx/code", "weight": 0.3},
                 {"name": "math", "path": "math", "weight": 0.1}],
     "total_tokens": 1000000000000}

(relative paths are relative to the spec file).  Everything here reads only ``index.json`` of each source
(through ``loader.index.load_index``), so ``shardprep mix`` and a login node need no torch.  What cannot
mix is refused in one line naming the source: a weight <= 0, a source without index.json, the same data
twice, and a different tokenizer (fingerprint, vocabulary or EOS id) unless ``allow_tokenizer_mismatch``.
Different id dtypes mix (the loader widens ids to the widest).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Hashable, SupportsFloat, cast

import numpy as np
import orjson

from shardprep.errors import ConfigError, InputDataError, ShardprepError
from shardprep.loader.index import DatasetIndex, load_index
from shardprep.loader.layout import Layout, Pack
from shardprep.loader.schedule import Schedule, prefix_bound, quotas, window_bound
from shardprep.storage.locations import StorageOptions, is_url, join, read_bytes

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
_SPEC_KEYS = ("sources", "total_tokens", "allow_tokenizer_mismatch")
_SOURCE_KEYS = ("name", "path", "weight")
MAX_TOKENS = 2 ** 62        # total_tokens at most: positions (rows, documents) and draws stay within int64


@dataclass(frozen=True)
class MixSource:
    name: str
    location: str
    weight: float


@dataclass(frozen=True)
class MixSpec:
    """What to mix; ``origin`` names where it came from (a spec file, or ``sources``) in error messages."""

    sources: tuple[MixSource, ...]
    total_tokens: int | None = None
    allow_tokenizer_mismatch: bool = False
    origin: str = "sources"


def is_spec_file(path: object) -> bool:
    """A mixture spec file: a ``.json``/``.yaml``/``.yml`` path or URL (a dataset is a directory)."""
    return isinstance(path, (str, Path)) and PurePosixPath(str(path)).suffix.lower() in SPEC_SUFFIXES


def _is_weight(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_pair(item: object) -> bool:
    return isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (str, Path)) and \
        _is_weight(item[1])


def mixture_spec(path: Any, *, total_tokens: int | None = None, allow_tokenizer_mismatch: bool | None = None,
                 storage: StorageOptions | None = None) -> MixSpec | None:
    """The mixture ``path`` describes, or None for a single dataset (a directory, URL or legacy tars).

    ``total_tokens`` and ``allow_tokenizer_mismatch`` given here override the spec's; a single dataset
    with ``total_tokens`` is a mixture of one (read to that budget, repeating it as needed).
    """
    if isinstance(path, MixSpec) and not path.sources or isinstance(path, (list, tuple)) and not path:
        raise ConfigError(f"{'sources' if isinstance(path, MixSpec) else 'path'}=[] is empty: give a finalized "
                          f"output (directory or URL), legacy tars, or a mixture of (path, weight) pairs")
    if isinstance(path, MixSpec):
        spec = path
    elif isinstance(path, dict) or (isinstance(path, (list, tuple))            # any pair: a mixture, checked
                                    and any(_is_pair(x) or isinstance(x, dict) for x in path)):
        spec = parse_spec(path if isinstance(path, dict) and "sources" in path else {"sources": path}, "sources")
    elif is_spec_file(path):
        spec = load_spec(str(path), storage=storage)
    elif total_tokens is not None and isinstance(path, (str, Path)):
        spec = parse_spec({"sources": [(str(path), 1.0)]}, "path")
    elif total_tokens is not None:
        raise ConfigError(f"total_tokens={total_tokens} needs finalized outputs (a directory or URL with index.json, "
                          f"or a mixture of them), not {type(path).__name__} {path!r}")
    else:
        return None
    if total_tokens is not None:
        spec = replace(spec, total_tokens=_positive_int(total_tokens, "total_tokens", spec.origin))
    if allow_tokenizer_mismatch is not None:
        spec = replace(spec, allow_tokenizer_mismatch=bool(allow_tokenizer_mismatch))
    return spec


def load_spec(location: str, *, storage: StorageOptions | None = None) -> MixSpec:
    """Read a JSON or YAML spec file; relative source paths are taken relative to its directory."""
    try:
        data = read_bytes(location, storage=storage)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise ConfigError(f"{location}: mixture spec file does not exist") from None
    try:
        if location.lower().endswith(".json"):
            obj = json.loads(data, object_pairs_hook=_unique_keys)
        else:
            obj = _yaml_unique(data)
    except ShardprepError:
        raise
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError, a duplicate key: one line, naming the file
        raise ConfigError(f"{location}: not a valid mixture spec: {str(e).splitlines()[0]}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{location}: a mixture spec is an object with 'sources' (got {type(obj).__name__})")
    base = str(location).rsplit("/", 1)[0] if is_url(location) else str(Path(location).parent)
    return parse_spec(obj, location, base=base)


class DuplicateKey(ValueError):
    """A key given twice in one object of a spec file: JSON and YAML parsers keep the last value silently,
    so a second ``weight`` would quietly replace the first.  Refused, naming the key (and its line)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _yaml_unique(data: bytes) -> Any:
    """``yaml.safe_load`` with every mapping's own keys unique (merged ``<<`` keys may still be overridden)."""
    from shardprep._extras import require

    yaml = require("yaml", feature="YAML mixture specs")

    class Loader(yaml.SafeLoader):  # type: ignore[name-defined]  # yaml is imported at run time
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = None if key_node.tag == "tag:yaml.org,2002:merge" else self.construct_object(key_node, deep)
                if key is not None and isinstance(key, Hashable):
                    if key in seen:
                        raise DuplicateKey(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return yaml.load(data, Loader=Loader)  # noqa: S506 - a SafeLoader


def parse_spec(obj: dict, origin: str, *, base: str | None = None) -> MixSpec:
    """Check and normalize a spec object (``{"sources": [...], ...}``)."""
    unknown = sorted(set(obj) - set(_SPEC_KEYS))
    if unknown:
        raise ConfigError(f"{origin}: unknown key {unknown[0]!r} in the mixture spec (known: {', '.join(_SPEC_KEYS)})")
    raw = obj.get("sources")
    if isinstance(raw, dict):
        raw = list(raw.items())
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ConfigError(f"{origin}: 'sources' must be a non-empty list of {{path, weight}} entries")
    sources = _named(tuple(_source(item, n, origin, base) for n, item in enumerate(raw)))
    names = [s.name for s in sources]
    for s in sources:
        if names.count(s.name) > 1:
            raise ConfigError(f"{origin}: two sources are named {s.name!r}: give each source its own 'name'")
    total = obj.get("total_tokens")
    allow = obj.get("allow_tokenizer_mismatch", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"{origin}: allow_tokenizer_mismatch={allow!r} is invalid: true or false")
    return MixSpec(sources, None if total is None else _positive_int(total, "total_tokens", origin), allow, origin)


def _source(item: object, n: int, origin: str, base: str | None) -> MixSource:
    if _is_pair(item):
        assert isinstance(item, (list, tuple))
        item = {"path": str(item[0]), "weight": item[1]}
    if not isinstance(item, dict):
        raise ConfigError(f"{origin}: source {n}: {item!r} is neither (path, weight) nor {{path, weight, name}}")
    unknown = sorted(set(item) - set(_SOURCE_KEYS))
    if unknown:
        raise ConfigError(f"{origin}: source {n}: unknown key {unknown[0]!r} (known: {', '.join(_SOURCE_KEYS)})")
    path = item.get("path")
    if not isinstance(path, (str, Path)) or not str(path):
        raise ConfigError(f"{origin}: source {n}: 'path' is missing (a finalized output: directory or URL)")
    location = str(path)
    if base is not None and not is_url(location) and not Path(location).is_absolute():
        location = join(base, location)
    name = item.get("name") or ""
    if not isinstance(name, str):
        raise ConfigError(f"{origin}: source {n}: name={name!r} must be a string")
    weight = item.get("weight")
    try:
        value = float(cast(SupportsFloat, weight)) if _is_weight(weight) else math.nan
    except OverflowError:        # an int beyond a float (10**400)
        value = math.inf
    if not math.isfinite(value) or value <= 0:
        label = name or _parts(location)[-1]
        raise ConfigError(f"{origin}: source {label!r} ({location}): weight={_shown(weight)} is invalid: "
                          f"must be a number > 0")
    return MixSource(name, location, value)


def _parts(location: str) -> list[str]:
    return [p for p in str(location).replace("\\", "/").split("/") if p and not p.endswith(":")] or [location]


def _named(sources: tuple[MixSource, ...]) -> tuple[MixSource, ...]:
    """Sources without a name get the end of their path, long enough to tell them apart
    (``s3://b/web/shards`` and ``/fsx/code/shards`` -> ``web/shards``, ``code/shards``)."""
    depth = {i: 1 for i, s in enumerate(sources) if not s.name}
    while True:
        names = {i: "/".join(_parts(sources[i].location)[-d:]) for i, d in depth.items()}
        taken = [s.name for s in sources if s.name] + list(names.values())
        clash = [i for i, n in names.items() if taken.count(n) > 1 and depth[i] < len(_parts(sources[i].location))]
        if not clash:
            return tuple(replace(s, name=names[i]) if i in names else s for i, s in enumerate(sources))
        for i in clash:
            depth[i] += 1


def _shown(value: object) -> str:
    """``repr(value)`` for a message, a huge integer by its size rather than its digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"<a {len(str(abs(value)))}-digit integer>"
    return repr(value)


def _positive_int(value: object, key: str, origin: str) -> int:
    """A whole number in [1, MAX_TOKENS]: a run's positions are int64, and a larger budget (``1e30``) used
    to end in an OverflowError deep in the schedule."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= MAX_TOKENS \
            or int(value) != value:
        shown = f"{value:.3g}" if isinstance(value, float) else _shown(value)
        raise ConfigError(f"{origin}: {key}={shown} is invalid: must be a whole number from 1 to {MAX_TOKENS:.3g}")
    return int(value)


# -- opening and checking the sources --------------------------------------------------------------------
def open_sources(spec: MixSpec, *, verify: bool = False, storage: StorageOptions | None = None,
                 files: bool = True) -> list[DatasetIndex]:
    """Every source's index (read and checked as the loader checks one dataset), then the mix checks."""
    indexes = []
    for s in spec.sources:
        try:
            indexes.append(load_index(s.location, verify=verify, storage=storage, files=files))
        except ShardprepError as e:
            hint = "a mixture source must be a finalized output (run `shardprep finalize`)" \
                if "index.json" in str(e.args[0]) else e.hint
            raise type(e)(f"mixture source {s.name!r}: {e.args[0]}", hint=hint) from None
    check_compatible(spec, indexes)
    return indexes


def _tokenizer_differences(a: DatasetIndex, b: DatasetIndex) -> list[str]:
    ra, rb = a.record, b.record
    assert ra is not None and rb is not None and a.tokenizer is not None and b.tokenizer is not None
    diffs = []
    if ra.tokenizer_fingerprint != rb.tokenizer_fingerprint:
        diffs.append(f"tokenizer fingerprint {rb.tokenizer_fingerprint[:12]} vs {ra.tokenizer_fingerprint[:12]}")
    for key in ("vocab_size", "eos_id"):
        if getattr(a.tokenizer, key) != getattr(b.tokenizer, key):
            diffs.append(f"{key} {getattr(b.tokenizer, key)} vs {getattr(a.tokenizer, key)}")
    return diffs


def check_compatible(spec: MixSpec, indexes: list[DatasetIndex]) -> None:
    """Refuse the same data twice, and sources whose ids mean different tokens (unless allowed)."""
    first, ref = spec.sources[0], indexes[0]
    seen: dict[str, str] = {}
    for s, index in zip(spec.sources, indexes):
        if index.fingerprint in seen:
            raise ConfigError(f"{spec.origin}: sources {seen[index.fingerprint]!r} and {s.name!r} are the same data "
                              f"({s.location}): list it once with the sum of the weights")
        seen[index.fingerprint] = s.name
        diffs = _tokenizer_differences(ref, index)
        if diffs and not spec.allow_tokenizer_mismatch:
            raise InputDataError(
                f"mixture source {s.name!r} ({s.location}) was tokenized differently from {first.name!r} "
                f"({'; '.join(diffs)}): the same id would mean different tokens",
                hint="retokenize it with the same tokenizer, or set allow_tokenizer_mismatch if you know the ids agree")


def open_mixture(spec: MixSpec, *, layout: Layout, seed: int, verify: bool = False,
                 storage: StorageOptions | None = None, files: bool = True) -> Mixture:
    """Open and check every source, then size the run (``ShardDataset`` and ``shardprep mix`` both start here)."""
    return Mixture(spec, open_sources(spec, verify=verify, storage=storage, files=files), layout=layout, seed=seed)


# -- the run -----------------------------------------------------------------------------------------------
class Mixture:
    """An opened mixture for one layout: per-source sizes, the schedule and the run length.

    A *unit* is a row of ``seq_len`` tokens (pack) or a document (pad/doc).  Pack rows all hold
    ``seq_len`` tokens, so the schedule's row shares are the token weights exactly.  pad/doc documents
    are scheduled at rates ``weight / mean document tokens`` of each source (mean from index.json), so the
    *expected* token share is the weight; the window bound then holds for document counts.
    Length of one pass (``length`` units): ``total_tokens`` if given, else as many tokens as the sources
    hold together (each source's share then decides whether it repeats or is subsampled).
    """

    def __init__(self, spec: MixSpec, indexes: list[DatasetIndex], *, layout: Layout, seed: int):
        from shardprep.loader.mixstate import Segment

        self.spec, self.indexes, self.layout = spec, list(indexes), layout
        row = layout.seq_len if isinstance(layout, Pack) else None      # pack: every unit holds seq_len tokens
        self.names = [s.name for s in spec.sources]
        tokens = np.array([int(i.shard_tokens.sum()) for i in indexes], dtype=np.int64)
        docs = np.array([int(i.shard_docs.sum()) for i in indexes], dtype=np.int64)
        self.tokens, self.docs = tokens, docs
        self.units = tokens // row if row else docs.copy()
        self.tails = tokens - self.units * row if row else np.zeros_like(tokens)
        for s, n in zip(spec.sources, self.units.tolist()):
            if n < 1:
                raise ConfigError(f"mixture source {s.name!r} ({s.location}) has fewer than one {self.unit_name[:-1]} "
                                  f"(seq_len={layout.seq_len}): it cannot take a share")
        self.mean_tokens = tokens / np.maximum(docs, 1)
        weights = [s.weight for s in spec.sources]
        rates = weights if row else [w / m for w, m in zip(weights, self.mean_tokens.tolist())]
        self.schedule = Schedule(quotas(rates), seed=seed)
        self.unit_tokens = float(row) if row else \
            float(sum(float(w) * m for w, m in zip(self.schedule.weights, self.mean_tokens.tolist())))
        budget = spec.total_tokens if spec.total_tokens is not None else int(tokens.sum())
        self.length = int(budget // self.unit_tokens)
        if self.length < 1:
            raise ConfigError(f"{spec.origin}: total_tokens={budget} is less than one {self.unit_name[:-1]} "
                              f"({self.unit_tokens:.0f} tokens)")
        self.segment = Segment.start(len(indexes))

    def use_rows(self, source: int, rows: int) -> None:
        """Source ``source`` is chat data packed into ``rows`` rows of whole conversations (``loader.chatrows``)."""
        s = self.spec.sources[source]
        if rows < 1:
            raise ConfigError(f"mixture source {s.name!r} ({s.location}) packs into no row of seq_len={self.layout.seq_len}")
        self.units[source], self.tails[source] = rows, 0

    @property
    def unit_name(self) -> str:
        return self.layout.unit_name

    @property
    def fingerprint(self) -> str:
        """Identifies the schedule and what it reads: the sources' data, their quotas, the pass length."""
        parts = [[i.fingerprint for i in self.indexes], list(self.schedule.quotas), self.length]
        return hashlib.sha256(orjson.dumps(parts)).hexdigest()

    def table(self, epochs: int = 1) -> list[dict]:
        """Per source, what ``epochs`` passes take: tokens available, token share, tokens taken, epochs over it.

        ``share`` is the share of tokens (pack: exact; pad/doc: expected, from mean document lengths),
        ``unit_share`` the share of rows or documents the schedule gives the source.
        """
        taken = self.schedule.draws(self.length * epochs)
        rows = []
        for i, s in enumerate(self.spec.sources):
            per_unit = self.unit_tokens if isinstance(self.layout, Pack) else float(self.mean_tokens[i])
            unit_share = self.schedule.weights[i]
            rows.append({"name": s.name, "path": s.location, "weight": s.weight,
                         "share": float(unit_share) * per_unit / self.unit_tokens, "unit_share": float(unit_share),
                         "tokens": int(self.tokens[i]), "documents": int(self.docs[i]), "units": int(self.units[i]),
                         "taken_units": int(taken[i]), "taken_tokens": int(round(int(taken[i]) * per_unit)),
                         "epochs": int(taken[i]) / int(self.units[i]), "dtype": self.indexes[i].dtype})
        return rows

    def summary(self, first: int = 32) -> dict:
        """Everything ``shardprep mix`` and the report page show: the run, the bounds, the table and the
        sources of the first ``first`` positions."""
        k = len(self.indexes)
        src, _ = self.schedule.locate(np.arange(min(first, self.length), dtype=np.int64))
        return {"spec": self.spec.origin, "mode": self.layout.name, "seq_len": self.layout.seq_len,
                "seed": self.schedule.seed,
                "unit": self.unit_name, "units": self.length, "unit_tokens": self.unit_tokens,
                "tokens": int(self.length * self.unit_tokens),
                "length_from": "total_tokens" if self.spec.total_tokens is not None else "sources",
                "period": self.schedule.period, "quotas": list(self.schedule.quotas),
                "bounds": {"prefix": float(prefix_bound(k)), "window": float(window_bound(k))},
                "sources": self.table(), "schedule": [self.names[i] for i in src.tolist()]}
