"""shardprep's processes ask numpy's OpenBLAS for no threads (they spin at start-up in every task and
shardprep does no linear algebra), unless the user set a number."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardprep.executor.slurm.render import job_environment

_COUNT_THREADS = """
import os, sys
from shardprep.cli.main import main
try:
    main(["--version"])
except SystemExit:
    pass
import numpy
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs (OpenBLAS starts no thread on one)")
@pytest.mark.parametrize("asked, want_threads", [(None, 1), ("2", 2)])
def test_the_cli_process_imports_numpy_without_blas_threads_unless_asked(asked, want_threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if asked:
        env["OPENBLAS_NUM_THREADS"] = asked
    out = subprocess.run([sys.executable, "-c", _COUNT_THREADS], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-2:] == [asked or "1", str(want_threads)]


def test_rendered_jobs_export_no_blas_threads_unless_the_user_set_them():
    assert job_environment(environ={"PATH": "/bin"})["OPENBLAS_NUM_THREADS"] == "1"
    assert job_environment(environ={"OPENBLAS_NUM_THREADS": "8"})["OPENBLAS_NUM_THREADS"] == "8"
