"""Issue 28: records -> conversations (OpenAI messages as they are, ShareGPT, prompt/completion), errors
that name where and the key; and where the chat template comes from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from shardprep.chat import ChatRecordError, chat_field_of, conversation_from_record, load_chat_template
from shardprep.chat.template import ChatTemplate
from shardprep.errors import ConfigError, InputDataError

WHERE = "data.jsonl:12"


def test_openai_messages_pass_as_they_are() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "bob"},
                {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "c1",
                                                                        "function": {"name": "f", "arguments": "{}"}}],
                 "reasoning_content": "why"},
                {"role": "tool", "content": "42", "tool_call_id": "c1"}]
    assert conversation_from_record({"messages": messages, "id": 3}, None, WHERE) is messages


@pytest.mark.parametrize("record, key", [
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "a"}, "b"]}, "messages[1]"),
    ({"messages": [{"role": "user", "content": "a"}, {"content": "b"}]}, "messages[1].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]"),
    # hostile (issue 28): a role no template expects, content parts that are not text
    ({"messages": [{"role": "narrator", "content": "a"}]}, "messages[0].role"),
    ({"messages": [{"role": "assitant", "content": "a"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0]"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, "conversations[0].from"),
    ({"conversations": [{"from": "human", "value": None}]}, "conversations[0].value"),
    ({"conversations": [{"from": "function_call", "value": "not json"}]}, "conversations[0].value"),
    ({"prompt": "a", "completion": ["b"]}, "prompt"),
    ({"text": "plain"}, "(record)"),
    (["not", "an", "object"], "(record)"),
])
def test_bad_records_name_where_and_key(record: object, key: str) -> None:
    with pytest.raises(ChatRecordError) as caught:
        conversation_from_record(record, None, WHERE)
    assert caught.value.key == key and caught.value.where == WHERE
    assert str(caught.value).startswith(f"{WHERE}: {key}: ")
    assert isinstance(caught.value, InputDataError)


def test_sharegpt_is_normalised() -> None:
    record = {"conversations": [
        {"from": "system", "value": "S"}, {"from": "human", "value": "U"}, {"from": "gpt", "value": "A"},
        {"from": "function_call", "value": json.dumps({"name": "f", "arguments": {"x": 1}})},
        {"from": "observation", "value": "T"}, {"from": "gpt", "value": "A2"}]}
    assert conversation_from_record(record, None, WHERE) == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "content": "T"}, {"role": "assistant", "content": "A2"}]
    # a named field holding ShareGPT turns is recognised by its keys
    assert conversation_from_record({"chat": record["conversations"][:3]}, "chat", WHERE)[2] == {
        "role": "assistant", "content": "A"}


def test_prompt_completion_strings_and_message_lists() -> None:
    assert conversation_from_record({"prompt": "P", "completion": "C"}, None, WHERE) == [
        {"role": "user", "content": "P"}, {"role": "assistant", "content": "C"}]
    prompt = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    completion = [{"role": "assistant", "content": "A"}]
    assert conversation_from_record({"prompt": prompt, "completion": completion}, None, WHERE) == prompt + completion


def test_chat_field_of_follows_the_order_tried() -> None:
    assert chat_field_of(["messages", "conversations"]) == "messages"
    assert chat_field_of(["id", "conversations"]) == "conversations"
    assert chat_field_of(["prompt", "completion"]) == "prompt+completion"
    assert chat_field_of(["prompt", "text"]) is None


def _tokenizer_dir(tmp_path: Path, config: dict | None) -> Path:
    (tmp_path / "tokenizer.json").write_text("{}")
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_template_from_the_config_with_its_special_tokens(tmp_path: Path) -> None:
    directory = _tokenizer_dir(tmp_path, {"chat_template": "{{ bos_token }}x", "eos_token": "</s>",
                                          "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False},
                                          "add_bos_token": True, "pad_token": None})
    template = load_chat_template(directory / "tokenizer.json")
    assert template.text == "{{ bos_token }}x"
    assert template.special_tokens == {"bos_token": "<s>", "eos_token": "</s>"}
    assert template.sha256 == hashlib.sha256(b"{{ bos_token }}x").hexdigest()
    assert "tokenizer_config.json" in template.origin and not template.has_generation_markers


def test_named_templates_the_jinja_file_and_an_explicit_file(tmp_path: Path) -> None:
    named = [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "{% generation %}T{% endgeneration %}"}]
    directory = _tokenizer_dir(tmp_path, {"chat_template": named})
    assert load_chat_template(directory).text == "D"
    assert load_chat_template(directory, name="tool_use").has_generation_markers
    with pytest.raises(ConfigError, match="no chat template named 'rag'.*default, tool_use"):
        load_chat_template(directory, name="rag")
    (directory / "chat_template.jinja").write_text("J")        # transformers lets the file win over the config
    assert load_chat_template(directory).text == "J"
    explicit = tmp_path / "mine.jinja"
    explicit.write_text("E")
    chosen = load_chat_template(directory, explicit_file=explicit)
    assert (chosen.text, chosen.origin) == ("E", str(explicit))


def test_no_template_names_the_config(tmp_path: Path) -> None:
    directory = _tokenizer_dir(tmp_path, {"eos_token": "</s>"})
    with pytest.raises(ConfigError, match="tokenizer_config.json: no chat template"):
        load_chat_template(directory)
    (directory / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(ConfigError, match="tokenizer_config.json: cannot read it as JSON"):
        load_chat_template(directory)


def test_a_frozen_template_checks_its_digest() -> None:
    template = ChatTemplate("T", "plan")
    assert ChatTemplate("T", "plan", sha256=template.sha256) == template
    with pytest.raises(ConfigError, match="sha256"):
        ChatTemplate("changed", "plan", sha256=template.sha256)
