"""``shardprep report`` on chat data (issue 28, item 4): the JSON's ``chat`` block (conversations, trained
tokens and their share, the chat skips, the options that decided them) equals the same numbers read from
the output's files; the page and the command's output show them; a text job's report has none of it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import orjson
import pytest
from conftest import SHARED
from helpers import run_cli

PHI3 = SHARED / "tokenizers" / "bpe-spm-bytefallback-phi3-mini" / "tokenizer.json"
PHI3_TEMPLATE = SHARED / "chat" / "phi-3-template" / "chat_template.jinja"
# refuses a system turn, to count template_refused
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
             "{% endif %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}")


def _tokenizer(tmp: Path, template: str) -> Path:
    if not PHI3.is_file() or not PHI3_TEMPLATE.is_file():
        pytest.skip(f"shared Phi-3 tokenizer or template missing under {SHARED}")
    d = tmp / "tok"
    d.mkdir()
    os.symlink(PHI3, d / "tokenizer.json")
    config = {"chat_template": template, "bos_token": "<s>", "eos_token": "<|endoftext|>"}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def _conversation(i: int, system: bool = False) -> dict:
    turns = [{"role": "user", "content": f"question {i} " * (1 + i % 5)},
             {"role": "assistant", "content": f"answer {i} " * (1 + i % 7)}]
    return {"messages": ([{"role": "system", "content": "be kind"}] if system else []) + turns}


@pytest.fixture(scope="module")
def chat_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished chat job over two tasks: 30 conversations kept, two records with no conversation, three
    the template refuses, one malformed line; ``--train-on last``."""
    tmp = tmp_path_factory.mktemp("report-chat")
    tok = _tokenizer(tmp, NO_SYSTEM)
    raw = tmp / "raw"
    raw.mkdir()
    lines = [json.dumps(_conversation(i, system=i in (4, 11, 17))) for i in range(33)]
    lines[8:8] = ['{"id": 1}', "{not json"]
    (raw / "a.jsonl").write_text("\n".join(lines[:20]) + "\n")
    (raw / "b.jsonl").write_text("\n".join(lines[20:] + ['{"conversations": 5}']) + "\n")
    out = tmp / "out"
    run_cli("submit", "--chat", "--train-on", "last", "--one-file-per-task", "-i", raw, "-o", out, "-t", tok,
            "--no-progress")
    return out


def _json(out: Path) -> dict:
    return orjson.loads(run_cli("report", out, "--json").stdout)


def test_the_chat_block_equals_the_files(chat_job: Path) -> None:
    n = _json(chat_job)
    index = json.loads((chat_job / "index.json").read_text())
    sides = [json.loads(p.read_text()) for p in sorted(chat_job.glob("shard-*.json"))]
    c = n["chat"]
    assert c["conversations"] == index["totals"]["documents"] == n["totals"]["documents"] == 30
    assert c["tokens"] == index["totals"]["tokens"]
    assert c["trained_tokens"] == index["totals"]["trained_tokens"] == sum(s["trained_tokens"] for s in sides) > 0
    assert c["trained_share"] == pytest.approx(c["trained_tokens"] / c["tokens"])
    assert 0 < c["trained_share"] < 1
    assert c["skipped"] == {"bad_conversation": 2, "template_refused": 3}
    assert (c["train_on"], c["train_thinking"], c["messages_field"]) == ("last", True, None)
    assert c["template"].endswith("tokenizer_config.json#chat_template")
    # skips by reason and their examples, as for text data, with the chat reasons among them
    by_reason = {k: v for k, v in n["skipped"]["by_reason"].items() if v}
    assert by_reason == {"bad_conversation": 2, "template_refused": 3, "malformed_json": 1}
    assert n["skipped"]["total"] == n["totals"]["skipped"] == 6
    assert {(e["reason"], Path(e["file"]).name, e["line"]) for e in n["skipped"]["examples"]} == {
        ("bad_conversation", "a.jsonl", 9), ("malformed_json", "a.jsonl", 10), ("template_refused", "a.jsonl", 5),
        ("template_refused", "a.jsonl", 14), ("template_refused", "a.jsonl", 20), ("bad_conversation", "b.jsonl", 16)}
    # a conversation is a document: the lengths are the conversations'
    assert n["doc_lengths"]["documents"] == 30 and n["doc_lengths"]["exact"]


@pytest.mark.requires("report")
def test_the_page_and_the_command_show_the_chat_numbers(chat_job: Path, tmp_path: Path) -> None:
    n = _json(chat_job)
    html_path = tmp_path / "r.html"
    proc = run_cli("report", chat_job, "--html", html_path)
    c = n["chat"]
    line = (f"chat: {c['conversations']:,} conversations, {c['trained_tokens']:,} of {c['tokens']:,} tokens "
            f"trained ({100 * c['trained_share']:.1f}%)")
    assert f"  {line}" in proc.stdout.splitlines()
    page = html_path.read_text()
    assert '<section id="chat"><h2>Chat data</h2>' in page and line in page
    assert "--train-on <code>last</code>" in page
    assert "Conversation lengths (tokens)" in page and "Document lengths" not in page
    keys = dict(re.findall(r'data-key="(chat\.[^"]+)" data-value="([^"]*)"', page))
    assert keys == {"chat.conversations": "30", "chat.trained_tokens": str(c["trained_tokens"]),
                    "chat.tokens": str(c["tokens"]), "chat.trained_share": repr(c["trained_share"]),
                    "chat.skipped.bad_conversation": "2", "chat.skipped.template_refused": "3"}


@pytest.mark.requires("report")
def test_a_text_job_has_no_chat_numbers(tmp_path: Path, sample_tokenizer: Path) -> None:
    (tmp_path / "a.txt").write_text("one document\nanother one\n")
    out = tmp_path / "out"
    run_cli("submit", "-i", tmp_path / "a.txt", "-o", out, "-t", sample_tokenizer, "--no-progress")
    n = _json(out)
    assert "chat" not in n
    proc = run_cli("report", out)
    assert "chat:" not in proc.stdout
    page = (out / "report.html").read_text()
    assert 'id="chat"' not in page and "Document lengths (tokens)" in page and "onversation" not in page
