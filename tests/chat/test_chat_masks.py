"""Issue 28's loss masks on templates without generation markers (the rule in shardprep/chat/spans.py),
checked by the "role characters" construction: system text is only 'S', user 'U', tool 'T', assistant 'A'
(and spaces), so no trained token may hold an S, U or T, every assistant character must be in a trained
token, and the end-of-turn marker after each assistant turn is trained.  Also the modes, thinking off,
refused conversations and the marker templates' own rule.  Needs /work/shared, not transformers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from chat_cases import PLAIN_PAIRS, chat_tokenizer, tokenizer_dir
from tokenizers import Tokenizer

from shardprep.chat import ChatEncoder, ChatTemplate, ChatTemplateError, EncodedConversation, load_chat_template
from shardprep.chat.tokens import mask_of
from shardprep.errors import ConfigError

END = {"deepseek-v3": "<｜end▁of▁sentence｜>", "phi-3": "<|end|>", "qwen3-gpt2": "<|im_end|>",
       "qwen3-dolma2": "<|im_end|>"}
# template text holding an 'A' that is no assistant's: never counted as assistant characters
HEADERS = ("<｜Assistant｜>",)


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("masks")


_ENCODERS: dict[tuple, ChatEncoder] = {}


def _encoder(tmp: Path, pair: str, **options: object) -> ChatEncoder:
    """One encoder per pair and options for the module: parsing the 128k DeepSeek tokenizer, building its
    byte table and compiling the template once is enough (the tests only encode with it)."""
    key = (tmp, pair, tuple(sorted(options.items())))
    if key not in _ENCODERS:
        directory = tokenizer_dir(tmp, pair)
        _ENCODERS[key] = ChatEncoder(template=load_chat_template(directory), **chat_tokenizer(directory / "tokenizer.json"),
                                     **options)  # type: ignore[arg-type]
    return _ENCODERS[key]


def _trained_chars(encoder: ChatEncoder, messages: list[dict]) -> tuple[str, np.ndarray, list[tuple[int, int]]]:
    """The render, a per-character 'inside a trained token' flag and the trained tokens' offsets."""
    (encoded,) = encoder.encode([messages])
    assert isinstance(encoded, EncodedConversation)
    text = encoder.trained_text(messages).text
    encoding = encoder.tokenizer.encode(text, add_special_tokens=False)
    assert encoding.ids == encoded.ids.tolist()
    mask = mask_of(encoded.trained, len(encoding.ids))
    covered = np.zeros(len(text), dtype=bool)
    tokens = [offsets for offsets, m in zip(encoding.offsets, mask) if m]
    for start, end in tokens:
        covered[start:end] = True
    return text, covered, tokens


def _role_text(letter: str, words: list[int]) -> str:
    return " ".join(letter * n for n in words)


def _role_conversation(seed: int, system: bool, tools: bool) -> list[dict]:
    rng = np.random.default_rng(seed)

    def text(letter: str) -> str:
        return _role_text(letter, [int(n) for n in rng.integers(1, 6, size=int(rng.integers(1, 5)))])

    messages: list[dict] = [{"role": "system", "content": text("S")}] if system else []
    for turn in range(int(rng.integers(1, 4))):
        messages.append({"role": "user", "content": text("U")})
        if tools and turn == 0:
            call = {"type": "function", "function": {"name": text("A").replace(" ", ""), "arguments": text("A")}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "content": text("T")})
        messages.append({"role": "assistant", "content": text("A")})
    return messages


def _assistant_positions(text: str) -> list[int]:
    hidden: set[int] = set()
    for header in HEADERS:
        for m in re.finditer(re.escape(header), text):
            hidden.update(range(m.start(), m.end()))
    return [i for i, c in enumerate(text) if c == "A" and i not in hidden]


