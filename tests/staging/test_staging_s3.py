"""``stage`` and ``upload`` against a real S3 API (moto's server on 127.0.0.1), plus their pure rules.

The CLI runs as a subprocess (``python -m shardprep``) with dummy credentials from the environment; a
small proxy (``tests/s3_server.FaultProxy``) injects HTTP 500s, throttles bodies for the kill test and
logs requests for the upload-order check.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from conftest import examples
from fake_lfs import install as install_fake_lfs  # noqa: E402
from s3_server import FaultProxy, aws_env, make_bucket, s3_client  # noqa: E402

from shardprep.staging.integrity import VerificationFailed, infer_part_size, multipart_etag, verify_download  # noqa: E402
from shardprep.staging.manifest import matches_filters  # noqa: E402
from shardprep.staging.s5cmd import find_binary as find_s5cmd  # noqa: E402
from shardprep.storage import keys as keymod  # noqa: E402

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
from conftest import SHARED  # noqa: E402  (finds /work/shared from a worktree too)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardprep", *args], cwd=REPO, env=aws_env(),
                          capture_output=True, text=True, timeout=timeout)


def put_multipart(client, bucket: str, key: str, data: bytes, part: int = 5 * MIB, **extra) -> None:
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=part, multipart_chunksize=part)
    client.upload_fileobj(io.BytesIO(data), bucket, key, Config=cfg, ExtraArgs=extra or None)


def temp_files(root: Path) -> list[Path]:
    """Our hidden temporaries, and s5cmd's own temporaries of them (it appends digits)."""
    return [p for p in root.rglob(".*.tmp*")]


# Both transfer engines must behave the same wherever the user can tell (--engine s5cmd: s5cmd fetches the
# objects of at least --part-size).  s5cmd comes with the test extra; without its binary those cases skip.
ENGINES = [pytest.param("builtin"),
           pytest.param("s5cmd", marks=pytest.mark.skipif(find_s5cmd() is None, reason="s5cmd not installed"))]


# ------------------------------------------------------------------------------------ keys (pure rules)

@pytest.mark.parametrize("rel,reason", [
    ("../evil", "'..' path segment"),
    ("data/../evil.txt", "'..' path segment"),
    ("/etc/passwd", "absolute path"),
    ("a//b", "empty path segment"),
    ("a/./b", "'.' path segment"),
    ("", "empty name"),
    ("x" * 300, "longer than 255 bytes"),
])
def test_unsafe_keys_are_refused(rel, reason):
    mapping, refused = keymod.plan_local_paths([rel, "fine.txt"])
    assert list(mapping) == ["fine.txt"]
    assert len(refused) == 1 and refused[0].key == rel and reason in refused[0].reason


def test_collisions_after_normalisation_and_file_dir_clashes_are_refused():
    nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
    mapping, refused = keymod.plan_local_paths([nfc, nfd, "a", "a/b.txt", "ünï/ç.txt"])
    assert set(mapping) == {"a/b.txt", "ünï/ç.txt"}
    assert {r.key for r in refused} == {nfc, nfd, "a"}
    assert "directory of other keys" in next(r.reason for r in refused if r.key == "a")


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("ab./\u00e9\u0301")), max_size=12), max_size=8))
def test_accepted_keys_stay_inside_the_destination_and_never_share_a_path(rels):
    mapping, refused = keymod.plan_local_paths(rels)
    dest = Path("/stage/dest")
    assert len(mapping) + len(refused) == len(set(rels))
    normalised = set()
    for local in mapping.values():
        resolved = Path(os.path.normpath(dest / local))
        assert resolved != dest and dest in resolved.parents
        assert keymod.normalised(str(local)) not in normalised
        normalised.add(keymod.normalised(str(local)))


def test_filters():
    assert matches_filters("a/b.jsonl.zst", ["*.jsonl.zst"], [])
    assert not matches_filters("a/b.txt", ["*.jsonl.zst"], [])
    assert not matches_filters("tmp/b.jsonl.zst", ["*.jsonl.zst"], ["tmp/*"])
    assert matches_filters("x", [], [])


