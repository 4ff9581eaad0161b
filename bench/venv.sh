#!/usr/bin/env bash
# Shared by the bench set-up scripts: make (or reuse) the venv $1 and pip-install the rest of the arguments
# into it, so a benchmark's own pins never touch shardprep's environment.
# Usage (sourced): bench_venv VENV_DIR PACKAGE...
bench_venv() {
    local venv="$1"; shift
    local py="${PYTHON:-python3}"
    if [ ! -x "$venv/bin/python" ]; then
        "$py" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$@"
}
