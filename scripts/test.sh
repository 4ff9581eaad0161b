#!/usr/bin/env bash
# The test suite, as README.md gives it and .ci/run calls it: install, lint (ruff) and type-check (mypy)
# at the level pyproject.toml sets (docs/architecture.md, "Checks"), start the one-node Slurm the live
# tests use, run pytest (unit, CLI, Slurm, S3 API, torchrun DDP).  A finding of either check fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh
# The az:// tests run Azurite (Azure's Blob API server), which they install with npm on first use: take
# Debian's npm where the machine has none (the tests skip az:// with a reason when npm is missing).
if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ]; then
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq npm >/dev/null; } \
        || echo "apt-get install npm failed: the az:// tests will be skipped" >&2
fi
# Azurite itself installs (npm, into the repository's ignored .cache/) while the checks below run: the install
# mostly waits on the registry (~20 s), which the tests would otherwise wait out in the middle of the run.
AZURITE_PID=""
if command -v npm >/dev/null; then
    "$PY" -c 'import sys; sys.path.insert(0, "tests"); import remote_servers; remote_servers.azurite_binary()' \
        >/dev/null 2>&1 &
    AZURITE_PID=$!
fi
"$PY" -m ruff check
"$PY" -m mypy
if [ -x slurm/dev-cluster.sh ] || [ -f slurm/dev-cluster.sh ]; then
    if ! bash slurm/dev-cluster.sh up; then
        echo "slurm/dev-cluster.sh up failed: the live Slurm tests will be skipped" >&2
        if [ "${CI:-}" = "true" ]; then exit 1; fi
    fi
fi
# Python's byte-code cache on: an image that sets PYTHONDONTWRITEBYTECODE makes every process the tests start
# (torchrun ranks, fork servers, the CLI run as a process) compile shardprep's modules again: a quarter of a
# live test's time.  __pycache__/ is ignored by git.
unset PYTHONDONTWRITEBYTECODE
if [ -n "$AZURITE_PID" ] && ! wait "$AZURITE_PID"; then
    echo "installing Azurite failed here: the az:// tests try again, or skip with the reason" >&2
fi
# pytest-xdist workers, each test file on one worker (module fixtures are built once): one per CPU, and one
# more, because the process tiers wait (on Slurm's scheduler and a requeue's delay, torchrun's rendezvous,
# the object-store servers) and left a CPU idle a tenth of the run; an extra worker fills it (measured on 2
# CPUs: 585 s -> 485 s).  `make test-fast`, CPU-bound throughout, keeps one worker per CPU.  Files are
# handed out in the order tests/conftest.py sorts them (process tiers first), not by xdist's test count.
WORKERS=$(( $("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))') + 1 ))
exec "$PY" -m pytest -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder "$@"