# ------------------------------------------------------------------------------ verification (pure rules)

def test_multipart_etag_and_part_size_inference(tmp_path):
    data = os.urandom(11 * MIB + 123)
    f = tmp_path / "blob"
    f.write_bytes(data)
    parts = [data[i:i + 5 * MIB] for i in range(0, len(data), 5 * MIB)]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    assert multipart_etag(f, 5 * MIB) == expected
    assert infer_part_size(len(data), 3) == 5 * MIB       # only 5 MiB gives 3 parts
    assert infer_part_size(len(data), 2) == 8 * MIB       # [5.5, 11) MiB holds only 8 MiB
    assert infer_part_size(20 * MIB + 1, 2) is None       # 15 and 16 MiB both fit: ask S3 for part 1
    assert infer_part_size(100 * MIB, 13) == 8 * MIB      # aws cli default


def test_verify_uses_the_best_evidence(tmp_path):
    data = os.urandom(20 * MIB)
    f = tmp_path / "blob"
    f.write_bytes(data)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    etag_16m = multipart_etag(f, 16 * MIB)  # 2 parts: 15 and 16 MiB both fit -> needs part 1's size
    heads: list[dict] = []

    def head_factory(full: dict, part1: int):
        def head(**extra):
            heads.append(extra)
            return {"ContentLength": part1} if "PartNumber" in extra else full
        return head

    # Full-object checksum present and declared FULL_OBJECT: used, no part size needed.
    r = verify_download(f, size=len(data), etag=etag_16m, head=head_factory(
        {"ChecksumCRC32": crc, "ChecksumType": "FULL_OBJECT"}, 0))
    assert (r.method, r.value) == ("crc32", crc)
    # COMPOSITE checksums are not a digest of the content: fall back to the ETag with part 1's size.
    heads.clear()
    r = verify_download(f, size=len(data), etag=etag_16m, head=head_factory(
        {"ChecksumCRC32": "AAAAAA==-2", "ChecksumType": "COMPOSITE"}, 16 * MIB))
    assert r.method == "multipart-etag" and {"PartNumber": 1} in heads
    # Single-part ETag: MD5, no HEAD at all.
    small = tmp_path / "small"
    small.write_bytes(b"hello")
    heads.clear()
    assert verify_download(small, size=5, etag=hashlib.md5(b"hello").hexdigest(),
                           head=head_factory({}, 0)).method == "md5"
    assert heads == []
    # Wrong bytes fail; an SSE-KMS object's opaque ETag falls back to size with a warning.
    with pytest.raises(VerificationFailed, match="MD5"):
        verify_download(small, size=5, etag="0" * 32, head=head_factory({}, 0))
    with pytest.raises(VerificationFailed, match="size 5 != listed size 6"):
        verify_download(small, size=6, etag="0" * 32, head=head_factory({}, 0))
    kms = verify_download(small, size=5, etag="0" * 32, head=head_factory({"ServerSideEncryption": "aws:kms"}, 0))
    assert kms.method == "size-only"
    heads.clear()
    kms = verify_download(f, size=len(data), etag="0" * 32 + "-2", head=head_factory(
        {"ServerSideEncryption": "aws:kms", "ChecksumSHA256": "AAAA-2"}, 16 * MIB))
    assert kms.method == "size-only" and heads == [{"ChecksumMode": "ENABLED"}]
    with pytest.raises(VerificationFailed, match="multipart ETag"):   # not encrypted: a real mismatch
        verify_download(f, size=len(data), etag="0" * 32 + "-2", head=head_factory({}, 16 * MIB))


