"""Typed on-disk records: parse (with errors naming the file and the field), validate, serialise.

docs/format.md is the specification; these classes are its one implementation.  Everything that reads
or writes job.json, a sidecar or index.json goes through them, and serialising a parsed record gives
back the same bytes (key order included).

| record | class | module |
|---|---|---|
| ``job.json`` | ``Job`` (+ ``PlanSummary``, ``PlanFiles``, ``TokenizerRecord`` = ``TokenizerInfo``, ``TokenizeOptions``, ``PlanOptions``) | ``schema.job`` |
| one task's line of ``plan/tasks.jsonl`` | ``Task`` (its ``TaskItem``: ``InputRecord`` = ``InputFile`` + ``WorkItem``); ``encode_task``/``decode_task`` | ``schema.job`` |
| ``plan/tasks.idx`` (offsets and digests) | ``TaskTable`` (reader), ``TaskTableWriter`` | ``job.plan_files`` |
| ``shard-NNNNN.json`` | ``Sidecar`` (+ ``ChunkTable``, ``Chunk``, ``SidecarInput``) | ``schema.sidecar`` |
| ``index.json`` | ``Index`` (+ ``IndexShard``, ``IndexTokenizer``, ``IndexTotals``) | ``schema.index`` |
"""

from shardprep.job.schema.fields import Fields, load_json, record
from shardprep.job.schema.index import Index, IndexShard, IndexTokenizer, IndexTotals
from shardprep.job.schema.job import (CREATED_BY, InputRecord, Job, PlanFiles, PlanSummary, Task, TaskItem,
                                      TokenizerRecord, decode_task, encode_task)
from shardprep.job.schema.sidecar import Chunk, ChunkTable, Sidecar, SidecarInput

__all__ = [
    "CREATED_BY", "Chunk", "ChunkTable", "Fields", "Index", "IndexShard", "IndexTokenizer", "IndexTotals",
    "InputRecord", "Job", "PlanFiles", "PlanSummary", "Sidecar", "SidecarInput", "Task", "TaskItem", "TokenizerRecord",
    "decode_task", "encode_task", "load_json", "record",
]
