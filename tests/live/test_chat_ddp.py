"""Real DDP on chat shards (issue 28): examples/train_sft.py under ``torchrun`` (gloo, CPU, 2 DataLoader
workers per rank) on the output of ``submit --chat``.

Rows hold whole conversations with labels; every rank takes the same number of steps (a rank with fewer
would hang the all-reduce: every run has a timeout); a run stopped on 2 ranks and resumed on 3 sees no
conversation twice and misses none but the dropped tail.  The labels' exactness is the loader's tests' (tests/loader/test_chat_loader.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from helpers import run_cli
from loader_helpers import equal_steps, make_dataset, records, run_torchrun, torchrun_summary

from shardprep.demo_data import sample_documents

pytestmark = [pytest.mark.ddp, pytest.mark.slow, pytest.mark.requires("loader")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_sft.py"
SEQ, BATCH = 96, 2
# A ChatML-like template: with the sample tokenizer its markers are plain words, which the masks handle too.
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def chat_output(tmp_path_factory, sample_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("chat-ddp")
    docs = sample_documents(600, seed=11)
    with open(root / "sft.jsonl", "w") as f:
        for i in range(150):
            turns = [{"role": "system", "content": "be brief"}] if i % 4 == 0 else []
            for t in range(1 + i % 3):
                turns += [{"role": "user", "content": docs[(4 * i + t) % 600][:80]},
                          {"role": "assistant", "content": docs[(4 * i + t + 1) % 600][: 40 + 7 * (i % 9)]}]
            f.write(json.dumps({"id": i, "messages": turns}) + "\n")
    (root / "template.jinja").write_text(TEMPLATE)
    out = root / "out"
    run_cli("submit", "--chat", "--chat-template", root / "template.jinja", "-i", root / "sft.jsonl", "-o", out,
            "-t", sample_tokenizer, "--chunk-tokens", "2000", "--no-progress")
    return out


def torchrun(nproc: int, data: Path, record: Path, *args: str) -> dict:
    proc = run_torchrun(EXAMPLE, nproc, "--data", data, "--seq-len", SEQ, "--batch-size", BATCH, "--num-workers", 2,
                        "--record", record, "--log-every", 1000, *args, timeout=240)
    assert "row tokens carried a label" in proc.stdout
    return torchrun_summary(proc)


def conversations_seen(record: Path, world: int) -> list[int]:
    return [d for rank in records(record, world) for batch in rank for row in batch["docs"] for d in row]


def test_packed_chat_rows_equal_steps_and_resume_from_two_to_three_ranks(chat_output, tmp_path):
    """Stopped on 2 ranks after K steps, resumed on 3 to the end: equal steps on every rank of both runs,
    whole conversations read once across the two (the rows the loader's tests prove exact and in the
    uninterrupted order: tests/loader/test_chat_loader.py), labels only where a row holds a reply."""
    index = orjson.loads((chat_output / "index.json").read_bytes())
    conversations = index["totals"]["documents"]
    assert index["format_version"] == 3 and 0 < index["totals"]["trained_tokens"] < index["totals"]["tokens"]

    k = 5
    ckpt = tmp_path / "ckpt.pt"
    first = torchrun(2, chat_output, tmp_path / "resumed", "--max-steps", str(k), "--checkpoint", str(ckpt))
    assert first["stopped"] and equal_steps(first)["0"] == k
    rest = torchrun(3, chat_output, tmp_path / "resumed3", "--resume", str(ckpt))
    assert equal_steps(rest)["0"] > 0
    before, after = conversations_seen(tmp_path / "resumed", 2), conversations_seen(tmp_path / "resumed3", 3)
    seen = before + after
    assert len(seen) == len(set(seen)), "a conversation was read twice across the resume"
    assert len(seen) > 0.8 * conversations          # whole, once; only the tail rows dropped
    for record, world in ((tmp_path / "resumed", 2), (tmp_path / "resumed3", 3)):
        for rank in records(record, world):
            for batch in rank:
                assert all(0 < n < SEQ for n in batch["labelled"])      # prompts, first tokens and padding unlabelled


def test_a_chat_and_pretraining_mixture_keeps_its_token_shares_on_two_ranks(chat_output, tmp_path,
                                                                         sample_tokenizer):
    text = make_dataset(tmp_path / "text", sample_tokenizer, [200, 150], seed=3)
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"sources": [{"name": "sft", "path": str(chat_output), "weight": 0.25},
                                            {"name": "web", "path": str(text), "weight": 0.75}]}))
    summary = torchrun(2, spec, tmp_path / "mix", "--total-tokens", str(SEQ * 400))
    equal_steps(summary)
    rows = [(src, n) for rank in records(tmp_path / "mix", 2) for batch in rank
            for src, n in zip(batch["sources"], batch["labelled"])]
    chat_rows = [n for src, n in rows if src == 0]
    assert abs(len(chat_rows) / len(rows) - 0.25) < 0.02        # rows (seq_len tokens each) by weight
    assert all(0 < n < SEQ for n in chat_rows)                   # chat rows: prompts and padding unlabelled
    assert all(n >= SEQ - 1 for src, n in rows if src == 1)     # pretraining rows: every token a target
