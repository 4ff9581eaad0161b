"""``run_task`` in process: it leaves the caller's logging as it found it, and reads only its own share
of the frozen plan (refusing one that was altered after planning)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from shardprep.api import plan_job
from shardprep.demo_data import write_sample_corpus
from shardprep.errors import InputDataError
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.task import run_task


@pytest.fixture()
def planned(tmp_path, sample_tokenizer) -> Path:
    corpus = write_sample_corpus(tmp_path / "corpus", files=3, docs_per_file=20)
    out = tmp_path / "out"
    plan_job([corpus], out, sample_tokenizer, TokenizeOptions(backend="hf"), PlanOptions(None))
    return out


@pytest.mark.parametrize("level", [logging.NOTSET, logging.WARNING, logging.DEBUG])
def test_logger_level_and_handlers_are_restored(planned, level):
    logger = logging.getLogger("shardprep")
    before_level, before_handlers = logger.level, list(logger.handlers)
    logger.setLevel(level)
    try:
        assert run_task(planned, 0, threads=1).documents == 20        # ran
        assert logger.level == level and logger.handlers == before_handlers
        assert run_task(planned, 0, threads=1).skipped_existing       # already done
        assert logger.level == level and logger.handlers == before_handlers
        changed = next(p for p in (planned.parent / "corpus").iterdir() if p.name.startswith("part-001"))
        os.utime(changed, ns=(1, 1))
        with pytest.raises(InputDataError, match="changed since it was planned"):
            run_task(planned, 1, threads=1)                            # failed
        assert logger.level == level and logger.handlers == before_handlers
    finally:
        logger.setLevel(before_level)
    assert "task 0 done" in (planned / "logs" / "task-00000.log").read_text()
