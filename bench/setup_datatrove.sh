#!/usr/bin/env bash
# Install datatrove into its own venv for bench/tokenize.py's DocumentTokenizer comparison.
# A separate venv keeps datatrove's pins (fsspec, numpy, tokenizers...) out of shardprep's environment.
# Usage: bench/setup_datatrove.sh [VENV_DIR]   (default /tmp/dt-venv; bench/tokenize.py --datatrove-python)
set -euo pipefail
VENV="${1:-/tmp/dt-venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet datatrove tokenizers orjson
"$VENV/bin/python" -c "import datatrove, tokenizers; from datatrove.pipeline.tokens import DocumentTokenizer; print('datatrove', datatrove.__version__ if hasattr(datatrove, '__version__') else '', 'tokenizers', tokenizers.__version__)"