def test_stage_options_round_trip_through_the_command_line(tmp_path):
    from shardprep.cli.main import build_parser
    from shardprep.cli.stage import options_from_args

    argv = ["stage", "s3://bkt/raw/", str(tmp_path / "d"), "--include", "*.zst", "--exclude", "tmp/*",
            "--concurrency", "7", "--part-size", "32M", "--endpoint-url", "http://127.0.0.1:9", "--region",
            "eu-west-1", "--stripe-count", "2", "--engine", "s5cmd"]
    options = options_from_args(build_parser().parse_args(argv))
    again = options_from_args(build_parser().parse_args(options.to_argv()))
    assert again == options
    assert options.multipart_chunksize == 32 * MIB and options.layout.args == ("-c", "2")
    assert not any("secret" in a.lower() or "key-id" in a.lower() for a in options.to_argv())


def test_bad_stage_options_exit_2_naming_the_option(tmp_path):
    # refused before any client is made: in this process (no credentials or server involved)
    from helpers import run_cli as run_here

    for argv, needle in ((["--part-size", "1M"], "--part-size"), (["--concurrency", "0"], "--concurrency"),
                         (["--then-tokenize", "--output", "x"], "--then-tokenize needs --submit"),
                         (["--endpoint-url", "localhost:9000"], "--endpoint-url")):
        r = run_here("stage", "s3://bkt/raw/", str(tmp_path / "d"), *argv, check=False)
        assert r.returncode == 2 and needle in r.stderr, (argv, r.stderr)
    r = run_here("stage", "gs://bkt/raw/", str(tmp_path / "d"), check=False)
    assert r.returncode == 2 and "SOURCE must start with s3://" in r.stderr
    assert not (tmp_path / "d").exists()


# ----------------------------------------------------------------------------------- stage against S3

@pytest.fixture
def bucket(s3_endpoint):
    return make_bucket(s3_endpoint)


@pytest.mark.s3
@pytest.mark.parametrize("engine", ENGINES)
def test_stage_many_small_multipart_and_unicode_objects(s3_endpoint, bucket, tmp_path, engine):
    c = s3_client(s3_endpoint)
    expected: dict[str, bytes] = {}
    for i in range(120):
        expected[f"d{i % 4}/f{i:03d}.txt"] = os.urandom(200 + i)
    expected["ünïcode/çafé ✓.txt"] = "ünïcode ✓".encode()
    expected["empty.txt"] = b""
    for rel, body in expected.items():
        c.put_object(Bucket=bucket, Key=f"raw/{rel}", Body=body)
    big = os.urandom(11 * MIB + 5)
    put_multipart(c, bucket, "raw/big/multi.bin", big)
    expected["big/multi.bin"] = big
    c.put_object(Bucket=bucket, Key="raw/folder/", Body=b"")      # console "folder": not a file
    c.put_object(Bucket=bucket, Key="other/x.txt", Body=b"x")     # outside the prefix
    dest = tmp_path / "dest"

    r = run_cli("stage", f"s3://{bucket}/raw", str(dest), "--endpoint-url", s3_endpoint, "--part-size", "5M",
                "--concurrency", "8", "--json", "--engine", engine)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["files"] == len(expected) and summary["failed"] == 0
    assert summary["bytes"] == sum(len(b) for b in expected.values())
    for rel, body in expected.items():
        assert (dest / rel).read_bytes() == body, rel
    assert not (dest / "folder").exists() and not (dest / "x.txt").exists()
    assert temp_files(dest) == []
    records = [json.loads(line) for line in (dest / ".shardprep-stage" / "verified.jsonl").read_text().splitlines()]
    methods = {r["path"]: r["method"] for r in records}
    assert methods["big/multi.bin"] == "multipart-etag"
    assert methods["d0/f000.txt"] == "md5" and len(methods) == len(expected)
    manifest = json.loads((dest / ".shardprep-stage" / "manifest.json").read_text())
    assert manifest["source"] == f"s3://{bucket}/raw/" and manifest["objects"] == len(expected)

    # Second run: everything is skipped from the verified record, nothing downloaded.
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint, "--json")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert (again["files"], again["skipped"]) == (0, len(expected))


