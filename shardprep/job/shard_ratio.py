"""Shard bytes per input byte, measured on a small sample of the inputs at plan time.

The sizing rule (``job.sizing``) needs it to keep every shard above 16 MiB: how many input bytes make a
16 MiB shard depends on the text (English vs Korean vs JSON with large metadata), the tokenizer (bytes
per token) and the id width (uint16 or uint32).  A guess would be wrong by 4x either way; the sample costs
a few hundred KiB of reading and tokenizing (~0.1 s).

Only uncompressed text inputs (jsonl, txt) are sampled: their size on disk is the bytes the reader
consumes.  Compressed and columnar inputs understate their text, so their true ratio is only higher than
any text sample says; with no text input at all the ratio is unknown (None).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import OpenInput
from shardprep.inputs.readers import SkipLog, WorkItem, iter_documents
from shardprep.inputs.remote import in_parallel, is_input_url
from shardprep.job.options import TokenizeOptions

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.tokenizer.backend import Backend

log = logging.getLogger(__name__)

SAMPLE_FILES = 8                # files sampled, spread evenly over the sorted inputs
SAMPLE_BYTES_PER_FILE = 64 << 10


def _head_end(inp: InputFile, limit: int) -> int:
    """Where the first ``limit`` bytes of ``inp`` end on a line boundary (the whole file if smaller)."""
    if inp.size <= limit:
        return inp.size
    with OpenInput(inp) as opened:
        head = opened.raw.read(limit)
    cut = head.rfind(b"\n") + 1
    return cut if cut > 0 else inp.size     # one line longer than the sample: the reader decides


def _sampled(inputs: Sequence[InputFile]) -> list[tuple[int, InputFile]]:
    text = [(i, inp) for i, inp in enumerate(inputs) if inp.splittable and inp.size > 0]
    if len(text) <= SAMPLE_FILES:
        return text
    step = len(text) / SAMPLE_FILES
    return [text[int(k * step)] for k in range(SAMPLE_FILES)]


def sample_shard_ratio(inputs: Sequence[InputFile], backend: Backend, options: TokenizeOptions,
                       id_bytes: int) -> float | None:
    """Tokens x ``id_bytes`` per input byte over the heads of up to ``SAMPLE_FILES`` text inputs, encoded by
    ``backend`` (the plan's hf reference); None when nothing could be sampled (no uncompressed text input,
    or no document in the sample)."""
    picked = _sampled(inputs)
    if not picked:
        return None
    lenient = replace(options, strict=False)        # bad lines are the task's to report, not the plan's

    def head(picked_input: tuple[int, InputFile]) -> tuple[int, list[str]] | None:
        """(bytes consumed, documents) of one input's head; None when it cannot be read."""
        idx, inp = picked_input
        end = _head_end(inp, SAMPLE_BYTES_PER_FILE)
        try:
            return end, list(iter_documents(inp, WorkItem(idx, 0, end, "bytes", 1), lenient, SkipLog()))
        except Exception as e:   # noqa: BLE001 - an unreadable input fails its task with a clear error
            log.debug("shard ratio sample: skipped %s (%s)", inp.path, e)
            return None

    # remote heads are two requests each: read several at once, as the plan's other per-input reads are
    heads = in_parallel(head, picked) if any(is_input_url(inp.path) for _, inp in picked) else map(head, picked)
    extra = int(options.add_eos) + int(options.add_bos)
    consumed = tokens = 0
    for got in heads:
        if got is None:
            continue
        end, docs = got
        consumed += end
        if docs:
            _, lengths = backend.encode_batch(docs)
            tokens += int(np.sum(lengths)) + extra * len(docs)
    if consumed == 0 or tokens == 0:
        return None
    return tokens * id_bytes / consumed
