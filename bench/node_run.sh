#!/usr/bin/env bash
# Issue 20's measurements on a bigger node, one part after another, each part's report written as soon as it
# ends (a run cut short still leaves the parts it finished).  Usage, from the checkout's root:
#
#     bash bench/node_run.sh OUTDIR [ROUNDS]
#
# Where the node has no network: wheels of the missing packages in .whl/ (installed with --no-index) and the
# shared GPT-2 tokenizer and corpus in .devshared/ (linked as ../shared when none is there).
set -uo pipefail
out=${1:?usage: node_run.sh OUTDIR [ROUNDS]}
rounds=${2:-2}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
[ -d ../shared ] || { [ -d .devshared ] && ln -s "$PWD/.devshared" ../shared; }
# tmpfs when it has room for 10 GB of input and its shards (the issue measured on tmpfs)
work=/tmp/shardprep-node
if [ "$(df -P --output=avail -k /dev/shm 2>/dev/null | tail -1)" -gt $((40 << 20)) ] 2>/dev/null; then
    work=/dev/shm/shardprep-node
fi
{ nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Flags" | cut -c1-200; free -g | head -2; df -h "${work%/*}"
  python3 -c "import gigatoken, tokenizers, numpy; print('gigatoken', gigatoken.__version__ if hasattr(gigatoken, '__version__') else '?', 'tokenizers', tokenizers.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$out/machine.txt"
export PYTHONUNBUFFERED=1
part() {  # name, seconds it may take, then encoder_ratio.py arguments
    local name=$1 limit=$2; shift 2
    echo "== $name ($(date +%T))"
    timeout "$limit" python3 bench/encoder_ratio.py --work "$work" --rounds "$rounds" --out "$out/$name.md" "$@" \
        2> >(tee "$out/$name.log" >&2) || echo "== $name failed: $?"
}
part job 150 --only none --job-gb 10
part cores 80 --only cores
part threads 80 --only threads
part single 100 --only startup,single
part hf 60 --only hf --hf-mb 16
echo "== done ($(date +%T))"
