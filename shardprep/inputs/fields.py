"""Does every input hold the text field?  Checked at plan time on a sample of each input.

Why: a wrong ``--text-field`` used to surface only inside the tasks, after ``sbatch``: a parquet or Arrow
task failed on the missing column, and a jsonl task skipped every line as ``missing_field``, so a job of
several files lost the wrong ones' documents with a warning, or ended with "zero documents".  ``plan``,
``submit`` and ``doctor`` now ask this module first, and a job whose inputs lack the field is refused
before anything is queued, naming the keys or columns the input does have.

The sample is small and stops early: a parquet file's schema (its footer), an Arrow file's schema (its
first message), or the head of a jsonl file (plain, .gz or .zst) until the first JSON object with the
field as a string, at most ``SAMPLE_LINES`` lines or ``SAMPLE_BYTES`` decompressed bytes.  A jsonl head
with no JSON object at all says nothing about the field (binary or mis-encoded input is the reader's and
``inputs.health``'s to report), so only a head of objects that all lack the field is refused.  txt inputs
have no field.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterable, Iterator

import orjson

from shardprep.errors import InputDataError
from shardprep.inputs.blocks import UTF8_BOM
from shardprep.inputs.discover import InputFile
from shardprep.inputs.planned import OpenInput, parquet_file
from shardprep.inputs.readers import beyond_double
from shardprep.inputs.remote import in_parallel, is_input_url

SAMPLE_LINES = 100
SAMPLE_BYTES = 1 << 20
_READ = 64 << 10
KEYS_SHOWN = 12


@dataclass
class HeadFields:
    """What the head of one jsonl input says: objects read, whether one has the field, the keys seen."""

    lines: int = 0
    objects: int = 0
    has_field: bool = False
    keys: dict[str, None] = field(default_factory=dict)      # first-seen order

    def keys_text(self) -> str:
        shown = list(self.keys)[:KEYS_SHOWN]
        return ", ".join(shown) + (f", ... ({len(self.keys)} keys)" if len(self.keys) > KEYS_SHOWN else "")


def _decompressed(raw: BinaryIO, compression: str | None) -> BinaryIO | gzip.GzipFile:
    if compression == "gz":
        return gzip.GzipFile(fileobj=raw)
    if compression == "zst":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw)
    return raw


def head_lines(inp: InputFile) -> Iterator[bytes]:
    """The first complete lines of a (decompressed) text input, up to the sample limits (also ``doctor``'s
    look at txt inputs)."""
    with OpenInput(inp) as opened, opened.buffered() as raw, _decompressed(raw, inp.compression) as stream:
        pending, read, lines = b"", 0, 0
        while read < SAMPLE_BYTES and lines < SAMPLE_LINES:
            try:
                block = stream.read(_READ)
            except Exception:   # noqa: BLE001 - a corrupt stream: the task reports it, naming the byte
                return
            if not block:
                if pending:
                    yield pending
                return
            if not read and block.startswith(UTF8_BOM):     # as the task reads it (inputs.blocks)
                read, block = len(UTF8_BOM), block[len(UTF8_BOM):]
            read += len(block)
            *complete, pending = (pending + block).split(b"\n")
            for line in complete[:SAMPLE_LINES - lines]:
                lines += 1
                yield line


def jsonl_head(inp: InputFile, text_field: str | None) -> HeadFields:
    """Read the head of a jsonl input until an object has ``text_field`` as a string (or the limits;
    None: to the limits, for the keys)."""
    head = HeadFields()
    for line in head_lines(inp):
        head.lines += 1
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            obj = beyond_double(line, str(e))[0]      # as the task reads it (inputs.readers)
            if obj is None:
                continue
        if type(obj) is not dict:
            continue
        head.objects += 1
        head.keys.update(dict.fromkeys(obj))
        if text_field is not None and isinstance(obj.get(text_field), str):
            head.has_field = True
            break
    return head


def column_types(inp: InputFile) -> dict[str, Any]:
    """The columns of a parquet or Arrow input and their pyarrow types, from its schema only."""
    if inp.format == "parquet":
        with OpenInput(inp) as opened:
            schema = parquet_file(opened).schema_arrow
            return dict(zip(schema.names, schema.types))
    from shardprep.inputs.arrow import column_types as arrow_columns

    return arrow_columns(inp.path)


def is_text_type(kind: Any) -> bool:
    """Whether a column of pyarrow type ``kind`` gives documents: strings (also dictionary-encoded or
    views), or a column of nulls only (each an empty document, as a null jsonl field is).  Any other type
    (integers, binary, lists ...) gives none: every row would be skipped, and the job end with zero
    documents at ``finalize`` (issue 31)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
                or getattr(pa.types, "is_string_view", lambda _: False)(kind))


