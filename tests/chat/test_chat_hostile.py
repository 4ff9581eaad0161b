"""Hostile conversations through `submit --chat` (issue 28): each is a counted skip with its file and line, or
is kept as the template renders it; nothing is dropped or changed silently."""

from __future__ import annotations

import json

import orjson
from helpers import run_cli

# Refuses a conversation that starts with a tool result, as many real templates refuse odd orders.
TEMPLATE = ("{% for m in messages %}{% if loop.first and m['role'] == 'tool' %}"
            "{{ raise_exception('a conversation cannot start with a tool result') }}{% endif %}"
            "<|{{ m['role'] }}|> {{ m['content'] }} <|end|>\n{% endfor %}")


def _records() -> list[bytes]:
    def conv(*turns: tuple[str, object]) -> bytes:
        return orjson.dumps({"messages": [{"role": r, "content": c} for r, c in turns]})

    return [
        conv(("user", "hello there"), ("assistant", "")),                                  # 1 empty content: kept
        conv(("tool", "42"), ("assistant", "the answer")),                                  # 2 tool first: refused
        conv(("user", "hi"), ("narrator", "meanwhile")),                                    # 3 unknown role
        conv(("user", "long one"), ("assistant", "word " * 200_000)),                       # 4 a 1 MB turn: kept
        b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',                           # 5 invalid UTF-8
        conv(("user", [{"type": "image_url", "image_url": {"url": "x"}}]), ("assistant", "a cat")),  # 6 an image part
        conv(("user", "huge"), ("assistant", "x " * 1_500_000)),                            # 7 over --max-doc-bytes
        conv(("user", "fine"), ("assistant", "also fine")),                                 # 8 kept
    ]


def test_each_hostile_record_is_counted_with_its_line_or_kept_as_rendered(tmp_path, sample_tokenizer):
    data = tmp_path / "hostile.jsonl"
    data.write_bytes(b"\n".join(_records()) + b"\n")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    out = tmp_path / "out"
    run_cli("submit", "--chat", "--chat-template", tmp_path / "t.jinja", "-i", data, "-o", out, "-t", sample_tokenizer,
            "--max-doc-bytes", "2M", "--no-progress")
    side = json.loads((out / "shard-00000.json").read_text())
    assert side["documents"] == 3                                   # lines 1, 4 and 8
    skipped = {k: v for k, v in side["skipped"].items() if v}
    assert skipped == {"template_refused": 1, "bad_conversation": 2, "invalid_utf8": 1, "too_long": 1}
    where = [(ex["reason"], ex["line"]) for ex in side["skipped_examples"]]      # in file order
    assert where == [("template_refused", 2), ("bad_conversation", 3), ("invalid_utf8", 5),
                     ("bad_conversation", 6), ("too_long", 7)]
    details = {ex["line"]: ex["detail"] for ex in side["skipped_examples"]}
    assert "cannot start with a tool result" in details[2]
    assert "messages[1].role" in details[3] and "messages[0].content[0]" in details[6]
    proc = run_cli("inspect", out / "shard-00000.tar", "--decode", "3", "--max-chars", "80")
    assert "<|assistant|> \u00ab <|end|>\u00bb" in proc.stdout        # an empty reply trains its end marker only
