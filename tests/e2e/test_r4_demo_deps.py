"""`make demo` installs only what the demo needs (issue 31, item 17; usability-3/4 item 10).

It used to install ``.[all,test]`` plus torch (a 2.1 GB environment, about 5 minutes) for a demo that
tokenizes, finalizes, verifies and writes a report page.  Checked here without installing anything:
the commands ``make -n demo`` prints are run with a stand-in ``$PYTHON`` that records what pip would be
asked for (and says torch is absent), and the extras asked for are resolved through pyproject.toml; then
``shardprep demo`` runs with every package of the other extras blocked (``None`` in ``sys.modules`` from a
``sitecustomize`` on ``PYTHONPATH``, so the local executor's worker processes are blocked too).
``make test`` still installs everything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardprep._extras import EXTRA_OF

REPO = Path(__file__).resolve().parents[2]
HEAVY = {"all", "test", "loader", "wds"}          # the extras that bring torch or the test tools

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_installs(target: str) -> list[str]:
    """The ``scripts/install.sh`` command lines ``make TARGET`` would run (``make -n``: nothing is run)."""
    commands = subprocess.run(["make", "-n", "-s", target], cwd=REPO, capture_output=True, text=True, check=True)
    installs = [line for line in commands.stdout.splitlines() if "scripts/install.sh" in line]
    assert installs, commands.stdout
    return installs


def pip_requests(lines: list[str], tmp_path: Path) -> list[str]:
    """Run shell ``lines`` with a stand-in ``$PYTHON`` that installs nothing and has no torch; its calls' arguments."""
    log = tmp_path / "python-calls.log"
    fake = tmp_path / "fake-python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\n'
                    '[ "$1" = "-c" ] && exit 1\nexit 0\n')    # `-c "import torch"`: not installed
    fake.chmod(0o755)
    for line in lines:
        subprocess.run(line, shell=True, cwd=REPO, env={**os.environ, "PYTHON": str(fake)}, check=True)
    return log.read_text().splitlines()


def requested_extras(calls: list[str]) -> set[str]:
    editable = [m for c in calls for m in re.findall(r"-e \.\[([^\]]*)\]", c)]
    assert len(editable) == 1, calls
    return set(editable[0].split(","))


def expand(extras: set[str]) -> dict[str, list[str]]:
    """Each extra those extras stand for (``all`` = ``shardprep[s3,...]`` followed), with its requirements."""
    import tomllib

    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    found: dict[str, list[str]] = {}
    todo = list(extras)
    while todo:
        extra = todo.pop()
        found[extra] = table[extra]
        for req in table[extra]:
            nested = re.fullmatch(r"shardprep\[([^\]]+)\]", req)
            todo += nested[1].split(",") if nested else []
    return found


def resolve(extras: set[str]) -> set[str]:
    """The distributions those extras ask for (lower-case names)."""
    return {re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower() for reqs in expand(extras).values()
            for req in reqs if not req.startswith("shardprep[")}


def test_make_demo_installs_the_core_and_report_only_no_torch(tmp_path):
    calls = pip_requests(make_installs("demo"), tmp_path)
    extras = requested_extras(calls)
    assert extras == {"report"}, calls
    assert not extras & HEAVY
    assert not any("torch" in c for c in calls if c.startswith("-m pip")), calls
    assert "torch" not in resolve(extras)


def test_make_test_still_installs_everything_with_torch(tmp_path):
    # make test runs scripts/test.sh, which installs with scripts/install.sh and no arguments
    assert re.search(r"^bash scripts/install.sh$", (REPO / "scripts" / "test.sh").read_text(), re.M)
    calls = pip_requests(["bash scripts/install.sh"], tmp_path)
    assert any(re.search(r"-m pip install .*torch==", c) for c in calls), calls
    assert requested_extras(calls) == {"all", "test"}
    assert {"torch", "pytest", "matplotlib", "boto3"} <= resolve({"all", "test"})


def run_demo_without(blocked: set[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``shardprep demo`` (small) in a fresh interpreter where importing any of ``blocked`` fails."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"for name in {sorted(blocked)!r}:\n"
        "    sys.modules[name] = None   # import fails; importlib.util.find_spec gives None, as when absent\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "shardprep", "demo", "--workdir", str(tmp_path / "demo"),
                           "--files", "3", "--docs-per-file", "60", "--workers", "2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    assert "verified" in proc.stdout
    return proc


@pytest.mark.requires("report")
@pytest.mark.slow
def test_demo_runs_with_torch_and_every_extra_it_does_not_install_blocked(tmp_path):
    demo_extras = requested_extras(pip_requests(make_installs("demo"), tmp_path))
    blocked = {module for module, extra in EXTRA_OF.items() if extra not in expand(demo_extras)}
    assert {"torch", "gigatoken", "boto3", "datasets", "webdataset"} <= blocked
    proc = run_demo_without(blocked, tmp_path)
    assert re.search(r"^report: .*report\.html", proc.stdout, re.M), proc.stdout
    assert (tmp_path / "demo" / "shards" / "report.html").is_file()


@pytest.mark.slow
def test_demo_without_the_report_extra_still_runs_and_says_so_in_one_line(tmp_path):
    proc = run_demo_without(set(EXTRA_OF), tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("report:")]
    assert len(lines) == 1 and "not written" in lines[0] and "shardprep[report]" in lines[0], proc.stdout
