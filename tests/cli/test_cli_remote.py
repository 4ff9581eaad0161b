"""The commands that take a URL (``verify``, ``inspect``, ``report``, ``status``) against a real S3 API (moto on
127.0.0.1): one path for a local output and its ``s3://`` copy, so the same damage gives the same verdict,
the same lines and the same exit code in both places."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import run_cli
from loader_helpers import make_dataset
from s3_server import FaultProxy, aws_env, make_bucket, s3_client

from shardprep.errors import EXIT_INCOMPLETE

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def local(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("cli-remote"), sample_tokenizer, [40, 60, 80, 30, 50])


def upload(endpoint: str, output: Path) -> str:
    bucket = make_bucket(endpoint, "cli")
    client = s3_client(endpoint)
    for f in sorted(p for p in output.iterdir() if p.is_file()):
        client.upload_file(str(f), bucket, f"runs/out/{f.name}")
    return f"s3://{bucket}/runs/out"


def damage(local: Path, into: Path) -> Path:
    """A copy of ``local`` with four different bad shards (and one good one)."""
    shutil.copytree(local, into)
    shard = bytearray((into / "shard-00001.tar").read_bytes())
    shard[600] ^= 0xFF                                                # same size, different bytes
    (into / "shard-00001.tar").write_bytes(bytes(shard))
    os.truncate(into / "shard-00002.tar", 700)                       # truncated
    (into / "shard-00003.tar").unlink()                              # missing
    side = orjson.loads((into / "shard-00004.json").read_bytes())
    side["tokenizer_fingerprint"] = "0" * 64                          # a sidecar from another tokenizer
    (into / "shard-00004.json").write_bytes(orjson.dumps(side))
    return into


def bad_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("BAD ")]


def test_verify_lists_every_bad_shard_with_the_same_lines_locally_and_on_s3(local, tmp_path, s3_endpoint):
    damaged = damage(local, tmp_path / "damaged")
    url = upload(s3_endpoint, damaged)
    here = run_cli("verify", damaged, check=EXIT_INCOMPLETE)
    there = run_cli("verify", url, env=aws_env({"AWS_ENDPOINT_URL": s3_endpoint}), check=EXIT_INCOMPLETE)
    lines = bad_lines(here.stderr)
    assert [line.split(":")[0] for line in lines] == [f"BAD shard-0000{i}.tar" for i in (1, 2, 3, 4)]
    assert "sha256 differs from index" in lines[0]
    assert "size 700 != index" in lines[1] and "cannot parse" in lines[1]
    assert lines[2] == "BAD shard-00003.tar: missing"
    assert "sidecar tokenizer_fingerprint '0000" in lines[3]
    assert bad_lines(there.stderr) == lines
    assert here.stderr.splitlines()[-1] == f"4 bad shard(s) in {damaged} (hint: shardprep repair {damaged} rebuilds " \
                                            f"them from the frozen plan, byte-identical to index.json)"
    assert there.stderr.splitlines()[-1].startswith(f"4 bad shard(s) in {url} (hint: run shardprep repair DIR in the "
                                                    f"output directory this copy was uploaded from")


def test_inspect_reads_a_shard_without_its_sidecar_by_walking_the_tar_on_s3(local, tmp_path, s3_endpoint):
    lone = tmp_path / "lone"
    lone.mkdir()
    for name in ("shard-00002.tar", "tokenizer.json"):
        shutil.copy(local / name, lone / name)
    url = upload(s3_endpoint, lone)
    env = aws_env({"AWS_ENDPOINT_URL": s3_endpoint})
    there = run_cli("inspect", f"{url}/shard-00002.tar", "--decode", "2", env=env).stdout
    here = run_cli("inspect", lone / "shard-00002.tar", "--decode", "2").stdout
    with_sidecar = run_cli("inspect", local / "shard-00002.tar", "--decode", "2").stdout
    assert there.split(".tar: ", 1)[1] == here.split(".tar: ", 1)[1]
    assert here.splitlines()[0].split(".tar: ")[1] == with_sidecar.splitlines()[0].split(".tar: ")[1]
    assert there.count("--- document") == 2


def test_verify_reads_each_remote_shard_once_in_large_ranged_reads(local, s3_endpoint):
    """Hashing and walking share one front-to-back read: the server sends every shard's bytes once,
    in blocks of 8 MiB at most (these shards are smaller: one request each), not once per tar member."""
    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        run_cli("verify", url, env=aws_env({"AWS_ENDPOINT_URL": proxy.url}))
        gets = {p.name: proxy.requests_for(p.name, "GET") for p in local.glob("shard-*.tar")}
    for name, requests in gets.items():
        assert [r.bytes for r in requests] == [(local / name).stat().st_size], name


# ------------------------------------------------------------------- issue 23 item 12: one set of S3 options

def test_verify_inspect_and_report_reach_s3_through_the_endpoint_option(local, tmp_path, s3_endpoint):
    """No AWS_ENDPOINT_URL in the environment: --endpoint-url alone must lead every URL command to the server."""
    url = upload(s3_endpoint, local)
    env = aws_env()
    assert "AWS_ENDPOINT_URL" not in env
    opt = ("--endpoint-url", s3_endpoint, "--region", "us-east-1")
    assert run_cli("verify", url, *opt, env=env).stdout == f"{url}: all shards verified\n"
    shown = run_cli("inspect", f"{url}/shard-00001.tar", "--decode", "1", *opt, env=env).stdout
    assert shown.split(".tar: ")[1] == run_cli("inspect", local / "shard-00001.tar", "--decode", "1").stdout \
        .split(".tar: ")[1]
    numbers = orjson.loads(run_cli("report", url, "--json", *opt, env=env).stdout)
    assert numbers["totals"] == orjson.loads(run_cli("report", local, "--json").stdout)["totals"]
    pytest.importorskip("matplotlib")
    run_cli("report", url, "--html", tmp_path / "page.html", "--max-chunks", "3", *opt, env=env)
    assert "<html" in (tmp_path / "page.html").read_text()


def test_url_commands_refuse_an_unknown_profile_by_name(local, s3_endpoint):
    url = upload(s3_endpoint, local)
    for args in (("verify", url), ("inspect", f"{url}/shard-00000.tar"), ("report", url, "--json")):
        proc = run_cli(*args, "--endpoint-url", s3_endpoint, "--profile", "no-such-profile", env=aws_env(), check=2)
        assert "--profile 'no-such-profile'" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_status_of_an_s3_url_says_it_needs_the_output_directory_instead_of_a_mangled_path(s3_endpoint):
    url = "s3://some-bucket/runs/out"
    proc = run_cli("status", url, "--endpoint-url", s3_endpoint, env=aws_env(), check=2)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{url} is a URL: status needs the output directory where the job ran" in proc.stderr
    assert "s3:/some-bucket" not in proc.stderr.replace(url, "")
