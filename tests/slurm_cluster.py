"""Fixtures and helpers for tests against a live Slurm (``slurm/dev-cluster.sh up`` starts one).

The ``slurm_cluster`` fixture is registered for every test module by ``conftest.py`` (``pytest_plugins``).  Without a controller
that answers, the tests skip with the reason; CI starts the cluster first, so there they always run.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
DEV_CLUSTER = REPO / "slurm" / "dev-cluster.sh"
READY_STATES = {"idle", "mix", "alloc", "comp"}
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED", "REQUEUE_HOLD"}


def _sh(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)


def cluster_problem() -> str | None:
    """Why there is no usable Slurm here (None when there is one)."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no Slurm client tools (sinfo/sbatch) on PATH; run slurm/dev-cluster.sh up"
    try:
        proc = _sh("sinfo", "--noheader", "--format=%t", timeout=15)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s; is slurmctld running? (slurm/dev-cluster.sh up)"
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip()[:200]} (start a cluster with slurm/dev-cluster.sh up)"
    states = {s.strip().rstrip("*~#") for s in proc.stdout.split()}
    if not states & READY_STATES:
        return f"no Slurm node is up (sinfo states: {sorted(states)})"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    problem = cluster_problem()
    if problem:
        pytest.skip(problem)


def scontrol_value(key: str) -> str | None:
    for line in _sh("scontrol", "show", "config").stdout.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip()
    return None


@contextlib.contextmanager
def max_array_size(n: int) -> Iterator[None]:
    """Run the block with the dev cluster's MaxArraySize set to ``n``; restore the old value afterwards."""
    old = scontrol_value("MaxArraySize")
    if not DEV_CLUSTER.exists() or old is None:
        pytest.skip("changing MaxArraySize needs slurm/dev-cluster.sh and scontrol")
    proc = _sh("bash", str(DEV_CLUSTER), "up", "--max-array-size", str(n), timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"cannot reconfigure the cluster (not the dev cluster, or not root): {proc.stderr[-300:]}")
    try:
        yield
    finally:
        restore = _sh("bash", str(DEV_CLUSTER), "up", "--max-array-size", old, timeout=120)
        assert restore.returncode == 0, f"could not restore MaxArraySize={old}: {restore.stderr}"


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """``{"12_3": "RUNNING", "13": "PENDING"}`` for the given jobs' elements still known to slurmctld."""
    if not job_ids:
        return {}
    proc = _sh("squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(job_ids)}", "--format=%i|%T")
    out = {}
    for line in proc.stdout.splitlines():
        elem, _, state = line.strip().partition("|")
        out[elem] = state
    return out


def wait_for_jobs(job_ids: list[str], timeout: float = 120, poll: float = 0.5) -> dict[str, str]:
    """Block until none of ``job_ids`` has an element pending or running; returns the last states."""
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = queue_states(job_ids)
        if not any(s in ACTIVE_STATES for s in states.values()):
            return states
        time.sleep(poll)
    raise AssertionError(f"jobs {job_ids} still active after {timeout:.0f} s: {states}")


def wait_for_state(element: str, wanted: set[str], timeout: float = 60, poll: float = 0.1) -> str:
    """Wait until array element ``JOB_IDX`` (or job) reaches one of ``wanted``; returns that state."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        job = element.split("_")[0]
        state = queue_states([job]).get(element, "")
        if state in wanted:
            return state
        time.sleep(poll)
    raise AssertionError(f"{element} did not reach {wanted} within {timeout:.0f} s (last: {state or 'unknown'})")


def submitted_job_ids(stdout: str) -> list[str]:
    """Job ids from ``shardprep submit``'s "submitted job(s): 12, 13" line."""
    for line in stdout.splitlines():
        if line.startswith("submitted job(s):"):
            return [x.strip() for x in line.split(":", 1)[1].split(",") if x.strip()]
    raise AssertionError(f"no 'submitted job(s)' line in:\n{stdout}")
