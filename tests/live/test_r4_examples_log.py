"""The training examples show they are alive (issue 31, item 16; usability-4 F2).

A step of the examples' toy model can take tens of seconds on a CPU; with no output that is a hang to
whoever watches.  Rank 0 of examples/train_ddp.py (and so train_mix.py) and examples/train_wds.py prints
``step S (epoch E): T tokens/s, loss L`` after step 1 and every ``--log-every`` steps, once, not per rank.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from loader_helpers import make_dataset, run_torchrun

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEP_LINE = re.compile(r"^step (\d+) \(epoch (\d+)\): ([\d,]+) tokens/s, loss (\d+\.\d+)$")


@pytest.fixture(scope="module")
def data(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("log"), sample_tokenizer, [60, 60])


def step_lines(stdout: str) -> list[tuple[int, int, int, float]]:
    found = [STEP_LINE.match(line) for line in stdout.splitlines()]
    return [(int(m[1]), int(m[2]), int(m[3].replace(",", "")), float(m[4])) for m in found if m]


def check(stdout: str, expected_steps: list[int]) -> None:
    lines = step_lines(stdout)
    assert [s for s, *_ in lines] == expected_steps, stdout     # rank 0 only: each step once
    assert all(rate > 0 and loss > 0 for _, _, rate, loss in lines), lines


def test_train_ddp_prints_step_tokens_per_s_and_loss_every_n_steps_on_rank_0(data):
    proc = run_torchrun(EXAMPLES / "train_ddp.py", 2, "--data", data, "--seq-len", 16, "--batch-size", 2,
                        "--max-steps", 7, "--log-every", 3, timeout=150)
    check(proc.stdout, [1, 3, 6])


def test_train_wds_prints_the_same_line(data):
    pytest.importorskip("webdataset")
    proc = run_torchrun(EXAMPLES / "train_wds.py", 1, "--data", data, "--seq-len", 16, "--batch-size", 2,
                        "--log-every", 4, timeout=150)
    steps = step_lines(proc.stdout)
    assert len(steps) >= 3, proc.stdout
    check(proc.stdout, [1] + list(range(4, steps[-1][0] + 1, 4)))


@pytest.mark.parametrize("script", ["train_ddp.py", "train_mix.py", "train_wds.py"])
def test_log_every_is_in_the_help_with_its_default_and_the_cost_note(script):
    if script == "train_wds.py":
        pytest.importorskip("webdataset")
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--log-every N" in text and "default 10" in text
    assert "vocab x seq_len x batch" in text
