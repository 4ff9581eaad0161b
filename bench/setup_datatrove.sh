#!/usr/bin/env bash
# Install datatrove into its own venv for bench/tokenize.py's DocumentTokenizer comparison.
# A separate venv keeps datatrove's pins (fsspec, numpy, tokenizers...) out of shardprep's environment.
# Usage: bench/setup_datatrove.sh [VENV_DIR]   (default /tmp/dt-venv; bench/tokenize.py --datatrove-python)
set -euo pipefail
VENV="${1:-/tmp/dt-venv}"
source "$(dirname "$0")/venv.sh"
bench_venv "$VENV" datatrove tokenizers orjson
"$VENV/bin/python" -c "import datatrove, tokenizers; from datatrove.pipeline.tokens import DocumentTokenizer; print('datatrove', datatrove.__version__ if hasattr(datatrove, '__version__') else '', 'tokenizers', tokenizers.__version__)"
