"""Where a traced document came from: its shard, and its input file or URL, byte offset or row, and line.

A shard's sidecar (format 3) records per document its input (the plan's input number), its record's byte
offset in the decompressed input (or its row in a parquet or Arrow input) and its line, and lists the
task's inputs by number and path: ``job.sources.shard_origin`` reads a document's origin from it (the one
path, no plan needed: remote outputs and mixtures alike).  Its text comes from the input through
``job.sources.document_record``, which reads only the record of the shard's task.  Shards written before
format 3 carry no origins: for them the answer says so and names the task's inputs instead (the document
is somewhere in those).

``Provenance`` reads each sidecar once; ``documents_of_input`` walks every sidecar (a quarantine file or
``trace --find-input``): the documents whose record starts in a byte (or row) range of one input.
"""

from __future__ import annotations

from typing import Any

from shardprep.errors import ConfigError
from shardprep.job.sources import ShardOrigin, shard_origin
from shardprep.loader.locate import DocRef
from shardprep.loader.reading import Reading
from shardprep.loader.rowdocs import DocSpan
from shardprep.shard.sidecar import Sidecar

NOT_RECORDED = "origin not recorded (format {version} shard)"


class Provenance:
    """Documents of ``reading`` -> their shard and origin (sidecars read once each, on first use), and their
    text read back from the inputs (each output's plan opened once)."""

    def __init__(self, reading: Reading):
        self.reading = reading
        self._sidecars: dict[tuple[int, int], Sidecar | None] = {}
        self._plans: dict[int, Any] = {}

    def sidecar(self, source: int, shard: int) -> Sidecar | None:
        """The shard's sidecar (None for legacy tars, which have none)."""
        key = (source, shard)
        if key not in self._sidecars:
            index = self.reading.sources[source]
            legacy = index.record is None or not index.shards[shard].sidecar
            self._sidecars[key] = None if legacy else index.sidecar(shard)
        return self._sidecars[key]

    def origin(self, source: int, shard: int, doc: int) -> ShardOrigin | None:
        """The document's origin (``job.sources.shard_origin``); None where the shard does not record it."""
        side = self.sidecar(source, shard)
        return None if side is None else shard_origin(side, doc)

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

    def text(self, span: DocSpan) -> tuple[Any, str]:
        """``(text, note)``: the whole document as its task tokenized it (a chat job: the record holding the
        conversation), read back from its input by ``job.sources.document_record``; or None and why not."""
        from shardprep.errors import ShardprepError
        from shardprep.job.sources import document_record, plan_sources

        found = self.origin(span.source, span.shard, span.doc)
        side = self.sidecar(span.source, span.shard)
        if found is None or side is None:
            return None, "no origin recorded: no text"
        try:
            plan = self._plans.get(span.source)
            if plan is None:
                plan = self._plans[span.source] = plan_sources(str(self.reading.sources[span.source].root))
            got = document_record(plan, found.input, found.offset, task=side.task)
        except ShardprepError as e:
            return None, f"not readable: {e}"
        if got.text is None:
            return got.record, "chat record (the conversation)"
        return got.text, f"whole document; the row holds its tokens [{span.token_lo}, {span.token_hi})"


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
            assert side is not None         # a shard that lists inputs has a sidecar
            origins, number = side.origins, inputs[0].input
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