@pytest.mark.s3
def test_large_objects_are_fetched_in_their_upload_parts(s3_endpoint, bucket, tmp_path):
    """Ranges follow the upload's parts (so the multipart ETag is hashed while streaming, no HEAD, no re-read);
    an ambiguous part size costs one HEAD ?partNumber=1; a single-part ETag uses --part-size ranges."""
    c = s3_client(s3_endpoint)
    inferred = os.urandom(11 * MIB + 5)             # 3 parts of 5 MiB: only 5 MiB fits
    ambiguous = os.urandom(20 * MIB + 1)            # 2 parts of 16 MiB: 15 MiB would fit as well
    single = os.urandom(6 * MIB)                    # one PUT: ETag = MD5
    put_multipart(c, bucket, "raw/inferred.bin", inferred)
    put_multipart(c, bucket, "raw/ambiguous.bin", ambiguous, part=16 * MIB)
    c.put_object(Bucket=bucket, Key="raw/single.bin", Body=single)
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/raw/inferred.bin", times=1)     # one range answered 500: botocore retries it
        r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", proxy.url, "--part-size", "5M",
                    "--engine", "builtin")
        assert r.returncode == 0, r.stderr

        def ranges(key):
            return sorted(x.range for x in proxy.requests_for(key, "GET") if x.status == 206)
        assert ranges("/raw/inferred.bin") == ["bytes=0-5242879", "bytes=10485760-11534340",
                                               "bytes=5242880-10485759"]
        assert ranges("/raw/ambiguous.bin") == ["bytes=0-16777215", "bytes=16777216-20971520"]
        assert ranges("/raw/single.bin") == ["bytes=0-5242879", "bytes=5242880-6291455"]
        assert proxy.requests_for("/raw/inferred.bin", "HEAD") == []
        assert [x.query for x in proxy.requests_for("/raw/ambiguous.bin", "HEAD")] == ["partNumber=1"]
        assert proxy.requests_for("/raw/single.bin", "HEAD") == []
    for name, body in (("inferred.bin", inferred), ("ambiguous.bin", ambiguous), ("single.bin", single)):
        assert (dest / name).read_bytes() == body, name
    records = [json.loads(line) for line in (dest / ".shardprep-stage" / "verified.jsonl").read_text().splitlines()]
    assert {r["path"]: r["method"] for r in records} == {"inferred.bin": "multipart-etag",
                                                         "ambiguous.bin": "multipart-etag", "single.bin": "md5"}


@pytest.mark.s3
def test_include_exclude_and_dry_run_write_nothing(s3_endpoint, bucket, tmp_path):
    c = s3_client(s3_endpoint)
    for rel in ("a/1.jsonl.zst", "a/2.jsonl.zst", "a/skip.txt", "tmp/3.jsonl.zst"):
        c.put_object(Bucket=bucket, Key=f"raw/{rel}", Body=b"0123456789")
    dest = tmp_path / "dest"
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint,
                "--include", "*.jsonl.zst", "--exclude", "tmp/*", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "a/1.jsonl.zst" in r.stdout and "a/2.jsonl.zst" in r.stdout
    assert "skip.txt" not in r.stdout and "tmp/3" not in r.stdout
    assert "would copy 2 objects" in r.stdout and "(20 bytes)" in r.stdout
    assert not dest.exists()


@pytest.mark.s3
def test_escaping_key_is_refused_before_anything_is_written(s3_endpoint, bucket, tmp_path):
    c = s3_client(s3_endpoint)
    c.put_object(Bucket=bucket, Key="raw/good.txt", Body=b"good")
    c.put_object(Bucket=bucket, Key="raw/../evil", Body=b"evil")
    c.put_object(Bucket=bucket, Key="raw/data/../evil.txt", Body=b"evil")
    dest = tmp_path / "deep" / "dest"
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint)
    assert r.returncode == 3, r.stderr
    assert "'raw/../evil'" not in r.stderr  # keys are reported below the prefix
    assert "'../evil'" in r.stderr and "'data/../evil.txt'" in r.stderr and "nothing was written" in r.stderr
    assert not (tmp_path / "deep").exists() and not (tmp_path / "evil").exists()
    # Excluding them makes the stage possible.
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint, "--exclude", "*evil*")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == ["good.txt"]


