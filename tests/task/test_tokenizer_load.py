"""Tokenizer resolution: file, directory, transformers-convertible directory, hub id offline, specials,
dtype selection, CPU sizing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli, shard_documents

from shardprep.errors import EXIT_TOKENIZER
from shardprep.job.resources import usable_cpus
from shardprep.tokenizer.load import resolve_tokenizer


def test_directory_with_config_names_the_eos(tmp_path, sample_tokenizer):
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer.json").write_text(sample_tokenizer.read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|pad|>"}))
    info = resolve_tokenizer(str(d)).info
    assert info.eos_token == "<|pad|>" and info.eos_id == 1
    assert resolve_tokenizer(str(sample_tokenizer)).info.eos_id == 0  # bare file: <|endoftext|> by convention
    assert info.fingerprint != resolve_tokenizer(str(sample_tokenizer)).info.fingerprint  # specials count


@pytest.mark.requires("hf")
def test_transformers_directory_is_converted_to_fast(tmp_path):
    d = tmp_path / "gpt2ish"
    d.mkdir()
    (d / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3, "Ġ": 4}))
    (d / "merges.txt").write_text("#version: 0.2\na b\n")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer",
                                                          "eos_token": "<|endoftext|>"}))
    info = resolve_tokenizer(str(d)).info
    assert info.eos_id == 3 and info.dtype == "uint16"


@pytest.mark.requires("hf")
def test_hub_id_offline_fails_cleanly(tmp_path):
    (tmp_path / "in.txt").write_text("x\n")
    from huggingface_hub import constants

    # the hub reads HF_HUB_OFFLINE once, at import: this process is offline already (conftest sets it before
    # any import), so the CLI runs here; a process of its own only where this one was started online
    env = None if constants.HF_HUB_OFFLINE else {"HF_HUB_OFFLINE": "1"}
    proc = run_cli("plan", "-i", tmp_path / "in.txt", "-o", tmp_path / "o", "-t", "nobody-here/no-such-model",
                   env=env, check=EXIT_TOKENIZER)
    assert "cannot load tokenizer 'nobody-here/no-such-model'" in proc.stderr
    assert not (tmp_path / "o" / "job.json").exists()


def test_large_vocabulary_uses_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70000)}
    vocab["<unk>"] = 70000
    vocab["<|endoftext|>"] = 70001
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    path = tmp_path / "big.json"
    tok.save(str(path))
    assert resolve_tokenizer(str(path)).info.dtype == "uint32"
    (tmp_path / "in.txt").write_text("w1 w69999 w65536\nw0\n")
    out = tmp_path / "o"
    run_cli("submit", "-i", tmp_path / "in.txt", "-o", out, "-t", path, "--no-progress")
    assert shard_documents(out) == [[1, 69999, 65536, 70001], [0, 70001]]
    assert (out / "shard-00000.tar").read_bytes().count(b".tokens.u32") == 1


def test_usable_cpus_follows_slurm_allocation(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    here = usable_cpus()
    assert 1 <= here <= __import__("os").cpu_count()
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert usable_cpus() == 1


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_peak_rss_is_the_tasks_own_not_its_launchers():
    """ru_maxrss survives exec: a task started by a 300 MB process must not report 300 MB."""
    code = ("import os, sys\n"
            "big = bytearray(300 << 20)\n"
            "big[::4096] = b'x' * len(big[::4096])\n"
            "os.execv(sys.executable, [sys.executable, '-c', "
            "'from shardprep.job.resources import peak_rss_bytes; print(peak_rss_bytes())'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 0 < int(out) < 200 << 20
