"""The Slurm command-line tools shardprep calls (sbatch, scontrol, squeue, sacct), in one place.

Each wrapper turns "tool missing" and "tool failed" into an ``EnvironmentProblem`` that names the command
and quotes its stderr, so a user sees ``sbatch --parsable ...: sbatch: error: invalid partition`` rather
than a traceback.  Queries that are optional (squeue for status, sacct which many sites disable) return
``None`` instead of raising, and callers fall back to the files in the output directory.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

from shardprep.errors import EnvironmentProblem
from shardprep.executor.slurm.render import DEFAULT_MAX_ARRAY_SIZE

log = logging.getLogger(__name__)

TIMEOUT_S = 60


# What a Slurm tool prints when slurmctld cannot be reached; each such call waits out Slurm's MessageTimeout
# (10 s by default), so a command that asks three tools (a --dry-run: scontrol, sinfo twice) would wait
# 30 s to learn it once.
UNREACHABLE = "Unable to contact slurm controller"
REMEMBER_UNREACHABLE_S = 60.0


@dataclass
class _Controller:
    """What this process learnt of slurmctld: the stderr of a call that could not reach it, and until when
    later calls answer with it at once instead of waiting again (a minute: a long-lived process that
    imports shardprep asks again after that)."""

    unreachable: str | None = None
    until: float = 0.0

    def known_down(self) -> str | None:
        return self.unreachable if time.monotonic() < self.until else None


_CONTROLLER = _Controller()


def forget_controller() -> None:
    """Ask slurmctld again on the next call (a cluster started since)."""
    _CONTROLLER.unreachable, _CONTROLLER.until = None, 0.0


def _run(cmd: Sequence[str], *, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    if shutil.which(cmd[0]) is None:
        raise EnvironmentProblem(f"{cmd[0]} not found on PATH",
                                 hint="run on a Slurm login node, or use --executor local")
    down = _CONTROLLER.known_down()
    if down is not None and list(cmd[1:]) != ["--version"]:      # --version never asks the controller
        return subprocess.CompletedProcess(list(cmd), 1, "", down)
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{' '.join(cmd)} did not answer within {timeout:.0f} s "
                                 "(is slurmctld up?)") from None
    if proc.returncode != 0 and UNREACHABLE in (proc.stderr or ""):
        _CONTROLLER.unreachable, _CONTROLLER.until = proc.stderr, time.monotonic() + REMEMBER_UNREACHABLE_S
    return proc


def run_checked(cmd: Sequence[str]) -> str:
    """Run a Slurm tool; its stdout, or EnvironmentProblem with the command and its stderr."""
    proc = _run(cmd)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise EnvironmentProblem(f"{' '.join(cmd)} failed (exit {proc.returncode}): {' | '.join(err[-3:])}")
    return proc.stdout


def sbatch_argv(script: str, *, dependency: str | None = None, kill_on_invalid_dep: bool = False) -> list[str]:
    """The ``sbatch --parsable ...`` command for ``script`` (also shown by --dry-run)."""
    return ["sbatch", "--parsable", *([f"--dependency={dependency}"] if dependency else []),
            *(["--kill-on-invalid-dep=yes"] if kill_on_invalid_dep else []), script]


def sbatch(script: str, *, dependency: str | None = None, kill_on_invalid_dep: bool = False) -> str:
    """Submit ``script`` (a path) with ``sbatch --parsable``; returns the job id."""
    cmd = sbatch_argv(script, dependency=dependency, kill_on_invalid_dep=kill_on_invalid_dep)
    out = run_checked(cmd).strip()
    job_id = out.splitlines()[-1].split(";", 1)[0] if out else ""
    if not job_id.isdigit():
        raise EnvironmentProblem(f"{' '.join(cmd)} printed {out!r}, not a job id")
    return job_id


def max_array_size() -> tuple[int, str]:
    """(MaxArraySize, where it came from): ``scontrol show config``, or Slurm's default 1001."""
    try:
        out = run_checked(["scontrol", "show", "config"])
    except EnvironmentProblem as e:
        log.info("cannot read MaxArraySize (%s); assuming Slurm's default %d", e, DEFAULT_MAX_ARRAY_SIZE)
        return DEFAULT_MAX_ARRAY_SIZE, "default (scontrol unavailable)"
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit():
            return int(value.strip()), "scontrol show config"
    return DEFAULT_MAX_ARRAY_SIZE, "default (not in scontrol show config)"


