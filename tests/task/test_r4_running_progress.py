"""Issue 31, item 14: ``status`` counts a running task's input read so far (its log's progress lines,
``job/encode.py``'s ``Progress``), so a job whose only task is still running shows more than 0.0% and an
ETA, instead of waiting for a task to finish.

The task runs in this process, on a thread, and holds still inside its progress callback (called once a
batch is written, after the progress line) until the test has seen ``status``: no sleep decides anything."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from helpers import run_cli, write_slow_text

from shardprep.cli.main import main
from shardprep.job.encode import PROGRESS_EVERY, Progress
from shardprep.job.task import run_task


@pytest.fixture(scope="module")
def several_blocks(tmp_path_factory) -> Path:
    """~9 MB of text: several 1 MiB blocks (hf) and 4 MiB pieces (encoding workers)."""
    return write_slow_text(tmp_path_factory.mktemp("in") / "in.txt", repeats=8)


def _status(capsys, out: Path) -> dict:
    capsys.readouterr()
    main(["status", str(out), "--json"])
    return json.loads(capsys.readouterr().out)["progress"]


@pytest.mark.parametrize("backend, threads", [("hf", 1), ("auto", 2)])
def test_status_shows_a_running_tasks_progress_and_an_eta(several_blocks, sample_tokenizer, tmp_path, capsys,
                                                           backend, threads):
    if threads > 1:
        pytest.importorskip("gigatoken")     # encoding workers are used for a fast backend only
    out = tmp_path / "out"
    run_cli("plan", "-i", several_blocks, "-o", out, "-t", sample_tokenizer, "--backend", backend)
    first_batch, release = threading.Event(), threading.Event()

    def hold(docs: int, tokens: int) -> None:
        first_batch.set()
        assert release.wait(120), "the test never released the task"

    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(run_task(out, 0, progress=hold, threads=threads)))
    worker.start()
    try:
        assert first_batch.wait(120), "the task wrote no batch"
        p = _status(capsys, out)
        assert p["done"] == 0 and p["running"] == [0]
        assert 0 < p["work_done"] < 1 and 0 < p["running_bytes"] == p["work_bytes"] < p["input_bytes"]
        assert p["eta_s"] is not None and p["eta_s"] > 0, p["eta_basis"]
        assert "1 running" in p["eta_basis"]
    finally:
        release.set()
        worker.join(120)
    assert result and not worker.is_alive()
    p = _status(capsys, out)
    assert (p["done"], p["running_bytes"], p["work_done"], p["eta_s"]) == (1, 0, 1.0, 0.0)


def test_progress_lines_are_written_for_the_first_bytes_then_every_few_seconds(caplog):
    clock = [0.0]
    seen: list[tuple[int, int]] = []
    progress = Progress(4, 1000, lambda d, t: seen.append((d, t)), clock=lambda: clock[0])
    caplog.set_level(logging.INFO, logger="shardprep")
    for second, nbytes in ((0.5, 10), (1.0, 10), (PROGRESS_EVERY - 0.1, 10), (PROGRESS_EVERY + 0.5, 10)):
        clock[0] = second
        progress(1, 5, nbytes)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["task 4 progress: 10 of 1000 input bytes read", "task 4 progress: 40 of 1000 input bytes read"]
    clock[0] = 1000.0                       # a long task: no line before a twentieth of its time has passed
    progress(1, 5, 10)
    clock[0] = 1000.0 + PROGRESS_EVERY * 2
    progress(1, 5, 10_000)                  # never more than planned
    clock[0] = 1060.0                      # 60 s since the last line: more than 1060 / 20
    progress(1, 5, 10)
    assert [r.getMessage() for r in caplog.records][2:] == ["task 4 progress: 50 of 1000 input bytes read",
                                                            "task 4 progress: 1000 of 1000 input bytes read"]
    assert seen == [(1, 5)] * 7 and (progress.documents, progress.tokens) == (7, 35)
    progress.undo()                         # auto fell back to hf: written again from the start
    assert seen[-1] == (-7, -35) and progress.read == 0


def test_a_progress_line_is_the_last_attempts_only():
    """A failed attempt's progress does not count for the next one until that one reads."""
    from shardprep.job.logs import parse_task_log

    t = "2026-01-02 03:04:0{},000 INFO shardprep.job.{}: task 1{}\n"
    text = (t.format(1, "task", ": attempt start (pid 7 on n1): /d/a.txt[0:None]")
            + t.format(2, "encode", " progress: 500 of 900 input bytes read") + t.format(3, "task", " failed: x")
            + t.format(4, "task", ": attempt start (pid 8 on n2): /d/a.txt[0:None]"))
    assert parse_task_log(1, text).read_bytes == 0
    more = text + t.format(5, "encode", " progress: 200 of 900 input bytes read")
    assert (parse_task_log(1, more).read_bytes, parse_task_log(1, more).attempts) == (200, 2)
