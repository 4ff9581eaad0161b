#!/usr/bin/env bash
# The test suite, as README.md gives it and .ci/run calls it: install, start the one-node Slurm the
# live tests use, run pytest (unit, CLI, Slurm, S3 API, torchrun DDP).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh
if [ -x slurm/dev-cluster.sh ] || [ -f slurm/dev-cluster.sh ]; then
    if ! bash slurm/dev-cluster.sh up; then
        echo "slurm/dev-cluster.sh up failed: the live Slurm tests will be skipped" >&2
        if [ "${CI:-}" = "true" ]; then exit 1; fi
    fi
fi
exec "$PY" -m pytest -q "$@"
