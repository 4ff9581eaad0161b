"""Issue 28 at the CLI: what a chat job skips (with file and line), what ``--strict`` stops on, what the
plan refuses (one line naming the file, key or flag), and the frozen template (resume, a changed template
is another plan, an edited copy fails the task, ``--overwrite`` removes it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_cases import CHAT
from chat_job_cases import (
    SIMPLE,
    core_encoded,
    phi3_dir,
    records,
    shard_conversations,
    sidecars,
    submit_chat,
    write_jsonl,
)
from helpers import run_cli

from shardprep.errors import EXIT_INPUT, EXIT_PLAN_CONFLICT, EXIT_TOKENIZER, EXIT_USAGE
from shardprep.shard.format import CHAT_TEMPLATE_FILE

# A template that refuses a system turn, as some models' templates do.
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}"
             "{{ raise_exception('System role not supported') }}{% endif %}"
             "{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}")


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return phi3_dir(tmp_path_factory.mktemp("chat-tok"))


def _one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if "error:" in x]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_skips_are_counted_with_file_and_line(tmp_path: Path) -> None:
    tok = phi3_dir(tmp_path / "tok", NO_SYSTEM)
    good = [{"messages": [{"role": "user", "content": f"u{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(3)]
    rows = [good[0], {"id": 7, "note": "no conversation"}, good[1],
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
            {"messages": [{"role": "user", "content": 5}]}, good[2]]
    inp = write_jsonl(tmp_path / "mixed.jsonl", rows, lines=["{not json"])
    out = tmp_path / "out"
    submit_chat(inp, out, tok)
    (side,) = sidecars(out)
    assert side["documents"] == 3
    assert {k: v for k, v in side["skipped"].items() if v} == {"bad_conversation": 2, "template_refused": 1,
                                                                 "malformed_json": 1}
    examples = {(e["reason"], e["line"]): e for e in side["skipped_examples"]}
    assert set(examples) == {("bad_conversation", 2), ("template_refused", 4), ("bad_conversation", 5),
                             ("malformed_json", 7)}
    assert all(e["file"] == str(inp) for e in examples.values())
    assert "no conversation field" in examples["bad_conversation", 2]["detail"]
    assert examples["bad_conversation", 5]["detail"].startswith("messages[0].content")
    assert examples["template_refused", 4]["detail"] == "System role not supported"
    assert shard_conversations(out) == core_encoded(tok, [r["messages"] for r in good])

    proc = submit_chat(inp, tmp_path / "strict", tok, "--strict", check=EXIT_INPUT)
    line = _one_line(proc.stderr)
    assert f"{inp}:2" in line and "no conversation field" in line


def test_strict_stops_on_a_refused_conversation(tmp_path: Path) -> None:
    tok = phi3_dir(tmp_path / "tok", NO_SYSTEM)
    rows = [{"messages": [{"role": "user", "content": "u"}]},
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}]
    proc = submit_chat(write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "out", tok, "--strict",
                       check=EXIT_INPUT)
    line = _one_line(proc.stderr)
    assert f"{tmp_path / 'r.jsonl'}:2" in line and "System role not supported" in line


def test_plan_refusals(tmp_path: Path, tok: Path) -> None:
    text = write_jsonl(tmp_path / "text.jsonl", [{"text": "a", "id": 1}])
    proc = run_cli("plan", "--chat", "-i", text, "-o", tmp_path / "o1", "-t", tok, check=EXIT_INPUT)
    line = _one_line(proc.stderr)
    assert str(text) in line and "messages" in line and "keys: text, id" in line
    txt = tmp_path / "a.txt"
    txt.write_text("hello\n")
    line = _one_line(run_cli("plan", "--chat", "-i", txt, "-o", tmp_path / "o2", "-t", tok,
                             check=EXIT_INPUT).stderr)
    assert str(txt) in line and "--chat" in line
    chat = write_jsonl(tmp_path / "chat.jsonl", records(2, SIMPLE))
    line = _one_line(run_cli("plan", "--messages-field", "m", "-i", chat, "-o", tmp_path / "o3", "-t", tok,
                             check=EXIT_USAGE).stderr)
    assert "--messages-field needs --chat" in line
    line = _one_line(run_cli("plan", "--chat", "--layout", "doc", "-i", chat, "-o", tmp_path / "o4", "-t", tok,
                             check=EXIT_USAGE).stderr)
    assert "--layout doc" in line
    line = _one_line(run_cli("plan", "--chat", "-i", chat, "-o", tmp_path / "o5", "-t", "someone/some-model",
                             check=EXIT_USAGE).stderr)
    assert "'someone/some-model'" in line and "--chat-template" in line
    for o in ("o1", "o2", "o3", "o4", "o5"):
        assert not (tmp_path / o / "job.json").exists()


def test_a_text_job_on_conversations_hints_chat(tmp_path: Path, tok: Path) -> None:
    chat = write_jsonl(tmp_path / "chat.jsonl", records(3, SIMPLE))
    submit_chat(chat, tmp_path / "out", tok)      # the same file works with --chat
    proc = run_cli("submit", "-i", chat, "-o", tmp_path / "text", "-t", tok, "--no-progress", check=EXIT_INPUT)
    line = _one_line(proc.stderr)
    assert "'text'" in line and "add --chat" in line and "messages" in line


def test_the_template_is_frozen(tmp_path: Path, tok: Path) -> None:
    chat = write_jsonl(tmp_path / "chat.jsonl", records(5, SIMPLE))
    out = tmp_path / "out"
    submit_chat(chat, out, tok)
    frozen = json.loads((out / CHAT_TEMPLATE_FILE).read_text())
    job = json.loads((out / "job.json").read_text())
    from shardprep.chat import load_chat_template
    from shardprep.job.chat_plan import template_digest

    assert frozen["template"] == load_chat_template(tok).text
    assert job["options"]["chat"]["template_sha256"] == template_digest(load_chat_template(tok))
    before = shard_conversations(out)
    run_cli("submit", "--resume", out, "--no-progress")
    assert shard_conversations(out) == before

    other = CHAT / "trl-generation-markers" / "phi3_training.jinja"
    line = _one_line(submit_chat(chat, out, tok, "--chat-template", other, check=EXIT_PLAN_CONFLICT).stderr)
    assert "different plan" in line and "chat" in line
    assert json.loads((out / CHAT_TEMPLATE_FILE).read_text()) == frozen

    edited = dict(frozen, template=frozen["template"].replace("<|end|>", "<|END|>"))
    (out / CHAT_TEMPLATE_FILE).write_text(json.dumps(edited))
    for name in ("shard-00000.tar", "shard-00000.json", "index.json"):
        (out / name).unlink()
    proc = run_cli("submit", "--resume", out, "--no-progress", check=EXIT_TOKENIZER)
    assert str(out / CHAT_TEMPLATE_FILE) in proc.stderr and "changed since planning" in proc.stderr
    proc = run_cli("run-task", "--task-id", "0", out, check=EXIT_TOKENIZER)
    assert str(out / CHAT_TEMPLATE_FILE) in proc.stderr

    text = write_jsonl(tmp_path / "text.jsonl", [{"text": "plain text"}])
    run_cli("submit", "-i", text, "-o", out, "-t", tok, "--no-progress", "--overwrite")
    assert not (out / CHAT_TEMPLATE_FILE).exists()
    assert "chat" not in json.loads((out / "job.json").read_text())["options"]
