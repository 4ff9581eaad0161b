"""A chat task's ids follow ``--backend`` as a text task's do: ``auto`` takes gigatoken's ids where they can
be placed (a byte-level BPE's byte-length table, or a SentencePiece-style tokenizer's segments between added
tokens) and they match ``tokenizers`` on the sampled renders, writing exactly the bytes ``--backend hf``
writes; one differing id sends the task back to hf with the reason in the sidecar; a tokenizer whose ids
cannot be placed stays hf."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from chat_cases import CHAT, CONVERSATIONS, PAIRS, TOKENIZERS
from helpers import run_cli

needs_gigatoken = pytest.mark.skipif(importlib.util.find_spec("gigatoken") is None,
                                     reason="gigatoken is not installed (shardprep[fast])")


def _conversations(path: Path, n: int = 60) -> Path:
    """The shared chat cases, then multi-turn conversations of growing length (to later batches too)."""
    rows = [{"messages": m} for m in CONVERSATIONS.values()]
    for i in range(n):
        turns = [{"role": "system", "content": f"You are assistant number {i}. Réponds brièvement."}]
        for t in range(1 + i % 4):
            turns.append({"role": "user", "content": f"Question {t}: what is {i} × {t}? " + "why " * (i * t % 37)})
            turns.append({"role": "assistant", "content": f"It is {i * t}. " + "Because 🙂 " * (i % 23)})
        rows.append({"messages": turns})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _plan(tmp: Path, pair: str, backend: str, name: str, tokenizer: Path | None = None) -> Path:
    tok, template, _, _ = PAIRS[pair]
    tokenizer, chat_template = tokenizer or TOKENIZERS / tok / "tokenizer.json", CHAT / template
    if not tokenizer.is_file() or not chat_template.is_file():
        pytest.skip("shared tokenizer or chat template missing")
    data = tmp / "conversations.jsonl"
    if not data.exists():
        _conversations(data)
    out = tmp / name
    run_cli("plan", "-i", data, "-o", out, "-t", tokenizer, "--chat", "--chat-template", chat_template,
            "--backend", backend)
    return out


def _run(out: Path) -> dict:
    from shardprep.job.task import run_task

    run_task(out, 0)
    return json.loads((out / "shard-00000.json").read_text())


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, dict]]:
    """The ``--backend hf`` task of a pair (the bytes every other backend must write), run once per pair
    for the module: (its output, its sidecar)."""
    done: dict[str, tuple[Path, dict]] = {}

    def run(pair: str) -> tuple[Path, dict]:
        if pair not in done:
            out = _plan(tmp_path_factory.mktemp(f"hf-{pair}"), pair, "hf", "hf")
            done[pair] = out, _run(out)
        return done[pair]
    return run


@needs_gigatoken
@pytest.mark.parametrize("pair", ["qwen3-markers", "qwen3-dolma2", "phi-3-markers", "phi-3"])
def test_auto_uses_gigatoken_and_writes_hf_bytes(tmp_path, pair, hf_run):
    auto = _run(_plan(tmp_path, pair, "auto", "auto"))
    hf_out, hf = hf_run(pair)

    rec = auto["backend"]
    assert rec["name"] == "gigatoken" and rec["requested"] == "auto" and "fallback_reason" not in rec
    check = rec["check"]
    assert check["passed"] is True and check["sample_documents"] > 0 and check["spread_documents"] > 0
    assert check["hard_cases_checked"] == "plan"    # the plan checked them with special tokens matched, as chat does
    assert hf["backend"]["name"] == "hf" and hf["backend"]["check"] is None
    assert (tmp_path / "auto" / "shard-00000.tar").read_bytes() == (hf_out / "shard-00000.tar").read_bytes()
    assert auto["trained_tokens"] == hf["trained_tokens"] > 0 and auto["skipped"] == hf["skipped"]


@needs_gigatoken
def test_one_differing_id_falls_back_to_hf(tmp_path, monkeypatch, hf_run):
    from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

    out = _plan(tmp_path, "qwen3-markers", "auto", "auto")
    real = GigatokenBackend.encode_batch

    def one_id_off(self, texts):
        flat, lengths = real(self, texts)
        flat = flat.copy()
        flat[int(lengths[0]) // 2] ^= 1          # one id, in the middle of the batch's first conversation
        return flat, lengths

    monkeypatch.setattr(GigatokenBackend, "encode_batch", one_id_off)
    sidecar = _run(out)
    monkeypatch.undo()

    rec = sidecar["backend"]
    assert rec["name"] == "hf" and rec["requested"] == "auto"
    assert rec["check"]["passed"] is False and rec["check"]["candidate"].startswith("gigatoken")
    assert "ids differ" in rec["fallback_reason"] and rec["fallback_reason"] == rec["check"]["reason"]
    assert rec["check"]["mismatch"]["expected"] != rec["check"]["mismatch"]["got"]
    assert "falling back to hf" in (out / "logs" / "task-00000.log").read_text()
    hf_out, hf = hf_run("qwen3-markers")
    assert (out / "shard-00000.tar").read_bytes() == (hf_out / "shard-00000.tar").read_bytes()
    assert sidecar["documents"] == hf["documents"] and sidecar["trained_tokens"] == hf["trained_tokens"]


def test_ids_that_cannot_be_placed_stay_hf(tmp_path):
    """Phi-3's tokenizer with its added tokens matched on normalized text: neither a byte table nor the
    segments can place a fast backend's ids (whether gigatoken is installed or not)."""
    spec = json.loads((TOKENIZERS / PAIRS["phi-3-markers"][0] / "tokenizer.json").read_text())
    for entry in spec["added_tokens"]:
        entry["normalized"] = True
    tokenizer = tmp_path / "normalized" / "tokenizer.json"
    tokenizer.parent.mkdir()
    tokenizer.write_text(json.dumps(spec))
    sidecar = _run(_plan(tmp_path, "phi-3-markers", "auto", "auto", tokenizer))
    rec = sidecar["backend"]
    assert rec["name"] == "hf" and rec["requested"] == "auto" and rec["check"]["passed"] is False
    assert "has neither" in rec["fallback_reason"]
    assert sidecar["documents"] > 0 and sidecar["trained_tokens"] > 0

    # asked for by name, the fast backend refuses rather than writing ids it cannot place
    explicit = _plan(tmp_path, "phi-3-markers", "gigatoken", "explicit", tokenizer)
    proc = run_cli("run-task", explicit, "--task-id", "0", check=6)
    assert "--backend=gigatoken: chat ids are placed by a byte-length table" in proc.stderr
    assert not list(explicit.glob("shard-*.tar"))


def test_sampled_ids_keep_first_batch_and_spread():
    """``SampledIds`` hands the candidate's ids through unchanged and keeps what the check compares."""
    from shardprep.job.chat_encode import SampledIds

    class Counting:
        def encode_batch(self, texts):
            lengths = np.array([len(t) for t in texts], dtype=np.int64)
            return np.arange(int(lengths.sum()), dtype=np.uint32), lengths

    ids = SampledIds(Counting())  # type: ignore[arg-type]
    flat, lengths = ids.encode_batch(["ab", "cde", "f", "gh"])
    assert flat.tolist() == list(range(8)) and lengths.tolist() == [2, 3, 1, 2]
    ids.encode_batch(["xyz"])
    assert ids.sampler.first == ["ab", "cde", "f", "gh"]
    recorded = [(text, got.tolist()) for _, text, got in ids.sampler.recorded]
    assert recorded == [("ab", [0, 1]), ("cde", [2, 3, 4]), ("gh", [6, 7]), ("xyz", [0, 1, 2])]