@pytest.mark.parametrize("pair", PLAIN_PAIRS)
@pytest.mark.parametrize("seed", range(6))
def test_role_characters(tmp_module: Path, pair: str, seed: int) -> None:
    encoder = _encoder(tmp_module, pair)
    messages = _role_conversation(seed, system=seed % 2 == 0, tools=seed % 3 == 0 and pair != "phi-3")
    text, covered, tokens = _trained_chars(encoder, messages)
    for start, end in tokens:
        assert not set(text[start:end]) & set("SUT"), (pair, text[start:end], text)
    missed = [i for i in _assistant_positions(text) if not covered[i]]
    assert not missed, (pair, text, missed)
    assistant = set(_assistant_positions(text))
    for m in re.finditer(re.escape(END[pair]), text):   # trained exactly when it closes an assistant turn
        last_role = max(i for i in range(m.start()) if text[i] in "SUT" or i in assistant)
        assert covered[m.start():m.end()].all() == (last_role in assistant), (pair, m.start(), text)
        assert covered[m.start():m.end()].any() == (last_role in assistant), (pair, m.start(), text)


def test_qwen3_thinking_is_trained_after_the_last_query_only_as_rendered(tmp_module: Path) -> None:
    encoder = _encoder(tmp_module, "qwen3-gpt2")
    messages = [{"role": "user", "content": "UU"},
                {"role": "assistant", "content": "<think>\nearly\n</think>\n\nAA"},
                {"role": "user", "content": "UUU"},
                {"role": "assistant", "content": "<think>\nlate\n</think>\n\nA A"}]
    trained = encoder.trained_text(messages)
    pieces = [trained.text[a:b] for a, b in trained.spans]
    assert pieces == ["AA<|im_end|>", "<think>\nlate\n</think>\n\nA A<|im_end|>"]   # the earlier reasoning is dropped
    off = _encoder(tmp_module, "qwen3-gpt2", thinking=False).trained_text(messages)
    assert [off.text[a:b] for a, b in off.spans] == ["AA<|im_end|>", "A A<|im_end|>"]
    empty = encoder.trained_text(messages[:2])   # the final turn's empty think block belongs to the turn
    assert [empty.text[a:b] for a, b in empty.spans] == ["<think>\nearly\n</think>\n\nAA<|im_end|>"]


def test_deepseek_drops_earlier_reasoning_and_trains_tool_call_markers(tmp_module: Path) -> None:
    encoder = _encoder(tmp_module, "deepseek-v3")
    messages: list[dict] = [{"role": "user", "content": "U"},
                {"role": "assistant", "content": "<think>r</think>AA"},
                {"role": "user", "content": "U"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "content": "T"},
                {"role": "assistant", "content": "A"}]
    trained = encoder.trained_text(messages)
    pieces = [trained.text[a:b] for a, b in trained.spans]
    assert pieces[0] == "AA<｜end▁of▁sentence｜>"
    assert pieces[1].startswith("<｜tool▁calls▁begin｜>") and pieces[1].endswith(
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")
    assert pieces[2] == "A<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("pair", PLAIN_PAIRS)
def test_modes_last_and_all(tmp_module: Path, pair: str) -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "BB B"}, {"role": "user", "content": "UU"},
                {"role": "assistant", "content": "A AA"}]
    text, covered, tokens = _trained_chars(_encoder(tmp_module, pair, mode="last"), messages)
    assert tokens and not any(set(text[a:b]) & set("SUBT") for a, b in tokens)
    assert all(covered[i] for i in _assistant_positions(text))
    (everything,) = _encoder(tmp_module, pair, mode="all").encode([messages])
    assert isinstance(everything, EncodedConversation)
    assert everything.trained.tolist() == [[0, len(everything.ids)]]


@pytest.mark.parametrize("pair", ["phi-3-markers", "qwen3-markers"])
def test_marker_templates_last_and_thinking(tmp_module: Path, pair: str) -> None:
    messages = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nBB"},
                {"role": "user", "content": "U"}, {"role": "assistant", "content": "AA"}]
    last = _encoder(tmp_module, pair, mode="last").trained_text(messages)
    assert "".join(last.text[a:b] for a, b in last.spans).startswith(("AA<|end|>", "<think>\n\n</think>\n\nAA"))
    off = _encoder(tmp_module, pair, thinking=False).trained_text(messages)
    joined = "".join(off.text[a:b] for a, b in off.spans)
    assert "think" not in joined and "hmm" not in joined and "BB" in joined and "AA" in joined


