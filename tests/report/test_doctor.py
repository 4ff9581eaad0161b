"""``shardprep doctor`` on this machine's real state (no Lustre here; Slurm up or down, either works), with a
stand-in ``lfs`` for the Lustre branch, its JSON schema (docs/doctor.md) and its exit statuses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.demo_data import write_sample_corpus
from shardprep.errors import EXIT_ENVIRONMENT, EXIT_INPUT, EXIT_TOKENIZER
from shardprep.job.resources import usable_cpus

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from fake_lfs import install as install_fake_lfs  # noqa: E402

CHECK_NAMES = ["tokenizer", "input", "tokenizer_speed", "backend", "cpus", "memory", "filesystem", "free_space",
               "write_permission", "slurm", "environment", "versions"]
SECRETS = {"AWS_SECRET_ACCESS_KEY": "s3cr3t-Value-never-printed", "HF_TOKEN": "hf_tokenValueNeverPrinted",
           "AWS_SESSION_TOKEN": "session-Value-never-printed"}


@pytest.fixture(autouse=True)
def _short_speed_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed check encodes its sample for at least TIMING_S (half a second) to time it: what these tests
    check of it (a rate above zero, the estimates it feeds) holds after one pass, so doctor run in this
    process times it for a few milliseconds (a run in a process of its own keeps the full timing)."""
    from shardprep.doctor import checks

    monkeypatch.setattr(checks, "TIMING_S", 0.01)


def doctor(*args, check=True, env=None):
    return run_cli("doctor", *args, check=check, env=env)


def checks_by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_sample_corpus(tmp_path_factory.mktemp("raw"), files=3, docs_per_file=300)


def _slurm_answers() -> bool:
    if not shutil.which("squeue"):
        return False
    try:
        return subprocess.run(["squeue", "--noheader"], capture_output=True, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def test_json_report_on_this_machine_follows_the_schema(tmp_path, corpus, sample_tokenizer, monkeypatch):
    from shardprep.storage.lustre import detect_lustre

    fake_calls = install_fake_lfs(tmp_path, monkeypatch)     # an `lfs` on PATH must not be used off Lustre
    out = tmp_path / "shards"
    env = {**SECRETS, "AWS_PROFILE": "research", "RAYON_NUM_THREADS": "7"}
    proc = doctor("--tokenizer", sample_tokenizer, "--output", out, "--input", corpus, "--json", check=False, env=env)
    report = json.loads(proc.stdout)

    assert set(report) == {"schema", "shardprep_version", "ok", "exit_code", "summary", "checks"}
    assert report["schema"] == "shardprep.doctor/1"
    assert [c["name"] for c in report["checks"]] == CHECK_NAMES
    for c in report["checks"]:
        assert set(c) == {"name", "verdict", "message", "fix", "details"}
        assert c["verdict"] in ("ok", "warn", "fail") and isinstance(c["message"], str) and c["message"]
        assert c["verdict"] == "ok" or c["fix"], f"{c['name']}: a problem without a fix"
    verdicts = [c["verdict"] for c in report["checks"]]
    assert report["summary"] == {v: verdicts.count(v) for v in ("ok", "warn", "fail")}
    assert report["exit_code"] == proc.returncode and report["ok"] == ("fail" not in verdicts)

    c = checks_by_name(report)
    assert c["tokenizer"]["verdict"] == "ok" and c["tokenizer"]["details"]["offline"] is True
    assert c["input"]["details"]["files"] == 3 and c["input"]["details"]["sample_documents"] > 0
    assert c["tokenizer_speed"]["details"]["tokens_per_s"] > 0
    assert c["backend"]["details"]["auto_picks"] in ("hf", "gigatoken")
    assert c["cpus"]["details"]["os_cpu_count"] == os.cpu_count()
    assert c["cpus"]["details"]["usable"] == usable_cpus()
    fs = c["filesystem"]["details"]
    assert fs["lustre"] is detect_lustre(tmp_path) and fs["striping"] is None
    assert fs["lfs"] == shutil.which("lfs") and fake_calls() == []
    assert c["write_permission"]["verdict"] == "ok" and not out.exists()   # probing leaves nothing behind
    # Slurm up or down: reported either way, and never a failure unless a Slurm executor was asked for
    assert c["slurm"]["details"]["reachable"] is _slurm_answers()
    assert c["slurm"]["verdict"] == ("ok" if _slurm_answers() else "warn")
    if _slurm_answers():
        assert c["slurm"]["details"]["max_array_size"] >= 1
    env_details = c["environment"]["details"]
    assert env_details["secrets"]["AWS_SECRET_ACCESS_KEY"] == "set" and env_details["secrets"]["HF_TOKEN"] == "set"
    assert env_details["variables"]["AWS_PROFILE"] == "research"
    assert env_details["variables"]["RAYON_NUM_THREADS"] == "7"       # the user's value, not the pinned one
    for secret in SECRETS.values():
        assert secret not in proc.stdout and secret not in proc.stderr
    assert c["versions"]["details"]["versions"]["tokenizers"]


def test_planned_size_estimate_is_conservative(tmp_path, corpus, sample_tokenizer):
    out = tmp_path / "shards"
    report = json.loads(doctor("-t", sample_tokenizer, "-o", out, "-i", corpus, "--json", check=False).stdout)
    planned = checks_by_name(report)["free_space"]["details"]["planned_output_bytes"]
    run_cli("submit", "-i", corpus, "-o", out, "-t", sample_tokenizer, "--no-progress")
    actual = sum(p.stat().st_size for p in out.glob("shard-*.tar"))
    assert actual <= planned <= 4 * actual, (actual, planned)


def test_text_report_and_missing_tokenizer_exit_status(tmp_path):
    proc = doctor("--tokenizer", tmp_path / "missing" / "tokenizer.json", "--output", tmp_path / "out",
                  check=EXIT_TOKENIZER)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("[FAIL] tokenizer") and "does not exist" in first
    assert "fix:" in proc.stdout and f"exit status {EXIT_TOKENIZER}" in proc.stdout


def test_unwritable_output_fails_with_environment_status(tmp_path, sample_tokenizer):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = doctor("-t", sample_tokenizer, "-o", blocker / "shards", "--json", check=EXIT_ENVIRONMENT)
    c = checks_by_name(json.loads(proc.stdout))["write_permission"]
    assert c["verdict"] == "fail" and "a-file" in c["message"] and c["fix"]

    if os.geteuid() != 0:  # root ignores mode bits; the path under a file above covers root
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        proc = doctor("-t", sample_tokenizer, "-o", locked, "--json", check=EXIT_ENVIRONMENT)
        assert checks_by_name(json.loads(proc.stdout))["write_permission"]["verdict"] == "fail"


def test_slurm_executor_without_sbatch_fails(tmp_path, sample_tokenizer, monkeypatch):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))      # the Slurm check looks its tools up on each run: in process
    report = json.loads(doctor("-t", sample_tokenizer, "-o", tmp_path / "o", "--json", check=0).stdout)
    assert checks_by_name(report)["slurm"]["verdict"] == "warn"           # local executor still works
    proc = doctor("-t", sample_tokenizer, "-o", tmp_path / "o", "--executor", "slurm", "--json",
                  check=EXIT_ENVIRONMENT)
    slurm = checks_by_name(json.loads(proc.stdout))["slurm"]
    assert slurm["verdict"] == "fail" and "sbatch" in slurm["message"] and "--executor local" in slurm["fix"]


