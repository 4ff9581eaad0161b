"""One-line errors instead of tracebacks (issue 13, items 10 and 13): a torn or foreign index.json in
`verify`, an --output that is a file or cannot be written, `inspect --decode` without a tokenizer, and
negative or zero counts on every command that takes one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from helpers import run_cli

from shardprep.errors import EXIT_ENVIRONMENT, EXIT_INCOMPLETE, EXIT_TOKENIZER, EXIT_USAGE


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """A single error line (no traceback) that says what it must."""
    lines = [x for x in proc.stderr.splitlines() if "error:" in x or "Traceback" in x]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sample_tokenizer) -> Path:
    raw = tmp_path_factory.mktemp("raw")
    for i in range(2):
        (raw / f"{i}.txt").write_text("\n".join(f"document {i}-{j} with words" for j in range(30)) + "\n")
    out = tmp_path_factory.mktemp("done") / "out"
    run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--no-progress")
    return out


@pytest.fixture
def copy_of(finished, tmp_path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    return out


@pytest.fixture
def read_only_dir(tmp_path) -> Path:
    """A directory nobody can write to, root included (tests run as root in CI): an immutable directory,
    or plain permissions for other users."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode:
        pytest.skip("cannot make a directory read-only for root here (chattr +i failed)")
    try:
        yield d
    finally:
        subprocess.run(["chattr", "-i", str(d)], check=True)


# ------------------------------------------------------------------------------------ verify's index

@pytest.mark.parametrize("content, needle", [
    (None, "not valid JSON"),                                       # torn: the first 100 bytes only
    (b"[1, 2, 3]\n", "not a shardprep index (a JSON list"),
    (b'{"shards": 3}\n', "format_version None is not supported"),
    (b'{"format_version": 1, "layout": "pack", "dtype": "uint16", "shards": [{"name": "x"}]}',
     "field 'shards[0].sidecar': missing"),
])
def test_verify_names_a_torn_or_foreign_index(copy_of, content, needle):
    index = copy_of / "index.json"
    index.write_bytes(index.read_bytes()[:100] if content is None else content)
    _one_line(run_cli("verify", copy_of, check=EXIT_INCOMPLETE), f"{index}:", needle, "shardprep finalize")


def test_verify_names_an_index_without_a_vocabulary_size(copy_of):
    index = orjson.loads((copy_of / "index.json").read_bytes())
    del index["tokenizer"]["vocab_size"]
    (copy_of / "index.json").write_bytes(orjson.dumps(index))
    _one_line(run_cli("verify", copy_of, check=EXIT_INCOMPLETE), "field 'tokenizer.vocab_size': missing")


# ------------------------------------------------------------------------------------ output paths

def test_output_that_is_a_file(tmp_path, finished, sample_tokenizer):
    f = tmp_path / "afile"
    f.write_text("not a directory")
    (tmp_path / "in.txt").write_text("hello\n")
    for args in (("submit", "-i", tmp_path / "in.txt", "-o", f, "-t", sample_tokenizer),
                 ("plan", "-i", tmp_path / "in.txt", "-o", f / "sub", "-t", sample_tokenizer),
                 ("submit", "--resume", f), ("status", f), ("finalize", f), ("verify", f)):
        _one_line(run_cli(*args, check=EXIT_USAGE), str(f), "is a file")
    assert f.read_text() == "not a directory"


def test_output_that_cannot_be_written(tmp_path, read_only_dir, sample_tokenizer):
    (tmp_path / "in.txt").write_text("hello\n")
    proc = run_cli("submit", "-i", tmp_path / "in.txt", "-o", read_only_dir, "-t", sample_tokenizer,
                   check=EXIT_ENVIRONMENT)
    _one_line(proc, f"cannot write in the output directory {read_only_dir}")
    proc = run_cli("plan", "-i", tmp_path / "in.txt", "-o", read_only_dir / "new", "-t", sample_tokenizer,
                   check=EXIT_ENVIRONMENT)
    _one_line(proc, f"cannot create the output directory {read_only_dir / 'new'}")


# ------------------------------------------------------------------------------------ inspect --decode

