"""A newcomer's first steps (issue 23, item 14): a hub tokenizer where the hub cannot be reached fails at
once, in one line, without the hub library's minute of retries.  A process of its own: the hub libraries
read HF_HUB_OFFLINE and HF_HOME once, at import, and the rest of the suite runs offline."""

from __future__ import annotations

import socket

import pytest
from helpers import run_cli

from shardprep.errors import EXIT_TOKENIZER


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.requires("hf")
def test_a_hub_tokenizer_fails_at_once_when_the_hub_is_unreachable(tmp_path):
    (tmp_path / "a.txt").write_text("one document\n")
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "", "HTTPS_PROXY": "", "HTTP_PROXY": "", "https_proxy": "", "http_proxy": "",
           "ALL_PROXY": "", "all_proxy": ""}
    proc = run_cli("plan", "-i", tmp_path / "a.txt", "-o", tmp_path / "o", "-t", "gpt2", check=EXIT_TOKENIZER,
                   env=env)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr                 # no hub retry warnings before it: no request was made
    assert "'gpt2': it is not in the local Hugging Face cache and the hub http://127.0.0.1:" in lines[0]
    assert "cannot be reached" in lines[0] and "save_pretrained" in lines[0]
