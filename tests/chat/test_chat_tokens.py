"""Issue 28: trained character spans -> trained token ranges (transformers' overlap rule), by offsets and
by the byte-length table, which must agree."""

from __future__ import annotations

import json

import numpy as np
import pytest
from chat_cases import TOKENIZERS
from helpers import reference_tokenizer

from shardprep.chat.tokens import ByteLengths, byte_spans, mask_of, ranges_of, trained_token_ranges


def _reference(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """transformers' loop in return_assistant_tokens_mask, written out."""
    mask, idx = [0] * len(offsets), 0
    for i, (start, end) in enumerate(offsets):
        while idx < len(spans) and start >= spans[idx][1]:
            idx += 1
        if idx == len(spans):
            break
        if end > spans[idx][0]:
            mask[i] = 1
    return mask


@pytest.mark.parametrize("seed", range(20))
def test_overlap_rule_equals_transformers_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, 60, size=int(rng.integers(2, 30))))
    offsets = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))        # contiguous, some empty tokens
    points = np.sort(rng.integers(0, 60, size=2 * int(rng.integers(0, 5)))).tolist()
    spans = [(points[i], points[i + 1]) for i in range(0, len(points), 2)]   # sorted, disjoint, some empty
    spans = [s for j, s in enumerate(spans) if j == 0 or s[0] >= spans[j - 1][1]]
    ours = mask_of(trained_token_ranges(np.array(offsets, dtype=np.int64).reshape(-1, 2), spans), len(offsets))
    assert ours.tolist() == _reference(offsets, spans)


def test_ranges_are_merged_runs() -> None:
    assert ranges_of(np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)).tolist() == [[0, 2], [3, 4], [6, 7]]
    assert ranges_of(np.zeros(3, dtype=bool)).shape == (0, 2)


@pytest.mark.parametrize("name", ["gpt2", "bpe-bytelevel-128k-deepseek-r1", "bpe-bytelevel-100k-cl100k-dolma2"])
def test_byte_lengths_place_tokens_as_offsets_do(name: str) -> None:
    path = TOKENIZERS / name / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"{path} missing")
    tokenizer = reference_tokenizer(path, specials_as_text=False)
    table = ByteLengths.from_tokenizer_json(json.loads(path.read_text(encoding="utf-8")))
    assert table is not None
    text = "héllo 世界 🙂\n\n  <|endoftext|> x<think>é</think>\u200d👩‍👩‍👧 tail"
    encoding = tokenizer.encode(text, add_special_tokens=False)
    places = table.token_spans(np.array(encoding.ids), text)
    assert places is not None
    offsets = np.array(encoding.offsets).reshape(-1, 2)
    for spans in ([(0, 3)], [(2, 9), (12, 13)], [(6, 6), (7, 8)], [(0, len(text))], [(13, 14), (15, 20)]):
        by_bytes = trained_token_ranges(places, byte_spans(text, spans))
        assert by_bytes.tolist() == trained_token_ranges(offsets, spans).tolist(), spans
    assert table.token_spans(np.array(encoding.ids), text + "x") is None       # lengths that do not add up


def test_no_table_for_tokenizers_that_are_not_plain_byte_level() -> None:
    path = TOKENIZERS / "bpe-spm-bytefallback-phi3-mini" / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"{path} missing")
    assert ByteLengths.from_tokenizer_json(json.loads(path.read_text(encoding="utf-8"))) is None


@pytest.mark.parametrize("backend", ["hf", "gigatoken"])
def test_an_ids_backend_gives_the_same_encodings(tmp_path, backend: str) -> None:
    """A fast backend's ids placed with the byte-length table equal the tokenizers route."""
    from chat_cases import CONVERSATIONS, chat_tokenizer, tokenizer_dir

    from shardprep.chat import ChatEncoder, EncodedConversation, load_chat_template
    from shardprep.tokenizer.backend import BACKENDS

    if backend == "gigatoken":
        pytest.importorskip("gigatoken")
    directory = tokenizer_dir(tmp_path, "qwen3-markers")
    tokenizer_json = (directory / "tokenizer.json").read_text(encoding="utf-8")
    fast = BACKENDS[backend](tokenizer_json, True)
    template = load_chat_template(directory)
    conversations = [c for name, c in CONVERSATIONS.items() if name != "content-none-tool-call"]
    shared = chat_tokenizer(directory / "tokenizer.json")
    reference = ChatEncoder(template=template, **shared).encode(conversations)
    ours = ChatEncoder(template=template, ids_backend=fast, **shared).encode(conversations)
    for a, b in zip(reference, ours):
        assert isinstance(a, EncodedConversation) and isinstance(b, EncodedConversation)
        assert a.ids.tolist() == b.ids.tolist() and a.trained.tolist() == b.trained.tolist()
