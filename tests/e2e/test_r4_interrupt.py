"""Ctrl-C in a local ``submit`` says how to continue, and ``status`` afterwards does not ask to "fix the
cause" of tasks that were only interrupted (issue 31, item 15b).  ``submit`` runs as a child started with
default signal dispositions; the test acts on observable conditions (a temporary shard on disk)."""

from __future__ import annotations

import signal

import psutil
import pytest
from helpers import run_cli
from test_local_executor_faults import _start_submit, _wait_gone, _wait_mid_write, corpus, family  # noqa: F401

from shardprep.errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED

pytestmark = pytest.mark.slow


def test_ctrl_c_says_how_to_resume_and_status_does_not_ask_to_fix_a_cause(
        tmp_path, corpus, sample_tokenizer, family):  # noqa: F811 (the fixtures imported above)
    out = tmp_path / "o"
    proc = _start_submit(corpus, out, sample_tokenizer)
    _wait_mid_write(out, proc)
    family += psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert (f"shardprep submit: interrupted: re-run the same command, or shardprep submit --resume {out}, "
            "to continue") in err
    _wait_gone(family)
    status = run_cli("status", out, check=EXIT_INCOMPLETE).stdout
    assert "fix the cause" not in status and "--overwrite" not in status, status
    assert f"next: the run was interrupted before these tasks finished: `shardprep submit --resume {out}`" in status
    assert "failed: task" not in status                      # a stopped task is not reported as failed
