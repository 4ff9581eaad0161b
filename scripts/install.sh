#!/usr/bin/env bash
# Install shardprep with every extra ([all]: s3, slurm, hf, loader, fast) and what the tests need into the
# current Python environment.
# torch: if none is installed yet, take the CPU build pinned below (small, and what CI uses); on a GPU
# cluster install your CUDA torch first and this script leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==${SHARDPREP_TORCH_VERSION:-2.13.0}"
fi
"$PY" -m pip install --quiet -e ".[all,test]"
