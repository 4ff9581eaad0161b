"""A full disk while staging (issue 31, item 12c) is what it is everywhere else: one line naming the file
and the space left, exit 8, the temporary file removed; it was exit 7 with a raw ``OSError`` per object.
Runs ``shardprep stage`` against moto's S3 server into a real 2 MiB tmpfs (skipped where none can be
mounted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from s3_server import aws_env, make_bucket, s3_client

from shardprep.errors import EXIT_ENVIRONMENT

pytestmark = pytest.mark.s3


def test_a_full_disk_while_staging_is_one_line_and_exit_8(s3_endpoint, small_fs, tmp_path):
    bucket = make_bucket(s3_endpoint, "full")
    client = s3_client(s3_endpoint)
    for i in range(4):                                    # 4 x 900 KiB into 2 MiB: the third cannot land
        client.put_object(Bucket=bucket, Key=f"raw/f{i}.bin", Body=bytes([i]) * (900 << 10))
    dest = small_fs / "staged"
    proc = subprocess.run([sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest),
                           "--endpoint-url", s3_endpoint, "--concurrency", "1", "--no-progress"],
                          env=aws_env(), capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower() or "OSError" in line]
    assert proc.returncode == EXIT_ENVIRONMENT, proc.stderr
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"shardprep stage: error: no space left on device writing {dest}/f"), errors[0]
    assert "bytes free of" in errors[0] and "its temporary file was removed" in errors[0]
    assert "OSError" not in proc.stderr and "Traceback" not in proc.stderr
    assert not [p for p in Path(dest).rglob(".*.tmp*")]
