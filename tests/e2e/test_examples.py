"""Examples must run (examples/train_ddp.py runs under torchrun in tests/live/test_loader_ddp.py, and prints
its progress line there; examples/train_wds.py in tests/live/test_wds_ddp.py) and say what costs time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.requires("loader")
def test_tokenize_and_read_example(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "tokenize_and_read.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "300 documents" in proc.stdout
    assert "input_ids (4, 128)" in proc.stdout
    assert "labels -100 on padding only: True" in proc.stdout


@pytest.mark.parametrize("script", ["train_ddp.py", "train_mix.py", "train_wds.py"])
def test_log_every_is_in_the_help_with_its_default_and_the_cost_note(script):
    """The progress line's option (examples/steplog.py) with its default, and why a step can be slow."""
    if script == "train_wds.py":
        pytest.importorskip("webdataset")
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--log-every N" in text and "default 10" in text
    assert "vocab x seq_len x batch" in text
