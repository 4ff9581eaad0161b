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

Ids follow the job's ``--backend`` as the text path's do (``tokenizer.backend``): ``auto`` tries a fast
candidate, whose ids the encoder places with the byte-length table (so only where the tokenizer is
byte-level BPE: ``open_chat_backend``), keeps a sample of rendered conversations with the ids it gave them
(``SampledIds``) and lets the task compare them with ``tokenizers``'; the template's markers are special
tokens, so every backend here matches special-token strings in the render.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np

from shardprep.chat.conversations import ChatRecordError, conversation_from_record
from shardprep.chat.encoder import ChatEncoder, EncodedConversation, IdsBackend
from shardprep.chat.render import ChatTemplateError
from shardprep.chat.template import ChatTemplate
from shardprep.errors import TokenizerError
from shardprep.inputs.chat_records import Record, item_records
from shardprep.inputs.fastpath import DocBatch
from shardprep.inputs.readers import SKIP_REASONS, ReadOptions, SkipLog
from shardprep.job.encode import Progress, Sampler, StopFlag
from shardprep.job.options import ChatOptions
from shardprep.job.schema import Task
from shardprep.shard.origins import DocOrigins
from shardprep.shard.provenance import CheckRecord, SkipExample
from shardprep.shard.trained import Trained
from shardprep.shard.writer import ShardWriter
from shardprep.tokenizer.backend import AUTO_CANDIDATES, Backend, HFBackend, Opened, open_backend
from shardprep.tokenizer.parsed import shared_tokenizer

CHAT_SKIP_REASONS = ("bad_conversation", "template_refused")


def chat_skip_log(strict: bool) -> SkipLog:
    """A SkipLog that also counts the chat reasons (a chat sidecar lists them, zeros included)."""
    return SkipLog(strict=strict, counts=dict.fromkeys(SKIP_REASONS + CHAT_SKIP_REASONS, 0))


def chat_encoder(tok_json: str, template: ChatTemplate, chat: ChatOptions) -> ChatEncoder:
    """The task's encoder: ``tokenizers`` ids (the reference), placed by the byte-length table where the
    tokenizer allows it, by offsets elsewhere (a fast backend's ids: ``with_ids``)."""
    tokenizer = shared_tokenizer(tok_json, match_specials=True)
    return ChatEncoder(tokenizer, template, chat.train_on, chat.train_thinking, tokenizer_json=tok_json)


def chat_reference(tok_json: str, threads: int = 1) -> HFBackend:
    """``hf`` as the chat encoder runs it (special tokens matched): the reference a candidate's ids are
    compared with, on the encoder's own tokenizer (the process's shared one: ``chat_encoder``)."""
    return HFBackend(tok_json, allow_special_tokens=True, threads=threads)


def open_chat_backend(requested: str, tok_json: str, reference: HFBackend, placeable: bool) -> Opened:
    """What gives a chat task its ids: ``hf`` (``reference``) or a fast candidate, unchecked yet.

    ``placeable``: the encoder can place ids alone (a byte-level BPE's byte-length table, or the segments
    between added tokens: ``chat.segments``); without that a candidate's ids could not be mapped to trained
    ranges, so ``auto`` stays ``hf`` (recorded like a candidate that did not load) and a fast backend asked
    for by name fails the task."""
    if requested == "hf":
        return Opened(reference, requested, candidate=False)
    if not placeable:
        why = ("chat ids are placed by a byte-length table (byte-level BPE) or by the segments between added "
               "tokens (added tokens matched on the raw text), and this tokenizer has neither")
        if requested != "auto":
            raise TokenizerError(f"--backend={requested}: {why}", hint="use --backend auto or --backend hf")
        return Opened(reference, requested, candidate=False,
                      load_failure=CheckRecord(False, candidate=AUTO_CANDIDATES[0], reason=why))
    opened = open_backend(requested, tok_json, allow_special_tokens=True)
    return opened if opened.candidate else replace(opened, backend=reference)


class SampledIds:
    """A candidate backend's ids for the chat encoder, with a sample of the rendered conversations and the
    ids it gave them kept for the check (the text path's ``Sampler``: the first batch's, and the first and
    last of every later one)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.sampler = Sampler()

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        flat, lengths = self.backend.encode_batch(texts)
        self.sampler.take(DocBatch(len(texts), strs=texts), flat, lengths)
        return flat, lengths


def with_ids(encoder: ChatEncoder, ids: IdsBackend | None) -> ChatEncoder:
    """``encoder`` taking its ids from ``ids`` (None: ``tokenizers``), sharing its tokenizer, template and
    byte-length table (building those again costs more than a small task's encoding)."""
    out = copy.copy(encoder)
    out.ids_backend = ids if encoder.placeable else None
    return out


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
            mark = len(seen.examples)
            for batch in item_records(item.input, item.work, read, seen):
                kept, conversations, tools = self._conversations(batch.records, path, seen)
                results = self.encoder.encode(conversations, tools) if conversations else []
                flat, lengths, trained, places = _written(kept, results, path, seen)
                _fail_on_first(seen, skips)
                if len(lengths):
                    writer.add(flat, lengths, trained, DocOrigins.of(item.work.input, *places))
                progress(len(lengths), int(flat.size), batch.nbytes)
                stop.check(work.index)
            _fail_on_first(seen, skips)      # a too-long last line ends the item without a batch
            # the item's examples in file order (its lines' reasons are found before its records')
            seen.examples[mark:] = sorted(seen.examples[mark:], key=_place_in_file)

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


def _place_in_file(example: SkipExample) -> tuple[bool, int, int]:
    """Where a skipped record was: by byte offset (text), else by line (a table's row)."""
    return example.byte is None, example.byte or 0, example.line or 0


def _fail_on_first(seen: SkipLog, skips: SkipLog) -> None:
    """Under --strict, fail (through ``skips``) on the batch's skip earliest in the file, if any."""
    if seen is skips or not seen.examples:
        return
    first = min(seen.examples, key=_place_in_file)
    skips.skip(first.reason, first.file, first.line, first.detail, byte=first.byte)


def _written(records: list[Record], results: list[EncodedConversation | ChatTemplateError], path: str,
             skips: SkipLog) -> tuple[np.ndarray, np.ndarray, Trained, tuple[list[int], list[int]]]:
    """The batch's kept conversations as flat ids, lengths, trained ranges and (offsets, lines); the others
    counted."""
    ids, counts, ranges = [], [], []
    offsets: list[int] = []
    lines: list[int] = []
    for rec, result in zip(records, results):
        if isinstance(result, ChatTemplateError):
            skips.skip("template_refused", path, rec.line, result.template_message, byte=rec.byte)
        elif result.ids.size == 0:
            skips.skip("empty", path, rec.line, "the template rendered nothing", byte=rec.byte)
        else:
            ids.append(result.ids)
            counts.append(len(result.trained))
            ranges.append(result.trained.astype(np.int64).reshape(-1, 2))
            offset, line = rec.origin()
            offsets.append(offset)
            lines.append(line)
    if not ids:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64), Trained.empty(), ([], [])
    lengths = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
    trained = Trained(np.asarray(counts, dtype=np.int64), np.concatenate(ranges))
    return np.concatenate(ids), lengths, trained, (offsets, lines)
