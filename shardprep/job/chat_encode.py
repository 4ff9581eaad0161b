"""The task's chat path (``--chat``): records -> conversations -> ids and trained ranges -> the shard.

What the text encoders do (``job.encode``: every document added to the writer in order, progress
reported, ``Preempted`` at a safe point between batches), over records instead of text: each record's conversation is found (``chat.conversations``), rendered with the plan's frozen
template and tokenized with its trained tokens (``chat.encoder.ChatEncoder``), then written with its
trained ranges (``shard.trained``).  What is skipped, and why, joins the text path's reasons:

* ``bad_conversation``: the record holds no usable conversation (its key path in the detail);
* ``template_refused``: the template raised on it (its own message in the detail: roles that do not
  alternate, a system role it does not take);
* ``empty``: the render has no tokens.

A chat job's documents are whole conversations exactly as the template renders them: no BOS/EOS added.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardprep.chat.conversations import ChatRecordError, conversation_from_record
from shardprep.chat.encoder import ChatEncoder, EncodedConversation
from shardprep.chat.render import ChatTemplateError
from shardprep.chat.template import ChatTemplate
from shardprep.inputs.chat_records import Record, item_records
from shardprep.inputs.readers import SKIP_REASONS, ReadOptions, SkipLog
from shardprep.job.encode import Progress, StopFlag
from shardprep.job.options import ChatOptions
from shardprep.job.schema import Task
from shardprep.shard.trained import Trained
from shardprep.shard.writer import ShardWriter

CHAT_SKIP_REASONS = ("bad_conversation", "template_refused")


def chat_skip_log(strict: bool) -> SkipLog:
    """A SkipLog that also counts the chat reasons (a chat sidecar lists them, zeros included)."""
    return SkipLog(strict=strict, counts=dict.fromkeys(SKIP_REASONS + CHAT_SKIP_REASONS, 0))


def chat_encoder(tok_json: str, template: ChatTemplate, chat: ChatOptions) -> ChatEncoder:
    """The task's encoder: ``tokenizers`` ids (the reference), placed by the byte-length table where the
    tokenizer allows it, by offsets elsewhere."""
    from tokenizers import Tokenizer

    return ChatEncoder(Tokenizer.from_str(tok_json), template, chat.train_on, chat.train_thinking)


class ChatTaskEncoder:
    """Encodes a task's records as conversations, a block (or record batch) at a time, in this process."""

    def __init__(self, encoder: ChatEncoder, chat: ChatOptions):
        self.encoder = encoder
        self.field = chat.messages_field

    def encode(self, work: Task, read: ReadOptions, writer: ShardWriter, stop: StopFlag, progress: Progress,
               skips: SkipLog) -> None:
        """Every conversation of ``work`` into ``writer``, in order.  Under ``--strict`` a batch's skips are
        gathered first and the one earliest in the file fails the task: a block's lines are parsed before
        its conversations are checked, so failing on the first skip seen could name a later line."""
        for item in work.items:
            path = item.input.path
            seen = _batch_log(skips)     # under --strict, the first batch with a skip fails the task
            for batch in item_records(item.input, item.work, read, seen):
                kept, conversations, tools = self._conversations(batch.records, path, seen)
                results = self.encoder.encode(conversations, tools) if conversations else []
                flat, lengths, trained = _written(kept, results, path, seen)
                _fail_on_first(seen, skips)
                if len(lengths):
                    writer.add(flat, lengths, trained)
                progress(len(lengths), int(flat.size), batch.nbytes)
                stop.check(work.index)
            _fail_on_first(seen, skips)      # a too-long last line ends the item without a batch

    def _conversations(self, records: list[Record], path: str,
                       skips: SkipLog) -> tuple[list[Record], list[list[dict[str, Any]]], list[Any]]:
        kept, conversations, tools = [], [], []
        for rec in records:
            try:
                conversations.append(conversation_from_record(rec.value, self.field, rec.where(path)))
            except ChatRecordError as e:
                skips.skip("bad_conversation", path, rec.line, f"{e.key}: {e.problem}", byte=rec.byte)
                continue
            kept.append(rec)
            given = rec.value.get("tools")
            tools.append(given if isinstance(given, list) and given else None)
        return kept, conversations, tools


def _batch_log(skips: SkipLog) -> SkipLog:
    """The log a batch counts into: ``skips`` itself, or under --strict a lenient one to sort first."""
    return chat_skip_log(False) if skips.strict else skips


def _fail_on_first(seen: SkipLog, skips: SkipLog) -> None:
    """Under --strict, fail (through ``skips``) on the batch's skip earliest in the file, if any."""
    if seen is skips or not seen.examples:
        return
    first = min(seen.examples, key=lambda e: (e.byte is None, e.byte or 0, e.line or 0))
    skips.skip(first.reason, first.file, first.line, first.detail, byte=first.byte)


def _written(records: list[Record], results: list[EncodedConversation | ChatTemplateError], path: str,
             skips: SkipLog) -> tuple[np.ndarray, np.ndarray, Trained]:
    """The batch's kept conversations as flat ids, lengths and trained ranges; the others counted."""
    ids, counts, ranges = [], [], []
    for rec, result in zip(records, results):
        if isinstance(result, ChatTemplateError):
            skips.skip("template_refused", path, rec.line, result.template_message, byte=rec.byte)
        elif result.ids.size == 0:
            skips.skip("empty", path, rec.line, "the template rendered nothing", byte=rec.byte)
        else:
            ids.append(result.ids)
            counts.append(len(result.trained))
            ranges.append(result.trained.astype(np.int64).reshape(-1, 2))
    if not ids:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64), Trained.empty()
    lengths = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
    return np.concatenate(ids), lengths, Trained(np.asarray(counts, dtype=np.int64), np.concatenate(ranges))
