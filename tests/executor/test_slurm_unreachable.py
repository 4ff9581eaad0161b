"""Where slurmctld cannot be reached, each Slurm tool waits out its MessageTimeout: a command learns it once
and does not ask again for a while (a --dry-run asked scontrol and sinfo twice: 3 x 9 s here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardprep.executor.slurm import commands


@pytest.fixture
def counting_tools(tmp_path, monkeypatch) -> Path:
    """sinfo/scontrol/squeue that answer 'unreachable' and count their calls in calls.log; sbatch --version works."""
    log = tmp_path / "calls.log"
    for tool in ("sinfo", "scontrol", "squeue", "sbatch"):
        script = tmp_path / tool
        body = f"echo {tool} \"$@\" >> {log}\n"
        body += ('[ "$1" = --version ] && { echo "slurm 23.11.4"; exit 0; }\n' if tool == "sbatch" else "")
        body += f"echo '{tool}: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    commands.forget_controller()
    yield log
    commands.forget_controller()


def test_an_unreachable_controller_is_asked_once(counting_tools):
    assert commands.max_array_size() == (commands.DEFAULT_MAX_ARRAY_SIZE, "default (scontrol unavailable)")
    assert commands.partition_cpus(None) is None and commands.largest_node_cpus(None) is None
    assert commands.squeue(["12"]) is None
    assert counting_tools.read_text().splitlines() == ["scontrol show config"]
    assert commands.run_checked(["sbatch", "--version"]).strip() == "slurm 23.11.4"   # never asks slurmctld
    with pytest.raises(commands.EnvironmentProblem, match="Unable to contact slurm controller"):
        commands.run_checked(["sbatch", "--parsable", "job.sbatch"])
    assert len(counting_tools.read_text().splitlines()) == 2


def test_the_answer_is_forgotten_after_a_while(counting_tools, monkeypatch):
    commands.partition_cpus(None)
    now = commands.time.monotonic()
    monkeypatch.setattr(commands.time, "monotonic", lambda: now + commands.REMEMBER_UNREACHABLE_S + 1)
    commands.partition_cpus(None)
    assert [line.split()[0] for line in counting_tools.read_text().splitlines()] == ["sinfo", "sinfo"]
