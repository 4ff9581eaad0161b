"""The plan fingerprint: what makes two plans the same plan (docs/format.md, ``job.json``).

It is computed while the planner generates the tasks (issue 16: the task list is never held whole), and
its value is the one job.json's whole body used to hash to, so a plan keeps its fingerprint across the
layout change and finished shards stay finished.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import operator
from typing import TYPE_CHECKING, Any, Callable

import orjson

from shardprep.inputs.readers import WorkItem
from shardprep.records import json_path
from shardprep.shard.format import FORMAT_VERSION

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import DataclassInstance

    from shardprep.inputs.discover import InputFile
    from shardprep.job.options import TokenizeOptions
    from shardprep.tokenizer.load import TokenizerInfo

BATCH = 4096    # inputs or tasks serialised per orjson call while planning


def _canonical(obj: object) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


@functools.cache
def _sorted_fields(cls: type[DataclassInstance]) -> tuple[tuple[str, ...], Callable[[object], tuple[Any, ...]]]:
    names = tuple(sorted(f.name for f in dataclasses.fields(cls) if f.metadata.get("written", True)))
    return names, operator.attrgetter(*names)


def _sorted_dict(obj: DataclassInstance) -> dict[str, Any]:
    """A flat dataclass as a dict with sorted keys: what ``asdict`` + ``OPT_SORT_KEYS`` serialise to, without
    ``asdict``'s deep copy (planning a million inputs calls this two million times).  Fields that are never
    written (``records.NOT_WRITTEN``: an input's ``storage``) are how to read, not what is planned."""
    names, values = _sorted_fields(type(obj))
    return dict(zip(names, values(obj)))


def _json_items(objs: list[Any]) -> bytes:
    """``a,b,c``: the elements of a JSON list, one C call for the whole batch."""
    return orjson.dumps(objs)[1:-1]


def _input_dict(inp: InputFile) -> dict[str, Any]:
    """An input's record; a file's without the ``identity`` only remote objects have (so a plan of files
    keeps the fingerprint it had before remote inputs existed)."""
    d = _sorted_dict(inp)
    if d["identity"] is None:
        del d["identity"]
    return d


def _json_inputs(inputs: list[InputFile]) -> bytes:
    """The input records of a batch; a path that is not valid UTF-8 as its exact record (``records.json_path``),
    converted only when orjson refused the batch (every ordinary batch costs nothing more)."""
    dicts = [_input_dict(i) for i in inputs]
    try:
        return _json_items(dicts)
    except TypeError:
        return _json_items([{**d, "path": json_path(d["path"])} for d in dicts])


class Fingerprint:
    """sha256 of the canonical plan body, fed a batch of tasks at a time.

    The value is what the whole body hashed to when job.json held it (orjson, sorted keys, compact):
    ``{"format_version":1,"inputs":[...],"options":{...},"tasks":[[...],...],"tokenizer":{...}}``, the
    tokenizer without its ``source``, the options without ``backend``.  Same inputs, options and
    tokenizer, same fingerprint: finished shards of an earlier identical plan stay finished.
    """

    def __init__(self, inputs: list[InputFile], options: TokenizeOptions, tokenizer: TokenizerInfo) -> None:
        self._h = hashlib.sha256(b'{"format_version":' + _canonical(FORMAT_VERSION) + b',"inputs":[')
        inputs_h, paths = hashlib.sha256(), hashlib.sha256()
        for k in range(0, len(inputs), BATCH):
            chunk = inputs[k:k + BATCH]
            piece = (b"," if k else b"") + _json_inputs(chunk)
            self._h.update(piece)
            inputs_h.update(piece)
            paths.update("".join(i.path + "\n" for i in chunk).encode("utf-8", "surrogateescape"))
        self.inputs_sha256, self.paths_sha256 = inputs_h.hexdigest(), paths.hexdigest()
        self._h.update(b'],"options":' + _canonical(options.content_dict()) + b',"tasks":[')
        frozen = {k: v for k, v in _sorted_dict(tokenizer).items() if k != "source"}
        self._tail = b'],"tokenizer":' + _canonical(frozen) + b"}"
        self._sep = b""

    def add(self, tasks: list[list[WorkItem]]) -> None:
        if tasks:
            self._h.update(self._sep + _json_items([[_sorted_dict(w) for w in t] for t in tasks]))
            self._sep = b","

    def hexdigest(self) -> str:
        h = self._h.copy()
        h.update(self._tail)
        return h.hexdigest()
