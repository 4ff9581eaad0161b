"""Issue 28: a conversation renders and tokenizes exactly as transformers' apply_chat_template does, and on
templates with ``{% generation %}`` markers the trained tokens equal its ``assistant_masks``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chat_cases import CONVERSATIONS, MARKER_PAIRS, PAIRS, chat_tokenizer, hf_reference, hf_tokenizer, tokenizer_dir
from conftest import examples

from shardprep.chat import ChatEncoder, ChatTemplateError, EncodedConversation, Renderer, load_chat_template
from shardprep.chat.tokens import mask_of

pytestmark = pytest.mark.requires("hf")


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chat")


_ENCODERS: dict[Path, ChatEncoder] = {}


def _encoder(directory: Path) -> ChatEncoder:
    """The chat core on the pair's tokenizer and template, built once per directory (a tokenizer of 128k
    tokens, its byte table and the compiled template take a second); the tests only encode with it."""
    if directory not in _ENCODERS:
        _ENCODERS[directory] = ChatEncoder(template=load_chat_template(directory),
                                           **chat_tokenizer(directory / "tokenizer.json"))
    return _ENCODERS[directory]


def _compare(hf: Any, encoder: ChatEncoder, conversations: list[list[dict]], masks: bool) -> None:
    results = encoder.encode(conversations)
    for messages, ours in zip(conversations, results):
        reference = hf_reference(hf, messages, masks)
        if isinstance(reference, Exception):
            assert isinstance(ours, ChatTemplateError), (messages, reference)
            assert str(reference) in ours.template_message
            continue
        assert isinstance(ours, EncodedConversation), (messages, ours)
        ids, mask = reference
        assert ours.ids.tolist() == ids, messages
        if masks:
            assert mask_of(ours.trained, len(ids)).tolist() == mask, messages


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_text_ids_and_masks_equal_transformers(tmp_module: Path, pair: str) -> None:
    directory = tokenizer_dir(tmp_module, pair)
    hf = hf_tokenizer(directory)
    template = load_chat_template(directory / "tokenizer.json")
    renderer = Renderer(template)
    for messages in CONVERSATIONS.values():
        try:
            expected = hf.apply_chat_template(messages, tokenize=False)
        except Exception:
            continue
        assert renderer.render(messages).text == expected
    # the template read from tokenizer.json's path
    encoder = ChatEncoder(template=template, **chat_tokenizer(directory / "tokenizer.json"))
    _compare(hf, encoder, list(CONVERSATIONS.values()), masks=pair in MARKER_PAIRS)
    # the offsets route gives the same answer as the byte-length route
    by_offsets = ChatEncoder(encoder.tokenizer, template, byte_lengths=False)
    _compare(hf, by_offsets, list(CONVERSATIONS.values()), masks=pair in MARKER_PAIRS)


def test_deepseek_refuses_a_tool_call_with_null_content_as_transformers_does(tmp_module: Path) -> None:
    directory = tokenizer_dir(tmp_module, "deepseek-v3")
    hf = hf_tokenizer(directory)
    messages = CONVERSATIONS["content-none-tool-call"]
    assert isinstance(hf_reference(hf, messages, False), Exception)
    encoder = _encoder(directory)
    good = CONVERSATIONS["system-multi-turn"]
    first, refused, last = encoder.encode([good, messages, good])
    assert isinstance(refused, ChatTemplateError) and "content" in refused.template_message
    assert isinstance(first, EncodedConversation) and isinstance(last, EncodedConversation)
    assert first.ids.tolist() == last.ids.tolist() == hf_reference(hf, good, False)[0]  # type: ignore[index]


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = [*"ab Z.\n\t😀é世<>|/", "<think>", "</think>", "<|im_end|>", "<|end|>", "  ", "\n\n"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)


@st.composite
def _conversations(draw: st.DrawFn) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(_TEXT)})
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(_TEXT)})
        message = {"role": "assistant", "content": draw(_TEXT)}
        if draw(st.booleans()):
            message["reasoning_content"] = draw(_TEXT)
        messages.append(message)
    return messages


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_generated_conversations_equal_transformers(tmp_module: Path, pair: str) -> None:
    directory = tokenizer_dir(tmp_module, pair)
    hf = hf_tokenizer(directory)
    encoder = _encoder(directory)

    @settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_conversations(), min_size=1, max_size=4))
    def check(conversations: list[list[dict]]) -> None:
        _compare(hf, encoder, conversations, masks=pair in MARKER_PAIRS)

    check()


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & \"here\" é",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.mark.parametrize("pair", ["qwen3-gpt2", "qwen3-markers"])
def test_tools_render_as_transformers_renders_them(tmp_module: Path, pair: str) -> None:
    directory = tokenizer_dir(tmp_module, pair)
    hf = hf_tokenizer(directory)
    encoder = _encoder(directory)
    messages = CONVERSATIONS["tool-calls"]
    assert encoder.renderer.render(messages, TOOLS).text == hf.apply_chat_template(messages, tools=TOOLS,
                                                                                     tokenize=False)
    (ours,) = encoder.encode([messages], tools=[TOOLS])
    out = hf.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=True,
                                 return_assistant_tokens_mask=pair in MARKER_PAIRS)
    assert isinstance(ours, EncodedConversation) and ours.ids.tolist() == out["input_ids"]
    if pair in MARKER_PAIRS:
        assert mask_of(ours.trained, len(ours.ids)).tolist() == out["assistant_masks"]
    trained = encoder.trained_text(messages, TOOLS)
    assert not any("get_weather\", \"description" in trained.text[a:b] for a, b in trained.spans)


def test_one_bos_only(tmp_module: Path) -> None:
    directory = tokenizer_dir(tmp_module, "deepseek-v3")
    encoder = _encoder(directory)
    (ours,) = encoder.encode([CONVERSATIONS["system-multi-turn"]])
    assert isinstance(ours, EncodedConversation)
    bos = encoder.tokenizer.token_to_id("<｜begin▁of▁sentence｜>")
    assert ours.ids[0] == bos and int((ours.ids == bos).sum()) == 1
