"""The quarantine file: steps, documents, shards and input byte (or row) ranges a run must leave out.

A small JSON or YAML file, read like a mixture spec (``mixture.load_spec``'s rules: unknown keys and
duplicate keys refused, one line naming the file)::

    steps: [[1200, 1260]]                         # global steps a..b, inclusive, counted from 0
    documents: [48812, "web:1234"]                # global document ids; in a mixture SOURCE:ID
    shards: ["shard-00012.tar", "code:shard-00003.tar"]
    inputs:
      - {input: /data/web/part-0007.jsonl.gz, bytes: [1048576, 2097152]}
      - {input: s3://bucket/table.parquet, rows: [500, 600]}

``Quarantine.resolve(reading)`` turns it into the loader's ``skips.Skips(steps, documents)``: shards become
all their documents, input ranges the documents whose record starts there (the sidecars' ``origins``,
``docorigin``).  Anything that names data that does not exist (a document id out of range, an unknown
shard or source, an input no shard read, a range holding no document) is refused in one line naming the
file and the entry.  ``trace --quarantine`` and the training script read the same file, so what is traced
is what is skipped (docs/loader.md, "Tracing and skipping").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from shardprep.errors import ConfigError, ShardprepError
from shardprep.loader.locate import DocRef
from shardprep.loader.reading import Reading
from shardprep.loader.skips import Skips
from shardprep.storage.locations import read_bytes

KEYS = ("steps", "documents", "shards", "inputs")
INPUT_KEYS = ("input", "bytes", "rows")


@dataclass(frozen=True)
class InputRange:
    location: str
    lo: int
    hi: int
    rows: bool


@dataclass(frozen=True)
class Quarantine:
    """A parsed quarantine file (``origin``: where it came from, for messages)."""

    origin: str
    steps: tuple[tuple[int, int], ...] = ()
    documents: tuple[str, ...] = ()
    shards: tuple[str, ...] = ()
    inputs: tuple[InputRange, ...] = ()

    def resolve(self, reading: Reading) -> Skips:
        """The loader's ``Skips``; ConfigError (one line naming the file and the entry) for missing data."""
        from shardprep.loader.docorigin import Provenance, documents_of_input
        from shardprep.loader.trace import doc_ref

        docs: set[DocRef] = set()
        for text in self.documents:
            docs.add(_entry(self.origin, f"documents: {text!r}", partial(doc_ref, reading, text)))
        for name in self.shards:
            docs.update(_entry(self.origin, f"shards: {name!r}", partial(shard_documents, reading, name)))
        prov = Provenance(reading)
        for r in self.inputs:
            what = f"inputs: {r.location} {'rows' if r.rows else 'bytes'} [{r.lo}, {r.hi}]"
            found = documents_of_input(reading, prov, r.location, r.lo, r.hi, rows=r.rows, where=f"{self.origin}: {what}")
            if not found:
                raise ConfigError(f"{self.origin}: {what}: no document of the data starts in that range")
            docs.update(found)
        return Skips(self.steps, frozenset(docs))


def _entry(origin: str, what: str, compute: Any) -> Any:
    """``compute()``, its ConfigError restated as one line naming the file and the entry."""
    try:
        return compute()
    except ShardprepError as e:
        raise ConfigError(f"{origin}: {what}: {e.args[0]}") from None


def shard_documents(reading: Reading, text: str) -> list[DocRef]:
    """Every document of shard ``NAME`` or ``SOURCE:NAME``."""
    name, source = text, 0
    if ":" in text and not text.startswith(("/", "s3://")):
        prefix, _, rest = text.partition(":")
        if prefix in reading.names:
            name, source = rest, reading.names.index(prefix)
        elif reading.mixture is not None:
            raise ConfigError(f"no source {prefix!r} (sources: {', '.join(reading.names)})")
    elif len(reading.sources) > 1:
        raise ConfigError(f"the mixture has {len(reading.sources)} sources: say which, SOURCE:NAME")
    index = reading.sources[source]
    names = [s.name for s in index.shards]
    if name not in names:
        raise ConfigError(f"no shard {name!r} in {reading.names[source]} ({len(names)} shards, "
                          f"{names[0]}..{names[-1]})")
    shard = names.index(name)
    return [DocRef(source, shard, d) for d in range(int(index.shard_docs[shard]))]