def test_input_problems(tmp_path, sample_tokenizer):
    proc = doctor("-t", sample_tokenizer, "-o", tmp_path / "o", "-i", tmp_path / "nothing-here", check=EXIT_INPUT)
    assert "[FAIL] input" in proc.stdout and "does not exist" in proc.stdout
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text("".join(json.dumps({"content": f"document {i}"}) + "\n" for i in range(50)))
    report = json.loads(doctor("-t", sample_tokenizer, "-o", tmp_path / "o", "-i", raw, "--json",
                               check=EXIT_INPUT).stdout)
    c = checks_by_name(report)["input"]      # what plan and submit refuse: a fail, naming the keys found
    assert c["verdict"] == "fail" and "--text-field" in c["fix"] and "keys seen: content" in c["message"]
    report = json.loads(doctor("-t", sample_tokenizer, "-o", tmp_path / "o", "-i", raw, "--text-field", "content",
                               "--json", check=False).stdout)
    assert checks_by_name(report)["input"]["verdict"] == "ok"


def test_lustre_branch_reads_striping_with_a_stand_in_lfs(tmp_path, monkeypatch):
    from shardprep.doctor.machine import check_filesystem

    calls = install_fake_lfs(tmp_path, monkeypatch)
    out = tmp_path / "fsx" / "shards"
    out.mkdir(parents=True)
    subprocess.run(["lfs", "setstripe", "-E", "128M", "-c", "1", "-S", "1M", "-E", "-1", "-c", "8", "-S", "1M",
                    str(out)], check=True)
    c = check_filesystem(out, detect=lambda _p: True)
    assert c.verdict == "ok" and c.details["lustre"] is True
    assert "lcm_entry_count:   2" in c.details["striping"] and "stripe_count:  8" in c.details["striping"]
    assert "Lustre" in c.message and calls()[-1] == ["getstripe", "-d", str(out)]

    # a new output directory: the striping shown is the parent's, which the new directory would inherit
    c = check_filesystem(out / "new", detect=lambda _p: True)
    assert c.details["path"] == str(out) and "progressive layout" in c.message

    monkeypatch.setenv("FAKE_LFS_FAIL", "getstripe")
    monkeypatch.setenv("FAKE_LFS_STDERR", "lfs getstripe: Permission denied (13)")
    c = check_filesystem(out, detect=lambda _p: True)
    assert c.verdict == "warn" and "Permission denied" in c.message and c.fix

    monkeypatch.setenv("PATH", str(tmp_path / "no-such-bin"))
    c = check_filesystem(out, detect=lambda _p: True)
    assert c.verdict == "warn" and "`lfs` is not on PATH" in c.message and "module load" in c.fix
