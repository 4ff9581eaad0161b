#!/usr/bin/env bash
# Install s3rver (a Node.js S3 server keeping objects in files) for `bench/stage.py --server s3rver`.
# moto, which the tests use, spends 2.5-4 ms of CPU per GET in one Python process and is the bottleneck
# for small objects; s3rver needs about 1 ms, so the comparison with the aws cli measures the clients.
# Usage: bench/setup_s3rver.sh [DIR]   (default /tmp/s3rver; bench/stage.py --s3rver DIR/node_modules/.bin/s3rver)
set -euo pipefail
DIR="${1:-/tmp/s3rver}"
command -v npm >/dev/null || { echo "setup_s3rver: npm not found (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$DIR"
npm install --prefix "$DIR" --silent --no-audit --no-fund s3rver@3
"$DIR/node_modules/.bin/s3rver" --version
