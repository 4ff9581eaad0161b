"""A chat job's template, frozen beside its tokenizer: ``<output>/chat_template.json``.

The template decides every id and every trained token of a chat shard, so it is part of the plan like the
tokenizer: its text and the special tokens it is rendered with are written once at plan time, their digest
goes into job.json's options (and so into the plan fingerprint: a changed template is another plan, which
``--resume`` refuses), and every task renders with the frozen copy, checked against that digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from shardprep.chat.template import ChatTemplate
from shardprep.errors import TokenizerError
from shardprep.job.options import ChatOptions
from shardprep.shard.format import CHAT_TEMPLATE_FILE
from shardprep.storage.atomic import write_json_atomic


def _identity(template: ChatTemplate) -> dict[str, object]:
    return {"special_tokens": dict(sorted(template.special_tokens.items())), "template": template.text}


def template_digest(template: ChatTemplate) -> str:
    """sha256 of what renders a conversation: the template's text and its special tokens (not its origin)."""
    return hashlib.sha256(orjson.dumps(_identity(template), option=orjson.OPT_SORT_KEYS)).hexdigest()


def chat_options(template: ChatTemplate, *, messages_field: str | None, train_on: str,
                 train_thinking: bool) -> ChatOptions:
    return ChatOptions(template_digest(template), template.origin, messages_field, train_on, train_thinking)


def freeze_template(output: Path, template: ChatTemplate) -> None:
    write_json_atomic(output / CHAT_TEMPLATE_FILE, {"origin": template.origin, **_identity(template)})


def frozen_template(output: Path, chat: ChatOptions) -> ChatTemplate:
    """The plan's template, as frozen; a missing, unreadable or changed file is one TokenizerError naming it
    (exit 6, as for the frozen tokenizer)."""
    path = Path(output) / CHAT_TEMPLATE_FILE
    hint = "restore it, or re-plan into a new output directory"
    try:
        data = orjson.loads(path.read_bytes())
        template = ChatTemplate(data["template"], str(data.get("origin", path)), dict(data["special_tokens"]))
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise TokenizerError(f"{path} is not the plan's chat template ({e})", hint=hint) from None
    if template_digest(template) != chat.template_sha256:
        raise TokenizerError(f"{path} changed since planning: its digest is {template_digest(template)[:12]}, the "
                             f"plan's {chat.template_sha256[:12]}", hint=hint)
    return template
