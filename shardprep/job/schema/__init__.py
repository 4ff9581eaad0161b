"""Typed records of the frozen plan: parse (with errors naming the file and the field), validate, serialise.

docs/format.md is the specification; these classes are its one implementation.  Everything that reads
or writes job.json or a task's record goes through them, and serialising a parsed record gives back the
same bytes (key order included).  The shard's own records (sidecar, index.json) live with the shard
format in ``shardprep.shard``; the typed field reader they all use is ``shardprep.records``.

| record | class | module |
|---|---|---|
| ``job.json`` | ``Job`` (+ ``PlanSummary``, ``PlanFiles``, ``TokenizerRecord`` = ``TokenizerInfo``, ``TokenizeOptions``, ``PlanOptions``) | ``schema.job`` |
| one task's line of ``plan/tasks.jsonl`` | ``Task`` (its ``TaskItem``: ``InputRecord`` = ``InputFile`` + ``WorkItem``); ``encode_task``/``decode_task`` | ``schema.job`` |
| ``plan/tasks.idx`` (offsets and digests) | ``TaskTable`` (reader), ``TaskTableWriter`` | ``job.plan_files`` |
| ``shard-NNNNN.json`` | ``Sidecar`` (+ ``ChunkTable``, ``Chunk``, ``SidecarInput``) | ``shard.sidecar`` |
| ``index.json`` | ``Index`` (+ ``IndexShard``, ``IndexTokenizer``, ``IndexTotals``) | ``shard.index`` |
"""

from shardprep.job.schema.job import (
                                      CREATED_BY,
                                      InputRecord,
                                      Job,
                                      PlanFiles,
                                      PlanSummary,
                                      Task,
                                      TaskItem,
                                      TokenizerRecord,
                                      decode_task,
                                      encode_task,
)

__all__ = [
    "CREATED_BY", "InputRecord", "Job", "PlanFiles", "PlanSummary", "Task", "TaskItem", "TokenizerRecord",
    "decode_task", "encode_task",
]
