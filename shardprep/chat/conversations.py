"""One input record -> the list of messages a chat template is given (issue 28).

Three shapes are recognised, in this order when no field is named:

* ``messages``: OpenAI-style messages.  They reach the template as they are (transformers passes them
  unchanged, and templates read ``tool_calls``, ``reasoning_content``, ``name``, ``tool_call_id``...), so
  they are only validated: a list of objects, each with a string ``role`` and a ``content`` that is a
  string, a list of objects (content parts), null, or absent.
* ``conversations``: ShareGPT (``from``/``value``).  ``human``/``user`` -> user, ``gpt``/``assistant``/
  ``model``/``chatgpt``/``bard``/``bing`` -> assistant, ``system`` -> system, ``tool``/``observation``/
  ``function_response`` -> tool, and ``function_call`` -> an assistant message whose ``tool_calls`` holds the
  call (its ``value`` a JSON object with ``name`` and ``arguments``; the arguments passed on as a JSON
  string, OpenAI's form, with an empty ``content``: transformers drops null values before the template
  sees them, and templates concatenate the content).  Items already in ``role``/``content`` form are taken
  as messages.
* ``prompt`` + ``completion``: two strings -> a user and an assistant message; or two message lists
  (TRL's conversational prompt-completion) -> their concatenation.

Every error is a :class:`ChatRecordError` naming where the record is (``data.jsonl:12``) and the key path
(``messages[2].role``), so a task can count the record as skipped with its file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from shardprep.errors import InputDataError

MESSAGES = "messages"
CONVERSATIONS = "conversations"
PROMPT_COMPLETION = "prompt+completion"
KNOWN_FIELDS = (MESSAGES, CONVERSATIONS, PROMPT_COMPLETION)
# The roles of OpenAI-style messages (``developer``: newer OpenAI name for system; ``function``/``ipython``:
# older tool-result roles some templates know).  Any other is a record error rather than text rendered
# under a role no template expects (a typo such as "assitant" would otherwise train nothing, silently).
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")

SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "model": "assistant", "chatgpt": "assistant",
    "bard": "assistant", "bing": "assistant",
    "system": "system",
    "tool": "tool", "observation": "tool", "function_response": "tool",
}
FUNCTION_CALL = "function_call"

Message = dict[str, Any]


class ChatRecordError(InputDataError):
    """A record that holds no usable conversation; names where it is and the key path at fault."""

    def __init__(self, where: str, key: str, problem: str):
        super().__init__(f"{where}: {key}: {problem}")
        self.where = where
        self.key = key
        self.problem = problem


def chat_field_of(keys: Iterable[str]) -> str | None:
    """Which known conversation field a record's keys hold (``messages``, ``conversations`` or
    ``prompt+completion``), in the order :func:`conversation_from_record` tries them; None when none."""
    present = set(keys)
    if MESSAGES in present:
        return MESSAGES
    if CONVERSATIONS in present:
        return CONVERSATIONS
    if "prompt" in present and "completion" in present:
        return PROMPT_COMPLETION
    return None


def conversation_from_record(record: object, field: str | None, where: str) -> list[Message]:
    """The messages of one record.  ``field`` None finds the field (:func:`chat_field_of`); a named field
    other than ``prompt+completion`` holds either OpenAI messages or ShareGPT turns (told by their keys)."""
    if not isinstance(record, Mapping):
        raise ChatRecordError(where, "(record)", f"expected a JSON object, found {_kind(record)}")
    chosen = field or chat_field_of(record.keys())
    if chosen is None:
        found = ", ".join(sorted(map(str, record.keys()))[:8]) or "none"
        raise ChatRecordError(where, "(record)", "no conversation field: expected 'messages', 'conversations' "
                              f"or 'prompt' and 'completion' (keys found: {found})")
    if chosen == PROMPT_COMPLETION:
        return _prompt_completion(record, where)
    if chosen not in record:
        raise ChatRecordError(where, chosen, "missing")
    value = record[chosen]
    if chosen == CONVERSATIONS or (chosen != MESSAGES and _looks_sharegpt(value)):
        return _sharegpt(value, chosen, where)
    return validate_messages(value, chosen, where)


def validate_messages(value: object, key: str, where: str) -> list[Message]:
    """OpenAI messages, checked and returned as they are (the list itself is the record's)."""
    if not isinstance(value, list):
        raise ChatRecordError(where, key, f"expected a list of messages, found {_kind(value)}")
    if not value:
        raise ChatRecordError(where, key, "the conversation is empty")
    for i, message in enumerate(value):
        path = f"{key}[{i}]"
        if not isinstance(message, dict):
            raise ChatRecordError(where, path, f"expected an object, found {_kind(message)}")
        role = message.get("role")
        if not isinstance(role, str):
            raise ChatRecordError(where, f"{path}.role", f"expected a string, found {_kind(role)}")
        if role not in CHAT_ROLES:
            raise ChatRecordError(where, f"{path}.role", f"{role!r} is not a chat role ({', '.join(CHAT_ROLES)})")
        _check_content(message.get("content"), f"{path}.content", where)
    return value


def _check_content(content: object, path: str, where: str) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ChatRecordError(where, path, f"expected a string, a list of parts or null, found {_kind(content)}")
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise ChatRecordError(where, f"{path}[{j}]", f"expected a content part (an object), found {_kind(part)}")
        if part.get("type", "text") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type", "text")
            raise ChatRecordError(where, f"{path}[{j}]", f"a {kind!r} part: only text parts ({{type: text, text: "
                                  "...}}) can be tokenized")


def _looks_sharegpt(value: object) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "from" in value[0]


def _sharegpt(value: object, key: str, where: str) -> list[Message]:
    if not isinstance(value, list):
        raise ChatRecordError(where, key, f"expected a list of turns, found {_kind(value)}")
    if not value:
        raise ChatRecordError(where, key, "the conversation is empty")
    messages = []
    for i, turn in enumerate(value):
        path = f"{key}[{i}]"
        if not isinstance(turn, dict):
            raise ChatRecordError(where, path, f"expected an object, found {_kind(turn)}")
        if "from" not in turn and "role" in turn:
            messages.append(validate_messages([turn], key, where)[0])
            continue
        messages.append(_sharegpt_turn(turn, path, where))
    return messages


def _sharegpt_turn(turn: Mapping[str, Any], path: str, where: str) -> Message:
    speaker, text = turn.get("from"), turn.get("value")
    if not isinstance(speaker, str):
        raise ChatRecordError(where, f"{path}.from", f"expected a string, found {_kind(speaker)}")
    if not isinstance(text, str):
        raise ChatRecordError(where, f"{path}.value", f"expected a string, found {_kind(text)}")
    if speaker == FUNCTION_CALL:
        return {"role": "assistant", "content": "", "tool_calls": [_function_call(text, f"{path}.value", where)]}
    role = SHAREGPT_ROLES.get(speaker.lower())
    if role is None:
        known = ", ".join(sorted({*SHAREGPT_ROLES, FUNCTION_CALL}))
        raise ChatRecordError(where, f"{path}.from", f"unknown speaker {speaker!r} (known: {known})")
    return {"role": role, "content": text}


def _function_call(text: str, path: str, where: str) -> dict[str, Any]:
    try:
        call = json.loads(text)
    except ValueError as e:
        raise ChatRecordError(where, path, f"a function_call's value is not JSON ({e})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ChatRecordError(where, path, "a function_call's value must be an object with a string 'name'")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"type": "function", "function": {"name": call["name"], "arguments": arguments}}


def _prompt_completion(record: Mapping[str, Any], where: str) -> list[Message]:
    for key in ("prompt", "completion"):
        if key not in record:
            raise ChatRecordError(where, key, "missing")
    prompt, completion = record["prompt"], record["completion"]
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if isinstance(prompt, list) and isinstance(completion, list):
        return validate_messages(prompt, "prompt", where) + validate_messages(completion, "completion", where)
    raise ChatRecordError(where, "prompt", "'prompt' and 'completion' must both be strings or both message "
                          f"lists, found {_kind(prompt)} and {_kind(completion)}")


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