def test_a_refused_conversation_is_an_error_in_its_place(tmp_module: Path) -> None:
    directory = tokenizer_dir(tmp_module, "qwen3-gpt2")
    strict = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
              "{% endif %}{{ '<|' + m.role + '|>' + m.content + '<|end|>' }}{% endfor %}")
    template = ChatTemplate(strict, "strict.jinja", {"eos_token": "<|endoftext|>"})
    encoder = ChatEncoder(template=template, **chat_tokenizer(directory / "tokenizer.json"))
    ok = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    system = [{"role": "system", "content": "S"}, *ok]
    twice = [ok[0], ok[0], ok[1]]
    results = encoder.encode([ok, system, twice, ok])
    assert isinstance(results[0], EncodedConversation) and isinstance(results[3], EncodedConversation)
    assert isinstance(results[1], ChatTemplateError) and results[1].template_message == "System role not supported"
    assert isinstance(results[2], ChatTemplateError) and "must alternate" in str(results[2])
    text = encoder.trained_text(ok)
    assert [text.text[a:b] for a, b in text.spans] == ["A<|end|>"]


def test_a_template_that_does_not_compile_names_its_file() -> None:
    from shardprep.chat import Renderer

    with pytest.raises(ConfigError, match="broken.jinja"):
        Renderer(ChatTemplate("{% for m in messages %}", "broken.jinja"))
    with pytest.raises(ConfigError, match="mode"):
        ChatEncoder(Tokenizer.from_str('{"version":"1.0","model":{"type":"BPE","vocab":{},"merges":[]}}'),
                    ChatTemplate("x", "t.jinja"), mode="everything")


@pytest.mark.parametrize("pair", PLAIN_PAIRS)
def test_regions_found_at_once_equal_those_found_one_message_at_a_time(tmp_module: Path, pair: str) -> None:
    from chat_cases import CONVERSATIONS

    from shardprep.chat.attribution import _all_at_once, _one_message, _placeholder_pairs
    from shardprep.chat.render import ChatTemplateError, Renderer, prepare_messages

    renderer = Renderer(load_chat_template(tokenizer_dir(tmp_module, pair)))
    checked = 0
    for messages in CONVERSATIONS.values():
        prepared = prepare_messages(messages)
        try:
            text = renderer.render_prepared(prepared)
        except ChatTemplateError:
            continue
        indices = [i for i, m in enumerate(prepared) if m["role"] == "assistant"]
        pairs = _placeholder_pairs(text, len(indices))
        at_once = _all_at_once(renderer, prepared, text, indices, pairs)
        one_by_one = {i: r for i, p in zip(indices, pairs) if (r := _one_message(renderer, prepared, text, i, p))}
        assert at_once == one_by_one, messages
        checked += 1
    assert checked >= 6


def test_an_ambiguous_alignment_falls_back_to_one_message_at_a_time() -> None:
    from shardprep.chat.render import Renderer
    from shardprep.chat.spans import SpanRule

    template = ChatTemplate("{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}<|end|>"
                            "{% else %}[{{ m.content }}]{% endif %}{% endfor %}", "t.jinja")
    messages = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A<|end|>A"},
                {"role": "assistant", "content": "AA"}]
    trained = SpanRule(Renderer(template)).apply(messages)
    assert [trained.text[a:b] for a, b in trained.spans] == ["A<|end|>A<|end|>AA<|end|>"]
    assert trained.spans == [(3, len(trained.text))]
    last = SpanRule(Renderer(template), mode="last").apply(messages)
    assert [last.text[a:b] for a, b in last.spans] == ["AA<|end|>"]


def test_last_mode_trains_nothing_when_the_last_assistant_message_wrote_nothing_of_its_own() -> None:
    from shardprep.chat.render import Renderer
    from shardprep.chat.spans import SpanRule

    template = ChatTemplate("{% for m in messages %}{% if m.role == 'assistant' and loop.last %}<|a|>fixed<|end|>"
                            "{% else %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}{% endfor %}", "t.jinja")
    messages = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
                {"role": "user", "content": "U"}, {"role": "assistant", "content": "ignored"}]
    assert SpanRule(Renderer(template), mode="last").apply(messages).spans == []
    every = SpanRule(Renderer(template)).apply(messages)
    assert [every.text[a:b] for a, b in every.spans] == ["A<|end|>"]