def load_quarantine(location: str) -> Quarantine:
    """Read and check a quarantine file (JSON, or YAML for any other suffix)."""
    from shardprep.loader.mixture import _unique_keys, _yaml_unique

    try:
        data = read_bytes(location)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ConfigError(f"{location}: quarantine file does not exist") from None
    try:
        obj = json.loads(data, object_pairs_hook=_unique_keys) if location.lower().endswith(".json") \
            else _yaml_unique(data)
    except ShardprepError:
        raise
    except Exception as e:  # a parse error or a duplicate key: one line, naming the file
        raise ConfigError(f"{location}: not a valid quarantine file: {str(e).splitlines()[0]}") from None
    return parse_quarantine(obj if obj is not None else {}, location)


def parse_quarantine(obj: Any, origin: str) -> Quarantine:
    """Check the object of a quarantine file (``KEYS``, each a list)."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{origin}: a quarantine file is an object with {', '.join(KEYS)} (got {type(obj).__name__})")
    _known_keys(obj, KEYS, f"{origin}: ")
    for key in KEYS:
        if not isinstance(obj.get(key, []), list):
            raise ConfigError(f"{origin}: {key} must be a list")
    steps = tuple(_steps(item, origin) for item in obj.get("steps", []))
    docs = tuple(_document(item, origin) for item in obj.get("documents", []))
    shards = tuple(_text(item, "shards", origin) for item in obj.get("shards", []))
    inputs = tuple(_input(item, origin) for item in obj.get("inputs", []))
    return Quarantine(origin, steps, docs, shards, inputs)


def _known_keys(obj: dict, known: tuple[str, ...], where: str) -> None:
    """A key the format does not know is refused (a typo would otherwise skip nothing, silently)."""
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ConfigError(f"{where}unknown key {unknown[0]!r} (known: {', '.join(known)})")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _steps(item: Any, origin: str) -> tuple[int, int]:
    if not (isinstance(item, list) and len(item) == 2 and all(_whole(v) for v in item) and item[0] <= item[1]):
        raise ConfigError(f"{origin}: steps: {item!r} is not [first, last] (whole numbers, first <= last)")
    return int(item[0]), int(item[1])


def _document(item: Any, origin: str) -> str:
    if _whole(item):
        return str(item)
    if isinstance(item, str) and ":" in item:
        return item
    raise ConfigError(f"{origin}: documents: {item!r} is not a document id (ID, or \"SOURCE:ID\" in a mixture)")


def _text(item: Any, key: str, origin: str) -> str:
    if not isinstance(item, str) or not item:
        raise ConfigError(f"{origin}: {key}: {item!r} is not a name")
    return item


def _input(item: Any, origin: str) -> InputRange:
    if not isinstance(item, dict):
        raise ConfigError(f"{origin}: inputs: {item!r} is not {{input: PATH_OR_URL, bytes: [lo, hi]}}")
    _known_keys(item, INPUT_KEYS, f"{origin}: inputs: ")
    location = item.get("input")
    ranges = [k for k in ("bytes", "rows") if k in item]
    if not isinstance(location, str) or not location or len(ranges) != 1:
        raise ConfigError(f"{origin}: inputs: {item!r} needs input: PATH_OR_URL and one of bytes: [lo, hi] or "
                          f"rows: [lo, hi]")
    span = item[ranges[0]]
    if not (isinstance(span, list) and len(span) == 2 and all(_whole(v) for v in span) and span[0] < span[1]):
        raise ConfigError(f"{origin}: inputs: {location}: {ranges[0]}={span!r} is not [lo, hi) with lo < hi")
    return InputRange(str(Path(location)) if "://" not in location else location, int(span[0]), int(span[1]),
                      ranges[0] == "rows")
