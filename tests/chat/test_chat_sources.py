"""Chat data from an object store and in a stock webdataset pipeline, and doctor's word on chat records
(issue 28, items 1 and 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|>\n{% endfor %}"


def _sft(path: Path, n: int = 40) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"question {i}"},
                                             {"role": "assistant", "content": f"answer {i} " * (1 + i % 5)}]}) + "\n")
    return path


def _submit(inputs: list[str | Path], out: Path, tokenizer: Path, template: Path, *extra: str, env=None) -> None:
    run_cli("submit", "--chat", "--chat-template", template, *[a for i in inputs for a in ("-i", i)], "-o", out,
            "-t", tokenizer, "--no-progress", *extra, env=env)


@pytest.mark.s3
def test_conversations_read_from_s3_give_the_local_shards(s3_endpoint, sample_tokenizer, tmp_path):
    from s3_server import aws_env, make_bucket, s3_client

    data = _sft(tmp_path / "sft.jsonl")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    bucket = make_bucket(s3_endpoint, "chat")
    s3_client(s3_endpoint).upload_file(str(data), bucket, "raw/sft.jsonl")
    _submit([data], tmp_path / "local", sample_tokenizer, tmp_path / "t.jinja")
    _submit([f"s3://{bucket}/raw/"], tmp_path / "remote", sample_tokenizer, tmp_path / "t.jinja",
            "--endpoint-url", s3_endpoint, env=aws_env())
    for name in ("shard-00000.tar", "index.json"):
        local, remote = (tmp_path / "local" / name).read_bytes(), (tmp_path / "remote" / name).read_bytes()
        if name == "index.json":        # the plan fingerprint names the inputs: compare what was written
            local, remote = (json.loads(b)["totals"] for b in (local, remote))
        assert local == remote, name


def test_a_stock_webdataset_pipeline_reads_chat_shards(sample_tokenizer, tmp_path):
    wds = pytest.importorskip("webdataset")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    _submit([_sft(tmp_path / "sft.jsonl")], tmp_path / "out", sample_tokenizer, tmp_path / "t.jinja")
    samples = list(wds.WebDataset(str(tmp_path / "out" / "shard-00000.tar"), shardshuffle=False))
    assert samples and all({"tokens.u16", "doclens.u16", "trained.u16"} <= set(s) for s in samples)


def test_doctor_says_chat_when_the_records_hold_conversations(sample_tokenizer, tmp_path):
    data = _sft(tmp_path / "sft.jsonl")
    proc = run_cli("doctor", "-t", sample_tokenizer, "-o", tmp_path / "out", "-i", data, check=False)
    assert proc.returncode != 0
    assert "keys seen: messages" in proc.stdout + proc.stderr and "--chat" in proc.stdout + proc.stderr
