"""Issue 28 at the CLI: ``submit --chat`` writes every conversation exactly as transformers'
``apply_chat_template(tokenize=True)`` tokenizes it, with the chat core's trained ranges, from every input
format, over several tasks, for every conversation shape and training option."""

from __future__ import annotations

from pathlib import Path

import pytest
from chat_cases import CHAT, CONVERSATIONS, hf_reference, hf_tokenizer, tokenizer_dir
from chat_job_cases import (
    SIMPLE,
    core_encoded,
    phi3_dir,
    records,
    shard_conversations,
    sidecars,
    submit_chat,
    trained_mask,
    write_hf_dataset,
    write_jsonl,
    write_parquet,
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return phi3_dir(tmp_path_factory.mktemp("chat-tok"))


def _conversations(rows: list[dict]) -> list[list[dict]]:
    return [r["messages"] for r in rows]


@pytest.mark.requires("hf")
@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "hf-dataset"])
def test_ids_equal_transformers_and_trained_ranges_the_cores(tmp_path: Path, tok: Path, fmt: str) -> None:
    columnar = fmt in ("parquet", "hf-dataset")
    rows = records(24, SIMPLE if columnar else None)       # tables need one shape of message
    if fmt == "parquet":
        inp = write_parquet(tmp_path / "data.parquet", rows)
    elif fmt == "hf-dataset":
        inp = write_hf_dataset(tmp_path / "saved", rows)
    else:
        inp = write_jsonl(tmp_path / f"data.{fmt}", rows)
    out = tmp_path / "out"
    submit_chat(inp, out, tok)
    got = shard_conversations(out)
    hf = hf_tokenizer(tok)
    expected = [hf_reference(hf, m, False) for m in _conversations(rows)]
    accepted = [(i, e) for i, e in enumerate(expected) if not isinstance(e, Exception)]
    assert [ids for ids, _ in got] == [e[0] for _, e in accepted]
    kept = [_conversations(rows)[i] for i, _ in accepted]
    assert got == core_encoded(tok, kept)
    assert all(ranges for _, ranges in got)
    totals = sidecars(out)
    assert sum(s["trained_tokens"] for s in totals) == sum(b - a for _, r in got for a, b in r)
    refused = sum(s["skipped"]["template_refused"] + s["skipped"]["bad_conversation"] for s in totals)
    assert refused == len(rows) - len(accepted)


@pytest.mark.requires("hf")
def test_marker_template_ranges_equal_transformers_assistant_masks(tmp_path: Path, tok: Path) -> None:
    template = CHAT / "trl-generation-markers" / "phi3_training.jinja"
    rows = records(len(CONVERSATIONS))
    out = tmp_path / "out"
    submit_chat(write_jsonl(tmp_path / "data.jsonl", rows), out, tok, "--chat-template", template)
    marked = phi3_dir(tmp_path / "marked", template.read_text(encoding="utf-8"))
    hf = hf_tokenizer(marked)
    got = iter(shard_conversations(out))
    compared = 0
    for messages in _conversations(rows):
        reference = hf_reference(hf, messages, True)
        if isinstance(reference, Exception):
            continue
        ids, ranges = next(got)
        assert ids == reference[0], messages
        assert trained_mask(ranges, len(ids)) == reference[1], messages
        compared += 1
    assert compared >= len(rows) // 2 and next(got, None) is None
    assert sum(s["skipped"]["template_refused"] + s["skipped"]["bad_conversation"]
               for s in sidecars(out)) == len(rows) - compared


def test_several_tasks_keep_every_conversation_in_order(tmp_path: Path, tok: Path) -> None:
    rows = records(150, SIMPLE)
    split = tmp_path / "big.jsonl"
    write_jsonl(split, rows[:100])
    files = tmp_path / "files"
    files.mkdir()
    for k in range(3):       # and a directory of small files, one task each
        write_jsonl(files / f"part-{k}.jsonl", rows[100 + 10 * k:110 + 10 * k])
    out = tmp_path / "out"
    submit_chat(split, out, tok, "--target-task-bytes", "8K", "--force-small-tasks")
    assert len(sidecars(out)) >= 3
    assert shard_conversations(out) == core_encoded(tok, _conversations(rows[:100]))
    out2 = tmp_path / "out2"
    submit_chat(files, out2, tok, "--one-file-per-task")
    assert len(sidecars(out2)) == 3
    assert shard_conversations(out2) == core_encoded(tok, _conversations(rows[100:130]))


def test_sharegpt_and_prompt_completion_records(tmp_path: Path, tok: Path) -> None:
    share = [{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": f"Q{i}?"},
                                {"from": "gpt", "value": f"A{i}."}]} for i in range(4)]
    pc = [{"prompt": [{"role": "user", "content": f"P{i}"}], "completion": [{"role": "assistant",
                                                                            "content": f"C{i}"}]}
          for i in range(4)]
    out = tmp_path / "out"
    submit_chat([write_jsonl(tmp_path / "share.jsonl", share), write_jsonl(tmp_path / "pc.jsonl", pc)], out, tok)
    expected = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Q{i}?"},
                 {"role": "assistant", "content": f"A{i}."}] for i in range(4)]
    expected += [[{"role": "user", "content": f"P{i}"}, {"role": "assistant", "content": f"C{i}"}] for i in range(4)]
    got = shard_conversations(out)
    want = core_encoded(tok, expected)
    assert sorted(got) == sorted(want) and len(got) == 8     # the plan orders its inputs itself


def test_messages_field_names_another_key(tmp_path: Path, tok: Path) -> None:
    rows = [{"dialog": r["messages"], "messages": "not this one"} for r in records(6, SIMPLE)]
    out = tmp_path / "out"
    submit_chat(write_jsonl(tmp_path / "d.jsonl", rows), out, tok, "--messages-field", "dialog")
    assert shard_conversations(out) == core_encoded(tok, [r["dialog"] for r in rows])
    assert sum(sum(s["skipped"].values()) for s in sidecars(out)) == 0


@pytest.mark.parametrize(("flags", "mode", "thinking"), [
    ((), "assistant", True), (("--train-on", "last"), "last", True), (("--train-on", "all"), "all", True),
    (("--no-train-thinking",), "assistant", False)])
def test_train_on_and_thinking_options(tmp_path: Path, flags: tuple[str, ...], mode: str, thinking: bool) -> None:
    tok_dir = tokenizer_dir(tmp_path, "qwen3-gpt2")      # a template that keeps <think> in the last turn
    rows = records(8, ("think-in-content", "system-multi-turn", "reasoning-content"))
    out = tmp_path / "out"
    submit_chat(write_jsonl(tmp_path / "t.jsonl", rows), out, tok_dir, *flags)
    got = shard_conversations(out)
    assert got == core_encoded(tok_dir, _conversations(rows), mode=mode, thinking=thinking)
    default = core_encoded(tok_dir, _conversations(rows))
    if flags:
        assert [r for _, r in got] != [r for _, r in default], "the option changed nothing"
    if mode == "all":
        assert all(r == [(0, len(ids))] for ids, r in got)