@pytest.mark.s3
def test_changed_object_and_tampered_local_file_are_fetched_again(s3_endpoint, bucket, tmp_path):
    c = s3_client(s3_endpoint)
    for i in range(5):
        c.put_object(Bucket=bucket, Key=f"raw/f{i}.txt", Body=f"version one {i}".encode())
    dest = tmp_path / "dest"
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint, "--progress")
    assert r.returncode == 0, r.stderr
    assert re.search(r"stage: +\d+%.*B/s", r.stderr)                             # the byte progress bar
    c.put_object(Bucket=bucket, Key="raw/f1.txt", Body=b"version two, longer")    # changed in S3
    c.put_object(Bucket=bucket, Key="raw/f2.txt", Body=b"version TWO 2")          # same size, new ETag
    (dest / "f3.txt").write_bytes(b"tampered!!!!!!")                              # changed locally
    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["files"], summary["skipped"]) == (3, 2)
    assert (dest / "f1.txt").read_bytes() == b"version two, longer"
    assert (dest / "f2.txt").read_bytes() == b"version TWO 2"
    assert (dest / "f3.txt").read_bytes() == b"version one 3"


@pytest.mark.s3
@pytest.mark.parametrize("engine", ENGINES)
def test_object_replaced_after_listing_fails_cleanly(s3_endpoint, bucket, tmp_path, engine):
    """builtin: the If-Match GET answers 412; s5cmd (no If-Match): the re-read fails the listed ETag and a
    HEAD shows a new one.  Either way the same message, and nothing lands."""
    from shardprep.staging.plan import plan_stage
    from shardprep.staging.stage import StageOptions, _Stager
    from shardprep.storage.s3 import ClientOptions, make_client

    c = s3_client(s3_endpoint)
    c.put_object(Bucket=bucket, Key="raw/small.txt", Body=b"old")
    put_multipart(c, bucket, "raw/big.bin", os.urandom(11 * MIB))
    c.put_object(Bucket=bucket, Key="raw/steady.txt", Body=b"steady")
    options = StageOptions(f"s3://{bucket}/raw/", tmp_path / "dest", multipart_threshold=5 * MIB,
                           multipart_chunksize=5 * MIB, client=ClientOptions(endpoint_url=s3_endpoint), engine=engine)
    client = make_client(options.client)
    plan = plan_stage(options, client)                       # the listing snapshot
    c.put_object(Bucket=bucket, Key="raw/small.txt", Body=b"new")
    put_multipart(c, bucket, "raw/big.bin", os.urandom(11 * MIB))
    (tmp_path / "dest").mkdir()
    summary = _Stager(options, client, plan).run()
    assert set(summary.failed) == {"raw/small.txt", "raw/big.bin"}
    assert all("changed since it was listed" in r for r in summary.failed.values())
    assert (tmp_path / "dest" / "steady.txt").read_bytes() == b"steady"
    assert not (tmp_path / "dest" / "small.txt").exists() and not (tmp_path / "dest" / "big.bin").exists()
    assert temp_files(tmp_path / "dest") == []