def test_inspect_decode_without_a_tokenizer_beside_the_shard(tmp_path, finished, sample_tokenizer):
    lone = tmp_path / "lone"
    lone.mkdir()
    for name in ("shard-00000.tar", "shard-00000.json"):
        shutil.copy(finished / name, lone / name)
    proc = run_cli("inspect", lone / "shard-00000.tar", "--decode", "2", check=EXIT_TOKENIZER)
    _one_line(proc, f"{lone / 'tokenizer.json'} does not exist", "--tokenizer")
    assert proc.stdout == ""                                             # refused before reading the shard
    proc = run_cli("inspect", lone / "shard-00000.tar", "--decode", "1", "--tokenizer", lone / "shard-00000.json",
                   check=EXIT_TOKENIZER)
    _one_line(proc, "is not a tokenizer.json")
    ok = run_cli("inspect", lone / "shard-00000.tar", "--decode", "1", "--tokenizer", sample_tokenizer)
    assert "--- document 0" in ok.stdout and "document 0-0 with words" in ok.stdout
    assert "--- document" not in run_cli("inspect", lone / "shard-00000.tar").stdout   # no --decode: no tokenizer


# ------------------------------------------------------------------------------------ counts

@pytest.mark.parametrize("command, option, value", [
    ("submit", "--workers", "-2"), ("submit", "--workers", "0"),
    ("verify", "--workers", "-2"), ("verify", "--workers", "0"),
    *(pytest.param("export-hf", "--num-files", n, marks=pytest.mark.requires("hf")) for n in ("0", "-3")),
    ("demo", "--workers", "-1"), ("demo", "--files", "0"), ("demo", "--docs-per-file", "-5"),
    ("inspect", "--decode", "-1"), ("inspect", "--max-chars", "0"),
    ("run-task", "--threads", "0"),
    ("submit", "--max-parallel", "0"), ("submit", "--cpus-per-task", "-1"), ("submit", "--max-requeues", "-1"),
    ("submit", "--chunk-tokens", "0"),
    ("stage", "--concurrency", "0"), ("upload", "--concurrency", "-4"), ("stage", "--max-attempts", "0"),
])
def test_negative_or_zero_counts_are_refused_naming_the_option(tmp_path, finished, sample_tokenizer, command,
                                                               option, value, monkeypatch):
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out"
    base = {
        "submit": ("submit", "-i", tmp_path / "in.txt", "-o", out, "-t", sample_tokenizer, "--no-progress",
                   *(("--executor", "slurm", "--dry-run") if option in ("--max-parallel", "--cpus-per-task",
                                                                         "--max-requeues") else ())),
        "verify": ("verify", finished), "export-hf": ("export-hf", "json", "-o", out),
        "demo": ("demo", "--workdir", out), "inspect": ("inspect", finished / "shard-00000.tar"),
        "run-task": ("run-task", finished, "--task-id", "0"),
        "stage": ("stage", "s3://bucket/raw/", out), "upload": ("upload", finished, "s3://bucket/shards/"),
    }[command]
    # in this process (the refusal comes before any client is made); were one made, it would try once
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    proc = run_cli(*base, option, value, check=EXIT_USAGE)
    _one_line(proc, option, value)
    assert not out.exists()                                              # refused before writing anything


# ------------------------------------------------------------------- issue 23 item 7: more one-liners

def test_output_or_stage_dest_that_cannot_be_created(tmp_path, sample_tokenizer, s3_endpoint):
    """/proc holds no directories a user can make: one line naming the path (exit 8), for --output and for
    stage's DEST, run here or as a Slurm job (which creates DEST before sbatch)."""
    from s3_server import aws_env, make_bucket, s3_client

    (tmp_path / "in.txt").write_text("hello\n")
    for cmd in ("plan", "submit"):
        proc = run_cli(cmd, "-i", tmp_path / "in.txt", "-o", "/proc/nope/out", "-t", sample_tokenizer,
                       check=EXIT_ENVIRONMENT)
        _one_line(proc, "cannot create the output directory /proc/nope/out: No such file or directory")
    bucket = make_bucket(s3_endpoint, "nope")
    s3_client(s3_endpoint).put_object(Bucket=bucket, Key="raw/a.txt", Body=b"hello\n")
    for extra in ((), ("--submit",)):
        proc = run_cli("stage", f"s3://{bucket}/raw/", "/proc/nope", "--endpoint-url", s3_endpoint, *extra,
                       check=EXIT_ENVIRONMENT, env=aws_env())
        _one_line(proc, "cannot create the directory /proc/nope: No such file or directory")


def test_resume_with_the_frozen_tokenizer_deleted(copy_of):
    (copy_of / "tokenizer.json").unlink()
    proc = run_cli("submit", "--resume", copy_of, check=EXIT_TOKENIZER)
    _one_line(proc, f"{copy_of / 'tokenizer.json'} is not readable: No such file or directory")