def field_problem(inp: InputFile, text_field: str) -> str | None:
    """Why ``inp`` cannot give documents from ``text_field`` (one line naming what it has), or None."""
    if inp.tabular:
        types = column_types(inp)
        if text_field not in types:
            return f"{inp.path}: no column {text_field!r} (columns: {', '.join(types)})"
        if is_text_type(types[text_field]):
            return None
        texts = [name for name, kind in types.items() if is_text_type(kind)]
        return (f"{inp.path}: column {text_field!r} holds {types[text_field]}, not text (text columns: "
                f"{', '.join(texts) or 'none'})")
    if inp.format != "jsonl" or inp.size == 0:
        return None
    head = jsonl_head(inp, text_field)
    if head.has_field or head.objects == 0:
        return None
    return (f"{inp.path}: none of its first {head.objects:,} JSON object(s) has a string field {text_field!r} "
            f"(keys seen: {head.keys_text() or 'none'})")


def require_text_field(inputs: Iterable[InputFile], text_field: str) -> None:
    """Refuse (InputDataError, exit 3) when an input lacks ``text_field``: one line, the first such input
    and how many others."""
    inputs = list(inputs)
    if any(is_input_url(i.path) for i in inputs):      # remote: a request per input, several at once
        found = in_parallel(lambda inp: field_problem(inp, text_field), inputs)
    else:
        found = [field_problem(inp, text_field) for inp in inputs]
    problems = [(inp, p) for inp, p in zip(inputs, found) if p is not None]
    if problems:
        from shardprep.chat.conversations import chat_field_of

        first, problem = problems[0]
        more = f" (and {len(problems) - 1:,} more input(s) like it)" if len(problems) > 1 else ""
        chat = chat_field_of(record_keys(first) or ())
        hint = (f"these records hold conversations ({chat!r}): add --chat to render them with the chat template "
                "(docs/chat.md)" if chat else "choose the field or column that holds the text with --text-field")
        raise InputDataError(problem + more, hint=hint)


def record_keys(inp: InputFile) -> list[str] | None:
    """The columns of a table, or the keys of a jsonl input's first records; None: a text file, or no records."""
    if inp.format == "txt":
        return None
    if inp.tabular:
        return list(column_types(inp))
    head = jsonl_head(inp, None) if inp.size else None
    return list(head.keys) if head is not None and head.objects else None


def chat_problem(inp: InputFile, field: str | None) -> str | None:
    """Why ``inp`` cannot give conversations (from ``field``; None: any field ``--chat`` knows), or None."""
    from shardprep.chat.conversations import chat_field_of

    if inp.format == "txt":
        return f"{inp.path}: a text file holds no records: --chat reads jsonl, parquet or arrow records"
    names = record_keys(inp)
    if names is None:          # an empty jsonl input: nothing to refuse
        return None
    found = (field in names) if field is not None else chat_field_of(names) is not None
    if found:
        return None
    wanted = repr(field) if field is not None else "'messages', 'conversations' or 'prompt' + 'completion'"
    return f"{inp.path}: no field {wanted} in its records (keys: {', '.join(names) or 'none'})"


def require_chat_field(inputs: Iterable[InputFile], field: str | None) -> None:
    """``--chat``: refuse (exit 3) an input whose records hold no conversation field, naming it."""
    inputs = list(inputs)
    problems = [p for p in (chat_problem(i, field) for i in inputs) if p is not None]
    if problems:
        more = f" (and {len(problems) - 1:,} more input(s) like it)" if len(problems) > 1 else ""
        hint = ("write the conversations as jsonl records ({\"messages\": [...]}), or plan the text without --chat"
                if "a text file holds no records" in problems[0] else
                "name the field that holds the conversation with --messages-field")
        raise InputDataError(problems[0] + more, hint=hint)