@pytest.mark.s3
def test_server_errors_are_retried_then_reported_while_the_rest_lands(s3_endpoint, bucket, tmp_path):
    c = s3_client(s3_endpoint)
    for i in range(10):
        c.put_object(Bucket=bucket, Key=f"raw/ok{i}.txt", Body=b"ok" * (i + 1))
    c.put_object(Bucket=bucket, Key="raw/broken-a.txt", Body=b"never")
    c.put_object(Bucket=bucket, Key="raw/broken-b.txt", Body=b"never")
    c.put_object(Bucket=bucket, Key="raw/flaky.txt", Body=b"eventually")
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/raw/broken-")                  # every GET: 500
        proxy.fail("/raw/flaky.txt", times=2)       # two 500s, then fine
        r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", proxy.url, "--max-attempts", "3")
        assert r.returncode == 7, r.stderr
        assert len(proxy.requests_for("/raw/broken-a.txt", "GET")) == 3     # botocore standard retries
        assert len(proxy.requests_for("/raw/flaky.txt", "GET")) == 3
    assert "failed: raw/broken-a.txt: download: InternalError (HTTP 500)" in r.stderr
    assert "failed: raw/broken-b.txt" in r.stderr
    assert "2 of 13 objects failed" in r.stderr
    assert "staged 11 files" in r.stdout and "failed 2" in r.stdout
    assert (dest / "flaky.txt").read_bytes() == b"eventually"
    assert all((dest / f"ok{i}.txt").exists() for i in range(10))
    assert not (dest / "broken-a.txt").exists() and temp_files(dest) == []


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_killed_stage_leaves_no_partial_file_and_resumes(s3_endpoint, bucket, tmp_path, engine):
    c = s3_client(s3_endpoint)
    small = {f"s{i:02d}.txt": os.urandom(500) for i in range(20)}
    for rel, body in small.items():
        c.put_object(Bucket=bucket, Key=f"raw/{rel}", Body=body)
    big = os.urandom(24 * MIB)
    put_multipart(c, bucket, "raw/zz-big.bin", big)
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint, throttle_bytes_per_s=1.5 * MIB) as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url",
             proxy.url, "--part-size", "5M", "--concurrency", "4", "--engine", engine],
            cwd=REPO, env=aws_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if dest.exists() and list(dest.glob(".zz-big.bin.*.tmp*")):   # the large download has begun
                break
            time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail(f"the large download never started: {proc.communicate()[1][-2000:]!r}")
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    if engine == "s5cmd":                                # s5cmd died with us (PR_SET_PDEATHSIG)
        assert_no_s5cmd_writing_into(dest)
    assert not (dest / "zz-big.bin").exists()            # no partial file under the final name
    assert temp_files(dest)                              # ... only the hidden temporary
    journal = dest / ".shardprep-stage" / "verified.jsonl"
    done_before = len(journal.read_text().splitlines()) if journal.exists() else 0

    r = run_cli("stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url", s3_endpoint, "--part-size", "5M",
                "--json", "--engine", engine)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["skipped"] == done_before and summary["files"] == 21 - done_before
    assert (dest / "zz-big.bin").read_bytes() == big
    assert all((dest / rel).read_bytes() == body for rel, body in small.items())
    assert temp_files(dest) == []                        # the dead run's temporary is gone


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_ctrl_c_stops_a_large_download_promptly_and_leaves_nothing_behind(s3_endpoint, bucket, tmp_path, engine):
    c = s3_client(s3_endpoint)
    put_multipart(c, bucket, "raw/big.bin", os.urandom(40 * MIB))      # 8 ranges of 5 MiB
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint, throttle_bytes_per_s=4 * MIB) as proxy:  # per request: ~1.3 s per range
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest), "--endpoint-url",
             proxy.url, "--part-size", "5M", "--concurrency", "2", "--engine", engine],
             cwd=REPO, env=aws_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # not inherited as ignored

        def ranges_done() -> int:
            return len([r for r in proxy.requests_for("/raw/big.bin", "GET") if r.range])

        def writing() -> bool:
            return bool(ranges_done() or (dest.exists() and list(dest.glob(".big.bin.*.tmp*"))))

        deadline = time.monotonic() + 60
        while not writing():                # one range answered (or s5cmd writing): the download is under way
            assert proc.poll() is None and time.monotonic() < deadline, "the ranged download never progressed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert ranges_done() <= 4        # the ranges in flight finish, the queued ones of the 8 never start
    assert not (dest / "big.bin").exists() and temp_files(dest) == []
    if engine == "s5cmd":
        assert_no_s5cmd_writing_into(dest)


