"""Examples must run (examples/train_ddp.py runs under torchrun in test_loader_ddp.py)."""

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
