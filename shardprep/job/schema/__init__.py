"""Typed on-disk records: parse (with errors naming the file and the field), validate, serialise.

docs/format.md is the specification; these classes are its one implementation.  Everything that reads
or writes job.json, a sidecar or index.json goes through them, and serialising a parsed record gives
back the same bytes (key order included).

| record | class | module |
|---|---|---|
| ``job.json`` | ``Job`` (+ ``InputRecord`` = ``InputFile``, ``WorkItem``, ``TokenizerRecord`` = ``TokenizerInfo``, ``TokenizeOptions``, ``PlanOptions``) | ``schema.job`` |
| one task's work | ``Task`` (its ``TaskItem``: input + work item) | ``schema.job`` |
| ``shard-NNNNN.json`` | ``Sidecar`` (+ ``ChunkTable``, ``Chunk``, ``SidecarInput``) | ``schema.sidecar`` |
| ``index.json`` | ``Index`` (+ ``IndexShard``, ``IndexTokenizer``, ``IndexTotals``) | ``schema.index`` |
"""

from shardprep.job.schema.fields import Fields, load_json, record
from shardprep.job.schema.index import Index, IndexShard, IndexTokenizer, IndexTotals
from shardprep.job.schema.job import CREATED_BY, InputRecord, Job, Task, TaskItem, TokenizerRecord
from shardprep.job.schema.sidecar import Chunk, ChunkTable, Sidecar, SidecarInput

__all__ = [
    "CREATED_BY", "Chunk", "ChunkTable", "Fields", "Index", "IndexShard", "IndexTokenizer", "IndexTotals",
    "InputRecord", "Job", "Sidecar", "SidecarInput", "Task", "TaskItem", "TokenizerRecord", "load_json", "record",
]