def assert_no_s5cmd_writing_into(dest: Path) -> None:
    """No s5cmd process is left running for ``dest`` (its command file is there; it would keep writing).
    The kernel's kill of an orphan is asynchronous, so this waits a few seconds for it to go."""
    def running() -> list[list[bytes]]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[0].endswith(b"s5cmd") and str(dest).encode() in b" ".join(cmdline):
                found.append(cmdline)
        return found

    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running() == [], "s5cmd still running"


@pytest.mark.s3
def test_staged_directory_gets_the_single_stripe_layout(s3_endpoint, bucket, tmp_path, monkeypatch):
    from shardprep.staging.stage import StageOptions, stage_prefix
    from shardprep.storage import lustre
    from shardprep.storage.s3 import ClientOptions

    calls = install_fake_lfs(tmp_path, monkeypatch)
    monkeypatch.setattr(lustre, "detect_lustre", lambda path: True)
    s3_client(s3_endpoint).put_object(Bucket=bucket, Key="raw/a.txt", Body=b"a")
    dest = tmp_path / "fsx" / "raw"
    summary = stage_prefix(StageOptions(f"s3://{bucket}/raw/", dest, client=ClientOptions(endpoint_url=s3_endpoint)))
    assert summary.files == 1 and not summary.failed
    assert calls() == [["setstripe", "-c", "1", "-S", "1M", str(dest)], ["getstripe", "-d", str(dest)]]
    manifest = json.loads((dest / ".shardprep-stage" / "manifest.json").read_text())
    assert manifest["lustre"]["filesystem"] == "lustre"
    assert manifest["lustre"]["applied"].startswith("stripe_count:  1")


# ---------------------------------------------------------------------------------- upload against S3

def make_output_dir(root: Path) -> dict[str, bytes]:
    """A directory shaped like a finished shardprep output (contents are arbitrary bytes)."""
    files = {
        "shard-00000.tar": os.urandom(11 * MIB + 7),
        "shard-00000.json": b'{"task": 0}',
        "shard-00001.tar": os.urandom(3000),
        "shard-00001.json": b'{"task": 1}',
        "job.json": b"{}",
        "logs/0.log": b"log line\n",
        "index.json": b'{"shards": 2}',
    }
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    (root / ".shard-00002.tar.host.123.tmp").write_bytes(b"partial")
    return files


