"""Issue 28 at the CLI, after the run: ``verify`` checks a chat shard's trained ranges (and ``repair``
rebuilds a damaged one byte-identical), ``inspect --decode`` shows the trained text, and a text job's
outputs stay format 1 with no trained keys anywhere."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from chat_job_cases import SIMPLE, phi3_dir, records, sidecars, submit_chat, write_jsonl
from helpers import run_cli

from shardprep.errors import EXIT_INCOMPLETE


@pytest.fixture(scope="module")
def chat_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("chat-out")
    tok = phi3_dir(tmp)
    out = tmp / "out"
    submit_chat(write_jsonl(tmp / "chat.jsonl", records(40, SIMPLE)), out, tok, "--target-task-bytes", "4K",
                "--force-small-tasks")
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def _trained_member(out: Path, shard: int = 1) -> tuple[Path, int, dict]:
    """The shard's path, the offset of its first sample's trained member, and its sidecar."""
    side = json.loads((out / f"shard-{shard:05d}.json").read_text())
    return out / f"shard-{shard:05d}.tar", side["chunks"]["trained_offset"][0], side


def test_verify_reports_a_damaged_trained_member_and_repair_rebuilds_it(tmp_path: Path, chat_out: Path) -> None:
    out = _copy(chat_out, tmp_path / "out")
    assert "all shards verified" in run_cli("verify", out).stdout
    tar, offset, _ = _trained_member(out)
    original = tar.read_bytes()
    data = bytearray(original)
    data[offset + 3] ^= 0x01                 # document 0's first range start, high byte: past its end
    tar.write_bytes(bytes(data))
    proc = run_cli("verify", out, check=EXIT_INCOMPLETE)
    assert f"BAD {tar.name}" in proc.stdout + proc.stderr and "trained range" in proc.stdout + proc.stderr
    assert "shard-00000.tar" not in proc.stdout + proc.stderr
    run_cli("repair", out)
    assert tar.read_bytes() == original
    run_cli("verify", out)


def test_verify_checks_the_trained_total_behind_a_matching_hash(tmp_path: Path, chat_out: Path) -> None:
    """A range shortened by one token is still well formed, and the hashes are made to match: verify
    still sees the trained tokens disagree with the sidecar."""
    out = _copy(chat_out, tmp_path / "out")
    tar, offset, side = _trained_member(out)
    data = bytearray(tar.read_bytes())
    assert side["chunks"]["trained_itemsize"][0] == 2
    assert int.from_bytes(data[offset:offset + 2], "little") >= 1     # document 0: its range count,
    first_pair = offset + 2                                               # then its ranges
    end = int.from_bytes(data[first_pair + 2:first_pair + 4], "little")
    start = int.from_bytes(data[first_pair:first_pair + 2], "little")
    assert end - start >= 2
    data[first_pair + 2:first_pair + 4] = (end - 1).to_bytes(2, "little")
    tar.write_bytes(bytes(data))
    digest = hashlib.sha256(data).hexdigest()
    side["sha256"] = digest
    (out / "shard-00001.json").write_text(json.dumps(side))
    index = json.loads((out / "index.json").read_text())
    index["shards"][1]["sha256"] = digest
    (out / "index.json").write_text(json.dumps(index))
    proc = run_cli("verify", out, check=EXIT_INCOMPLETE)
    text = proc.stdout + proc.stderr
    assert f"BAD {tar.name}" in text
    assert f"trained ranges hold {side['trained_tokens'] - 1} tokens, the sidecar says {side['trained_tokens']}" in text


def test_inspect_decode_shows_trained_text(chat_out: Path) -> None:
    side = json.loads((chat_out / "shard-00000.json").read_text())
    proc = run_cli("inspect", chat_out / "shard-00000.tar", "--decode", "2", "--max-chars", "2000")
    share = 100 * side["trained_tokens"] / side["tokens"]
    assert (f"chat: {side['documents']} conversations, {side['trained_tokens']} of {side['tokens']} tokens "
            f"trained ({share:.1f}%)") in proc.stdout
    assert "trained text between « and »" in proc.stdout
    first = records(1, SIMPLE)[0]["messages"]
    reply = next(m["content"] for m in first if m["role"] == "assistant")
    assert f"«{reply}<|end|>»" in proc.stdout
    assert "«You are a careful assistant." not in proc.stdout and "«[0] Hello there." not in proc.stdout


def test_index_counts_the_trained_tokens(chat_out: Path) -> None:
    index = json.loads((chat_out / "index.json").read_text())
    assert index["format_version"] == 3      # format 3: chat chunks carry trained ranges, every sidecar its documents' origins
    assert index["totals"]["trained_tokens"] == sum(s["trained_tokens"] for s in sidecars(chat_out)) > 0


def test_a_text_job_has_no_chat_fields(tmp_path: Path) -> None:
    tok = phi3_dir(tmp_path / "tok")
    inp = write_jsonl(tmp_path / "t.jsonl", [{"text": f"plain document {i}"} for i in range(5)])
    out = tmp_path / "out"
    run_cli("submit", "-i", inp, "-o", out, "-t", tok, "--no-progress")
    job = json.loads((out / "job.json").read_text())
    index = json.loads((out / "index.json").read_text())
    (side,) = sidecars(out)
    assert index["format_version"] == side["format_version"] == 3      # a text job: origins, no trained ranges
    assert "chat" not in job["options"]
    assert "trained_tokens" not in index["totals"] and "trained_tokens" not in side
    assert not any(k.startswith("trained") for k in side["chunks"])
    assert set(side["skipped"]) == {"invalid_utf8", "empty", "malformed_json", "missing_field", "too_long"}
    assert not (out / "chat_template.json").exists()
    import tarfile

    with tarfile.open(out / "shard-00000.tar") as t:
        assert not any(".trained" in n for n in t.getnames())
    proc = run_cli("inspect", out / "shard-00000.tar", "--decode", "1")
    assert "chat:" not in proc.stdout and "«" not in proc.stdout
