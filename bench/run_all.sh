#!/usr/bin/env bash
# Run every benchmark present (tokenize, tokenizer_families, loader, stage, report, plan_scale, task_cost,
# remote_inputs) and write each one's markdown table to
# bench/results/<name>.md; docs/benchmarks.md quotes those tables.
#
# Usage: bench/run_all.sh [--quick]        extra arguments go to every script
#        PYTHON=/path/to/python bench/run_all.sh
# The datatrove comparison in bench/tokenize.py needs bench/setup_datatrove.sh to have run once, the
# staging comparison against s3rver (bench/results/stage-s3rver.md) bench/setup_s3rver.sh, and the s5cmd / CRT
# columns of both staging reports bench/setup_s3tools.sh (make bench-setup runs all three).
# Benchmarks load every core: run them on an otherwise idle machine.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
mkdir -p bench/results
status=0
runs=(tokenize tokenizer_families loader stage report plan_scale task_cost remote_inputs)
[ -x /tmp/s3rver/node_modules/.bin/s3rver ] && runs+=(stage-s3rver)
for name in "${runs[@]}"; do
    script="bench/${name%%-*}.py"
    extra=()
    [ "$name" = stage-s3rver ] && extra=(--server s3rver)
    if [ ! -f "$script" ]; then
        echo "run_all: $script not present, skipped" >&2
        continue
    fi
    echo "run_all: $PY $script ${extra[*]} $*" >&2
    if "$PY" "$script" "${extra[@]}" "$@" > "bench/results/.$name.md.tmp"; then
        mv "bench/results/.$name.md.tmp" "bench/results/$name.md"
        echo "run_all: wrote bench/results/$name.md" >&2
    else
        echo "run_all: $script failed (exit $?); bench/results/$name.md left as it was" >&2
        rm -f "bench/results/.$name.md.tmp"
        status=1
    fi
done
exit $status