@pytest.mark.s3
def test_upload_checksums_skips_identical_and_puts_the_index_last(s3_endpoint, bucket, tmp_path):
    src = tmp_path / "out"
    files = make_output_dir(src)
    c = s3_client(s3_endpoint)
    r = run_cli("upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"would upload {len(files)} files" in r.stdout and "shard-00002" not in r.stdout
    assert "Contents" not in c.list_objects_v2(Bucket=bucket)
    with FaultProxy(s3_endpoint) as proxy:
        r = run_cli("upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url", proxy.url, "--part-size", "5M",
                    "--checksum-algorithm", "SHA256", "--json")
        assert r.returncode == 0, r.stderr
        log = proxy.log
    assert json.loads(r.stdout)["files"] == len(files)
    listed = {o["Key"]: o for o in c.list_objects_v2(Bucket=bucket, Prefix="shards/")["Contents"]}
    assert set(listed) == {f"shards/{rel}" for rel in files}           # the hidden temporary stayed home
    for rel, body in files.items():
        head = c.head_object(Bucket=bucket, Key=f"shards/{rel}", ChecksumMode="ENABLED")
        assert head["ContentLength"] == len(body)
        assert head.get("ChecksumSHA256"), rel
    single = c.head_object(Bucket=bucket, Key="shards/shard-00001.tar", ChecksumMode="ENABLED")
    assert single["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(files["shard-00001.tar"]).digest()).decode()
    assert single["ETag"].strip('"') == hashlib.md5(files["shard-00001.tar"]).hexdigest()
    assert c.head_object(Bucket=bucket, Key="shards/shard-00000.tar")["ETag"].endswith('-3"')   # multipart
    assert c.get_object(Bucket=bucket, Key="shards/shard-00000.tar")["Body"].read() == files["shard-00000.tar"]

    writes = [rec for rec in log if rec.method in ("PUT", "POST")]
    index_put = [rec for rec in writes if rec.path.endswith("/index.json")]
    others = [rec for rec in writes if not rec.path.endswith("/index.json")]
    assert len(index_put) == 1 and len(others) >= len(files) - 1
    assert index_put[0].started >= max(rec.ended for rec in others)

    # Re-upload: all identical; after changing one shard only that one goes up.
    r = run_cli("upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint, "--part-size", "5M",
                "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["files"], json.loads(r.stdout)["skipped"]) == (0, len(files))
    (src / "shard-00001.tar").write_bytes(os.urandom(3000))
    r = run_cli("upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint, "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["files"], json.loads(r.stdout)["skipped"]) == (1, len(files) - 1)


@pytest.mark.s3
def test_failed_upload_never_publishes_the_index(s3_endpoint, bucket, tmp_path):
    src = tmp_path / "out"
    make_output_dir(src)
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/shard-00001.tar", methods=("PUT",))
        r = run_cli("upload", str(src), f"s3://{bucket}/shards/", "--endpoint-url", proxy.url, "--max-attempts", "2")
    assert r.returncode == 7, r.stderr
    assert "failed: shards/shard-00001.tar" in r.stderr and "failed: shards/index.json: not uploaded" in r.stderr
    keys = {o["Key"] for o in s3_client(s3_endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert "shards/shard-00000.tar" in keys
    assert "shards/index.json" not in keys and "shards/shard-00001.tar" not in keys


# ------------------------------------------------------------------------------------------ round trip

@pytest.mark.s3
@pytest.mark.slow
def test_round_trip_stage_tokenize_upload_read_back(s3_endpoint, bucket, tmp_path):
    tokenizer = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
    corpus = SHARED / "corpus" / "tinyshakespeare.txt"
    if not tokenizer.exists() or not corpus.exists():
        pytest.skip("shared tokenizer/corpus not present")
    from shardprep import api as pipeline

    c = s3_client(s3_endpoint)
    lines = corpus.read_text(encoding="utf-8").splitlines()[:3000]
    for i in range(3):
        c.put_object(Bucket=bucket, Key=f"raw/part{i}.txt", Body="\n".join(lines[i::3]).encode())
    staged = tmp_path / "staged"
    r = run_cli("stage", f"s3://{bucket}/raw/", str(staged), "--endpoint-url", s3_endpoint)
    assert r.returncode == 0, r.stderr
    out = pipeline.tokenize_directory(staged, tmp_path / "shards", tokenizer, chunk_tokens=4096, one_file_per_task=True)
    index = json.loads((out / "index.json").read_text())
    assert index["totals"]["shards"] == 3 and index["totals"]["tokens"] > 0
    r = run_cli("upload", str(out), f"s3://{bucket}/shards/", "--endpoint-url", s3_endpoint)
    assert r.returncode == 0, r.stderr

    from shardprep.loader.index import load_index
    from shardprep.storage.locations import StorageOptions
    from shardprep.storage.s3 import ClientOptions

    storage = StorageOptions(s3=ClientOptions(endpoint_url=s3_endpoint))
    remote = load_index(f"s3://{bucket}/shards/", verify=True, storage=storage)  # sha256s
    local = load_index(str(out))
    assert [s.name for s in remote.shards] == [s.name for s in local.shards] and len(remote.shards) == 3
    compared = 0
    for i in range(len(remote.shards)):
        r_table, l_table = remote.chunk_table(i), local.chunk_table(i)
        r_src, l_src = remote.open(i), local.open(i)
        for j in range(len(r_table)):
            r_tokens, r_lens = remote.read(r_src, r_table, j)
            l_tokens, l_lens = local.read(l_src, l_table, j)
            assert (r_tokens == l_tokens).all() and (r_lens == l_lens).all()
            compared += len(r_tokens)
        r_src.close()
        l_src.close()
    assert compared == index["totals"]["tokens"]
