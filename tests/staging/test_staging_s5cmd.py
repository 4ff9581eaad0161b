"""The s5cmd transfer engine (``shardprep/staging/s5cmd.py``): choosing it, its command file, how every
object gets reported exactly once, and keys it cannot take.  The behaviour both engines share is tested
against moto in test_staging_s3.py (parametrized by engine)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from s3_server import aws_env, make_bucket, s3_client  # noqa: E402

from shardprep.errors import ConfigError  # noqa: E402
from shardprep.staging import s5cmd  # noqa: E402
from shardprep.storage.s3 import ClientOptions  # noqa: E402

ODD_KEYS = ["raw/it's \"quoted\".txt", "raw/glob *?[1].txt", "raw/two  spaces/ünï ✓.txt", "raw/-dash.txt"]


def test_engine_choice(monkeypatch):
    assert s5cmd.choose_engine("builtin") is None
    monkeypatch.setattr(s5cmd, "find_binary", lambda: None)
    with pytest.raises(ConfigError, match=r"--engine s5cmd: no s5cmd binary found.*shardprep\[s5cmd\]"):
        s5cmd.choose_engine("s5cmd")
    monkeypatch.setattr(s5cmd, "find_binary", lambda: "/opt/s5cmd")
    assert s5cmd.choose_engine("s5cmd") == "/opt/s5cmd"


def test_bad_engine_is_refused_naming_the_option(tmp_path):
    from shardprep.staging.stage import StageOptions

    with pytest.raises(ConfigError, match="--engine must be one of builtin, s5cmd"):
        StageOptions("s3://bkt/raw/", tmp_path, engine="fast")


def fake_s5cmd(tmp_path: Path, script: str) -> str:
    """An executable standing in for s5cmd: ``$CMDS`` is its command file (the last argument)."""
    path = tmp_path / "s5cmd"
    path.write_text("#!/bin/bash\nCMDS=\"${@: -1}\"\ncp \"$CMDS\" " + shlex.quote(str(tmp_path / "seen.txt"))
                    + "\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_every_object_is_reported_once_even_when_s5cmd_dies(tmp_path):
    """One success (stdout), one failure (stderr, its target has spaces), one never mentioned: s5cmd exits 1."""
    state = tmp_path / "state"
    jobs = [s5cmd.Job(f"s3://bkt/{k}", tmp_path / "d" / f".{i} {Path(k).name}.h.1.tmp")
            for i, k in enumerate(ODD_KEYS[:3])]
    ok = json.dumps({"operation": "cp", "success": True, "source": jobs[0].source,
                     "destination": str(jobs[0].temp), "object": {"type": "file", "size": 3}})
    failed = json.dumps({"operation": "cp", "command": f"cp {jobs[1].source} {jobs[1].temp}",
                         "error": "InternalError: boom status code: 500"})
    binary = fake_s5cmd(tmp_path, f"echo {shlex.quote(ok)}\necho {shlex.quote(failed)} >&2\n"
                                  "echo 'panic: something else' >&2\nexit 1\n")
    seen: list[tuple[s5cmd.Job, str | None]] = []
    s5cmd.S5cmdRun(binary, ClientOptions(endpoint_url="http://127.0.0.1:9", max_attempts=4), concurrency=3,
                   part_size=16 << 20, state_dir=state).run(jobs, lambda job, why: seen.append((job, why)))
    assert sorted(seen, key=lambda x: jobs.index(x[0])) == [
        (jobs[0], None), (jobs[1], "s5cmd: InternalError: boom status code: 500"),
        (jobs[2], "s5cmd exited with status 1 without copying it (panic: something else)")]
    assert list(state.iterdir()) == []                              # the command file is removed
    # The command file: keys used literally (--raw), quoted so s5cmd's shell-style split gives them back.
    lines = (tmp_path / "seen.txt").read_text(encoding="utf-8").splitlines()
    assert [shlex.split(line)[-2:] for line in lines] == [[j.source, str(j.temp)] for j in jobs]
    assert all(shlex.split(line)[:7] == ["cp", "--raw", "--concurrency", "3", "--part-size", "16"] + [j.source]
               for line, j in zip(lines, jobs))


def test_s5cmd_is_started_with_the_client_options(tmp_path):
    run = s5cmd.S5cmdRun("/bin/s5cmd", ClientOptions(endpoint_url="http://127.0.0.1:9", profile="p", max_attempts=5),
                         concurrency=8, part_size=3 << 20, state_dir=tmp_path)
    assert run.argv(tmp_path / "c.txt") == ["/bin/s5cmd", "--json", "--numworkers", "8", "--retry-count", "4",
                                            "--endpoint-url", "http://127.0.0.1:9", "--profile", "p",
                                            "run", str(tmp_path / "c.txt")]
    assert run.part_mib == 5                                        # s5cmd takes whole MiB, at least S3's 5


def test_leftover_names_and_keys_s5cmd_cannot_take():
    assert not s5cmd.usable_key("raw/line\nbreak.txt") and not s5cmd.usable_key("a\rb") and s5cmd.usable_key("a b")
    assert s5cmd.leftover_names(".a.h.1.tmp", [".a.h.1.tmp123", ".a.h.1.tmp", ".a.h.1.tmpx", "a"]) == [".a.h.1.tmp123"]


@pytest.mark.s3
@pytest.mark.skipif(s5cmd.find_binary() is None, reason="s5cmd not installed")
def test_odd_keys_through_s5cmd(s3_endpoint, tmp_path):
    """Quotes, glob characters, double spaces, unicode, a leading dash: copied literally, nothing left over.
    (moto cannot store a key with a line break, which would go through the builtin engine.)"""
    big = 5 << 20                                      # at least --part-size: s5cmd's share
    import subprocess

    bucket = make_bucket(s3_endpoint)
    c = s3_client(s3_endpoint)
    bodies = {k: os.urandom(big + i) for i, k in enumerate(ODD_KEYS)}
    for key, body in bodies.items():
        c.put_object(Bucket=bucket, Key=key, Body=body)
    dest = tmp_path / "dest"
    r = subprocess.run([sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest),
                        "--endpoint-url", s3_endpoint, "--engine", "s5cmd", "--part-size", "5M", "--json"],
                       env=aws_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"] == len(bodies)
    for key, body in bodies.items():
        assert (dest / key[len("raw/"):]).read_bytes() == body, key
    assert [p.name for p in dest.rglob(".*") if p.name != ".shardprep-stage" and ".shardprep-stage" not in p.parts] == []


@pytest.mark.s3
@pytest.mark.skipif(s5cmd.find_binary() is None, reason="s5cmd not installed")
def test_s5cmd_takes_the_large_objects_and_leaves_the_small_ones(s3_endpoint, tmp_path):
    """--engine s5cmd: objects of at least --part-size go to s5cmd (which asks HEAD before its GETs),
    smaller ones take our direct GET (no HEAD at all); both verified the same way."""
    import subprocess

    from s3_server import FaultProxy

    bucket = make_bucket(s3_endpoint)
    c = s3_client(s3_endpoint)
    small = {f"raw/s{i}.txt": os.urandom(1000 + i) for i in range(3)}
    big = os.urandom(6 << 20)
    for key, body in small.items():
        c.put_object(Bucket=bucket, Key=key, Body=body)
    c.put_object(Bucket=bucket, Key="raw/big.bin", Body=big)
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint) as proxy:
        r = subprocess.run([sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest),
                            "--endpoint-url", proxy.url, "--part-size", "5M", "--engine", "s5cmd"],
                           env=aws_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert [x.query for x in proxy.requests_for("/raw/big.bin", "HEAD")] == [""]      # s5cmd's stat
        assert all(proxy.requests_for(key[3:], "HEAD") == [] for key in small)          # ours: GET only
    assert (dest / "big.bin").read_bytes() == big
    assert all((dest / key[4:]).read_bytes() == body for key, body in small.items())
    records = [json.loads(line) for line in (dest / ".shardprep-stage" / "verified.jsonl").read_text().splitlines()]
    assert {r["path"]: r["method"] for r in records} == {"big.bin": "md5", **{k[4:]: "md5" for k in small}}


@pytest.mark.s3
@pytest.mark.skipif(s5cmd.find_binary() is None, reason="s5cmd not installed")
def test_s5cmd_retries_then_reports_its_failures_while_the_rest_lands(s3_endpoint, tmp_path):
    import subprocess

    from s3_server import FaultProxy

    bucket = make_bucket(s3_endpoint)
    c = s3_client(s3_endpoint)
    bodies = {name: os.urandom((5 << 20) + i) for i, name in enumerate(("broken.bin", "flaky.bin", "fine.bin"))}
    for name, body in bodies.items():
        c.put_object(Bucket=bucket, Key=f"raw/{name}", Body=body)
    dest = tmp_path / "dest"
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/raw/broken.bin")               # every GET: 500
        proxy.fail("/raw/flaky.bin", times=2)       # two 500s, then fine
        r = subprocess.run([sys.executable, "-m", "shardprep", "stage", f"s3://{bucket}/raw/", str(dest),
                            "--endpoint-url", proxy.url, "--part-size", "5M", "--engine", "s5cmd",
                            "--max-attempts", "3"], env=aws_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 7, r.stderr
        assert len(proxy.requests_for("/raw/broken.bin", "GET")) == 3          # --retry-count 2: 3 attempts
    assert "failed: raw/broken.bin: download: s5cmd: InternalError" in r.stderr
    assert "staged 2 files" in r.stdout and "failed 1" in r.stdout
    assert (dest / "flaky.bin").read_bytes() == bodies["flaky.bin"]
    assert (dest / "fine.bin").read_bytes() == bodies["fine.bin"]
    assert sorted(p.name for p in dest.iterdir() if p.name != ".shardprep-stage") == ["fine.bin", "flaky.bin"]