def partition_cpus(partition: str | None) -> tuple[int, str] | None:
    """(usable CPUs, partition name) of ``partition`` (default: the cluster's default partition), from
    ``sinfo``: all CPUs minus those Slurm reports as other (down, drained).  None when sinfo cannot say."""
    rows = _optional_query(["sinfo", "-h", "-o", "%P|%C"] + (["-p", partition] if partition else []))
    if not rows:
        return None
    chosen = [r for r in rows if len(r) == 2 and (partition or r[0].endswith("*"))] or rows[:1]
    name, cpus = chosen[0][0].rstrip("*"), chosen[0][-1].split("/")      # %C: allocated/idle/other/total
    if len(cpus) != 4 or not all(c.isdigit() for c in cpus):
        return None
    usable = int(cpus[3]) - int(cpus[2])
    return (usable, name) if usable > 0 else None


def largest_node_cpus(partition: str | None) -> tuple[int, str] | None:
    """(CPUs of the largest node of ``partition`` (default: the default partition), its name), from
    ``sinfo -N``; None when sinfo cannot say.  A job's CPUs must fit on one node (``executor.slurm.fit``)."""
    rows = _optional_query(["sinfo", "-h", "-N", "-o", "%P|%c"] + (["-p", partition] if partition else []))
    mine = [r for r in rows or [] if len(r) == 2 and (partition or r[0].endswith("*"))]
    cpus = [int(r[1].rstrip("+")) for r in mine if r[1].rstrip("+").isdigit()]
    return (max(cpus), mine[0][0].rstrip("*")) if cpus else None


@dataclass(frozen=True)
class QueueEntry:
    """One array element (or plain job) as squeue/sacct report it."""

    job_id: str          # the array's job id (%F), or the job id
    index: int | None    # array index (%K), None for plain jobs
    state: str           # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
    reason: str = ""
    exit_code: str = ""  # sacct only, "rc:signal"


def _expand_index(text: str) -> list[int | None]:
    """squeue prints pending, not yet split array elements as ``0-5%2`` or ``[3,7-9]``."""
    from shardprep.job.state import parse_array_ranges

    text = text.strip().strip("[]")
    if text in ("", "N/A"):
        return [None]
    return list(parse_array_ranges(text))


def _optional_query(cmd: list[str]) -> list[list[str]] | None:
    """``|``-separated rows of an optional query; None when the tool is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = _run(cmd)
    except EnvironmentProblem as e:
        log.warning("%s", e)
        return None
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:      # squeue: every id already purged, nothing queued
            return []
        log.debug("%s failed: %s", " ".join(cmd), proc.stderr.strip())   # e.g. accounting disabled
        return None
    return [line.strip().split("|") for line in proc.stdout.splitlines() if line.strip()]


def squeue(job_ids: Sequence[str]) -> list[QueueEntry] | None:
    """Elements of ``job_ids`` still known to slurmctld (pending, running, recently ended); None if unknown."""
    rows = _optional_query(["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(job_ids)}",
                            "--format=%F|%K|%T|%r"]) if job_ids else None
    if rows is None:
        return None
    return [QueueEntry(r[0], index, r[2], r[3]) for r in rows if len(r) == 4 for index in _expand_index(r[1])]


def sacct(job_ids: Sequence[str]) -> list[QueueEntry] | None:
    """Final states from accounting; None when sacct is missing or accounting is disabled (common)."""
    rows = _optional_query(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={','.join(job_ids)}",
                            "--format=JobID,State,ExitCode"]) if job_ids else None
    if rows is None:
        return None
    entries = []
    for r in (r for r in rows if len(r) == 3):
        job, _, index = r[0].partition("_")
        indices = _expand_index(index) if index else [None]
        entries += [QueueEntry(job, i, r[1].split()[0], exit_code=r[2]) for i in indices]
    return entries
