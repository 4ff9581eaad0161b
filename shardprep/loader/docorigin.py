"""Where a traced document came from: its shard, and its input file or URL, byte offset or row, and line.

A shard's sidecar (format 3) records per document its input (a number: the plan's inputs in order,
``job.sources.plan_inputs``), its record's byte offset in the decompressed input (or its row in a parquet
or Arrow input) and its line.  The sidecar also lists the task's own inputs by path (and, from format 3,
by number), so most look-ups need no plan at all.  Shards written before format 3 carry no origins: for
them the answer says so and names the task's inputs instead (the document is somewhere in those).

``Provenance`` reads each sidecar once; ``documents_of_input`` walks every sidecar (a quarantine file or
``trace --find-input``): the documents whose record starts in a byte (or row) range of one input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardprep.errors import ConfigError
from shardprep.loader.locate import DocRef
from shardprep.loader.reading import Reading
from shardprep.loader.rowdocs import DocSpan
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.locations import read_bytes

NOT_RECORDED = "origin not recorded (format {version} shard)"


@dataclass(frozen=True)
class Origin:
    """One document's input: ``location`` (path or URL), ``kind`` ("byte" or "row"), ``offset`` (byte offset
    of its record in the decompressed input, or its row), ``line`` (1-based; None where not counted)."""

    input: int
    location: str
    kind: str
    offset: int
    line: int | None


class Provenance:
    """Documents of ``reading`` -> their shard and origin (sidecars read once each, on first use)."""

    def __init__(self, reading: Reading):
        self.reading = reading
        self._sidecars: dict[tuple[int, int], Sidecar | None] = {}

    def sidecar(self, source: int, shard: int) -> Sidecar | None:
        """The shard's sidecar (None for legacy tars, which have none)."""
        key = (source, shard)
        if key not in self._sidecars:
            index = self.reading.sources[source]
            entry = index.shards[shard]
            if index.record is None or not entry.sidecar:
                self._sidecars[key] = None
            else:
                where = index.location(entry.sidecar)
                self._sidecars[key] = Sidecar.parse(read_bytes(where, storage=index.storage), where)
        return self._sidecars[key]

    def origin(self, source: int, shard: int, doc: int) -> Origin | None:
        """The document's origin; None where the shard does not record it."""
        side = self.sidecar(source, shard)
        origins = getattr(side, "origins", None) if side is not None else None
        if side is None or origins is None:
            return None
        got = origins[doc]
        inp = _input_of(side, got.input)
        location = inp.path if inp is not None else f"input {got.input} of the plan"
        kind = "row" if inp is not None and inp.unit == "rows" else "byte"
        return Origin(int(got.input), location, kind, int(got.offset), None if got.line < 0 else int(got.line))

    def describe(self, span: DocSpan) -> dict[str, Any]:
        """Everything ``trace`` prints of one row's document (JSON-ready)."""
        index = self.reading.sources[span.source]
        out: dict[str, Any] = {"source": self.reading.names[span.source], "shard": index.shards[span.shard].name,
                               "doc": span.doc, "doc_id": span.doc_id, "tokens": [span.token_lo, span.token_hi]}
        found = self.origin(span.source, span.shard, span.doc)
        if found is not None:
            out.update(input=found.location, input_index=found.input, kind=found.kind, offset=found.offset,
                       line=found.line)
            return out
        side = self.sidecar(span.source, span.shard)
        if side is None:
            out.update(input=None, note="origin not recorded (legacy tar: no sidecar)", task_inputs=[])
            return out
        out.update(input=None, note=NOT_RECORDED.format(version=side.format_version),
                   task_inputs=[{"path": i.path, "start": i.start, "end": i.end, "unit": i.unit,
                                 "first_line": i.first_line} for i in side.inputs])
        return out


def _input_of(side: Sidecar, number: int) -> Any:
    """The sidecar's record of the task input with plan number ``number`` (None: not listed by number)."""
    for inp in side.inputs:
        if getattr(inp, "input", None) == number:
            return inp
    return None


def documents_of_input(reading: Reading, prov: Provenance, location: str, lo: int, hi: int, *, rows: bool,
                       where: str) -> list[DocRef]:
    """Every document whose record starts in ``[lo, hi)`` (bytes, or rows with ``rows``) of input ``location``
    (a path or URL as the plan names it).  ConfigError (one line, ``where`` first) when no shard read that
    input, or when the shards that did record no origins."""
    import numpy as np

    listed, recorded = False, False
    found: list[DocRef] = []
    for source, index in enumerate(reading.sources):
        for shard in range(len(index.shards)):
            side = prov.sidecar(source, shard)
            inputs = [i for i in (side.inputs if side is not None else ()) if _same(i.path, location)]
            if not inputs:
                continue
            listed = True
            origins = getattr(side, "origins", None)
            number = getattr(inputs[0], "input", None)
            if origins is None or number is None:
                continue
            recorded = True
            kind_rows = inputs[0].unit == "rows"
            if kind_rows != rows:
                what = "rows" if kind_rows else "bytes"
                raise ConfigError(f"{where}: {location} is read by {what}: give {what}: [lo, hi]")
            hit = np.flatnonzero((origins.input == number) & (origins.offset >= lo) & (origins.offset < hi))
            found.extend(DocRef(source, shard, int(d)) for d in hit.tolist())
    if not listed:
        raise ConfigError(f"{where}: input {location} is not read by any shard of the data (an input of no plan)")
    if not recorded:
        raise ConfigError(f"{where}: the shards that read {location} record no document origins (format 1/2 "
                          f"shards): name their documents or shards instead")
    return sorted(found)


def _same(path: str, location: str) -> bool:
    """The sidecar's path and the one given name the same input (a relative path given: the same tail)."""
    return path == location or (not location.startswith("/") and "://" not in location
                                and path.endswith("/" + location.lstrip("./")))
