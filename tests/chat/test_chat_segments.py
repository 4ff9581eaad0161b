"""Ids placed by the segments between added tokens (``chat.segments``) give exactly the trained ranges that
``tokenizers``' offsets give, on Phi-3 (SentencePiece-style: no byte table), and answer nothing rather than
a guess where a trained span ends inside a segment."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from chat_cases import CHAT, CONVERSATIONS, PAIRS, TOKENIZERS, chat_tokenizer
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.chat.encoder import ChatEncoder
from shardprep.chat.segments import SegmentPlacer
from shardprep.chat.template import ChatTemplate

WORDS = "hello world é 🙂 a  b\n\nc <think>x</think> code: `x = 1` über 日本 <|end|> <s> ".split(" ")


@functools.cache
def _encoders(pair: str, thinking: bool = True) -> tuple[ChatEncoder, ChatEncoder]:
    tok, template, bos, eos = PAIRS[pair]
    path, source = TOKENIZERS / tok / "tokenizer.json", CHAT / template
    if not path.is_file() or not source.is_file():
        pytest.skip("shared tokenizer or chat template missing")
    specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v}
    chat = ChatTemplate(source.read_text(encoding="utf-8"), str(source), specials)
    placed = ChatEncoder(template=chat, thinking=thinking, **chat_tokenizer(path))
    offsets = ChatEncoder(template=chat, thinking=thinking, byte_lengths=False, **chat_tokenizer(path))
    assert placed.segments is not None and placed.byte_lengths is None and offsets.segments is None
    return placed, offsets


def _conversation(rng: random.Random) -> list[dict]:
    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, n)))

    turns = [{"role": "system", "content": text(8)}] if rng.random() < 0.5 else []
    for _ in range(rng.randint(1, 3)):
        turns += [{"role": "user", "content": text(12)}, {"role": "assistant", "content": text(12)}]
    return turns


@pytest.mark.parametrize("pair", ["phi-3", "phi-3-markers"])
@pytest.mark.parametrize("thinking", [True, False])
@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10**6))
def test_segments_give_the_offsets_answer(pair, thinking, seed):
    placed, offsets = _encoders(pair, thinking)
    rng = random.Random(seed)
    conversations = list(CONVERSATIONS.values()) + [_conversation(rng) for _ in range(30)]
    for a, b in zip(placed.encode(conversations), offsets.encode(conversations)):
        if isinstance(b, Exception):
            assert type(a) is type(b)
            continue
        assert not isinstance(a, Exception)
        assert a.ids.tolist() == b.ids.tolist() and a.trained.tolist() == b.trained.tolist()


def test_most_conversations_are_placed_without_offsets():
    placed, _ = _encoders("phi-3")
    rng = random.Random(0)
    texts = [placed.trained_text(_conversation(rng)) for _ in range(50)]
    tok = placed.tokenizer
    answered = sum(placed.segments.place(np.asarray(tok.encode(t.text, add_special_tokens=False).ids), t.text,
                                         t.spans) is not None for t in texts)
    assert answered == len(texts)


def test_a_boundary_inside_a_segment_gets_no_answer():
    placer = SegmentPlacer({7: SegmentPlacer.from_tokenizer_json({"added_tokens": [
        {"id": 7, "content": "<m>", "rstrip": True}]}).added[7]})
    ids, text = np.array([1, 2, 7, 3]), "ab <m> c"
    spans, segments = placer.place(ids, text, [(7, 8)])
    assert spans.tolist() == [[0, 3], [0, 3], [3, 7], [7, 8]] and segments == [(7, 8)]
    assert placer.place(ids, text, [(1, 8)]) is None           # starts inside "ab ": offsets decide
    assert placer.place(np.array([1, 7]), "ab", []) is None     # the added token is not in the text
