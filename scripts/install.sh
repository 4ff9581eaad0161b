#!/usr/bin/env bash
# Install shardprep into the current Python environment.
#   bash scripts/install.sh              every extra ([all]: s3, slurm, hf, loader, fast, ...) and what the
#                                        tests need ([test]): `make install`, `make test` (scripts/test.sh)
#   bash scripts/install.sh EXTRA ...    the core and only these extras: `make demo` takes [report] (the
#                                        figures of its page) and no torch, a fifth of the full environment
# torch (only for extras that need it: all, loader, wds): if none is installed yet, take the CPU build pinned
# below (small, and what CI uses); on a GPU cluster install your CUDA torch first and this script leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=("$@")
[ ${#EXTRAS[@]} -gt 0 ] || EXTRAS=(all test)
for extra in "${EXTRAS[@]}"; do
    case "$extra" in
        all|loader|wds)
            if ! "$PY" -c "import torch" 2>/dev/null; then
                "$PY" -m pip install --quiet "torch==${SHARDPREP_TORCH_VERSION:-2.13.0}"
            fi
            break;;
    esac
done
"$PY" -m pip install --quiet -e ".[$(IFS=,; echo "${EXTRAS[*]}")]"
