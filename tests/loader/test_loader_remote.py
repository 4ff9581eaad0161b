"""Remote shards through every kind of URL, each against a real server on 127.0.0.1 behind a recording
proxy: ``s3://`` (moto, the one S3 layer), ``gs://`` (gcp-storage-emulator via gcsfs), ``az://`` (Azurite
via adlfs), ``http://`` (a server with Range support, fsspec's HTTP).  The same documents and batches as
from the local copy, read with ranged requests only (never a whole shard), and the routing of ``hf://``
to huggingface_hub's file system (the Hub itself cannot be reached from here).  The exactness and resume
tests of ``test_loader_data.py`` run over these backends too."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import run_cli, shard_documents
from loader_helpers import make_dataset
from s3_server import FaultProxy

from shardprep.errors import ConfigError, IncompleteError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.storage import locations

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("remote-src"), sample_tokenizer, [120, 15, 300])


def range_length(header: str) -> int:
    start, end = re.fullmatch(r"bytes=(\d+)-(\d+)", header).groups()
    return int(end) - int(start) + 1


def test_same_batches_as_local_with_ranged_reads_only(backend, local):
    url = backend.put_dir(local)
    kwargs = dict(mode="pack", seq_len=48, seed=3)
    shard_sizes = {p.name: p.stat().st_size for p in local.glob("shard-*.tar")}
    with FaultProxy(backend.endpoint) as proxy:
        where, storage = backend.reach(url, proxy.url)
        it = iter(make_dataloader(ShardDataset(where, **kwargs, **storage), batch_size=4))
        first = next(it)["input_ids"]
        early = sum(r.bytes for r in proxy.log if r.path.endswith(".tar"))
        remote = [first] + [b["input_ids"] for b in it]
        assert docs_of(where, storage) == shard_documents(local)
        shard_gets = [r for r in proxy.log if r.method == "GET" and r.path.endswith(".tar")]
    assert shard_gets and early < sum(shard_sizes.values()) / 2
    for r in shard_gets:          # every shard read is a range, answered with exactly its bytes
        assert r.range and r.status == 206 and r.bytes == range_length(r.range), r
        assert r.bytes < min(shard_sizes.values())
    local_batches = [b["input_ids"] for b in make_dataloader(ShardDataset(local, **kwargs), batch_size=4)]
    where, storage = backend.reach(url)
    forked = [b["input_ids"] for b in make_dataloader(ShardDataset(where, **kwargs, **storage), batch_size=4,
                                                      num_workers=2)]       # workers build their own clients
    assert len(remote) == len(local_batches) == len(forked)
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(remote, local_batches, forked))


def docs_of(where: str, storage: dict, **kwargs) -> list[list[int]]:
    return [d["input_ids"].tolist() for d in ShardDataset(where, mode="doc", shuffle=False, **storage, **kwargs)]


def test_verify_hashes_every_shard_and_refuses_a_missing_one(backend, local, tmp_path):
    url = backend.put_dir(local)
    where, storage = backend.reach(url)
    assert docs_of(where, storage, verify=True) == shard_documents(local)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in local.iterdir():
        if f.is_file() and f.name != "shard-00001.tar":
            (damaged / f.name).write_bytes(f.read_bytes())
    where, storage = backend.reach(backend.put_dir(damaged))
    with pytest.raises(IncompleteError, match=r"shard-00001.tar: listed in index.json but missing"):
        ShardDataset(where, mode="doc", **storage)


def test_verify_and_inspect_commands_read_remote_outputs(backend, local, tmp_path):
    """The CLI reaches each store through its usual environment variables; verify and inspect say the same
    of a remote copy as of the local output: the same BAD lines, the same summary and documents."""
    url = backend.put_dir(local)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(local, corrupt)
    shard = bytearray((corrupt / "shard-00001.tar").read_bytes())
    shard[600] ^= 0xFF                                          # same size, different bytes
    (corrupt / "shard-00001.tar").write_bytes(bytes(shard))
    bad_url = backend.put_dir(corrupt)
    with FaultProxy(backend.endpoint) as proxy:
        env = backend.cli_env(proxy.url)
        where, _ = backend.reach(url, proxy.url)
        assert run_cli("verify", where, env=env).stdout == f"{where}: all shards verified\n"
        bad_where = backend.reach(bad_url, proxy.url)[0]
        remote_bad = run_cli("verify", bad_where, env=env, check=5).stderr
        before = sum(r.bytes for r in proxy.log if r.path.endswith("shard-00002.tar"))
        remote = run_cli("inspect", f"{where}/shard-00002.tar", "--decode", "3", env=env).stdout
        served = sum(r.bytes for r in proxy.log if r.path.endswith("shard-00002.tar")) - before
    local_bad = run_cli("verify", corrupt, check=5).stderr
    assert "BAD shard-00001.tar: sha256 differs from index" in local_bad
    assert bad_lines(remote_bad) == bad_lines(local_bad)
    here = run_cli("inspect", local / "shard-00002.tar", "--decode", "3").stdout
    assert remote.splitlines()[1:] == here.splitlines()[1:] and remote.count("--- document") == 3
    assert remote.splitlines()[0].split(".tar: ")[1] == here.splitlines()[0].split(".tar: ")[1]
    assert 0 < served < (local / "shard-00002.tar").stat().st_size / 2       # three documents' ranges


def bad_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("BAD ")]


def test_hf_urls_go_to_huggingface_filesystem_with_the_repo_path(monkeypatch):
    """The Hub is unreachable here: check the routing and what reaches HfFileSystem, not the Hub."""
    from huggingface_hub import HfFileSystem

    from shardprep.storage.fsspec import client as remote

    url = "hf://datasets/someone/corpus@v1/shards/index.json"
    fs, path = remote.resolve(url, {"token": "hf_test"})
    assert isinstance(fs, HfFileSystem) and path == "datasets/someone/corpus@v1/shards/index.json"
    seen = []
    monkeypatch.setattr(HfFileSystem, "cat_file", lambda self, p, start=None, end=None, **kw:
                        seen.append((p, start, end)) or b"x" * (end - start if end is not None else 3))
    assert locations.read_bytes(url, storage=locations.StorageOptions(fsspec={"token": "hf_test"})) == b"xxx"
    src = locations.open_source("hf://datasets/someone/corpus/shards/shard-00000.tar")
    assert src.read(1024, 10) == b"x" * 10
    assert seen == [("datasets/someone/corpus@v1/shards/index.json", None, None),
                    ("datasets/someone/corpus/shards/shard-00000.tar", 1024, 1034)]
    assert locations.join("hf://datasets/someone/corpus/shards/", "index.json") == \
        "hf://datasets/someone/corpus/shards/index.json"


def test_unknown_scheme_and_missing_package_are_one_line_errors():
    import subprocess
    import sys

    with pytest.raises(ConfigError, match=r"nosuch://b/x/index.json: no fsspec file system for nosuch://"):
        ShardDataset("nosuch://b/x", mode="doc")
    # as if the [remote] extra were not installed: a fresh interpreter in which gcsfs cannot be imported
    code = ("import sys; sys.modules['gcsfs'] = None\n"
            "from shardprep.errors import EnvironmentProblem\nfrom shardprep.storage import locations\n"
            "try:\n    locations.read_bytes('gs://bucket/shards/index.json')\n"
            "except EnvironmentProblem as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert re.fullmatch(r"gs://bucket/shards/index.json: reading gs:// needs a package that is not installed "
                        r"\(.*gcsfs.*\) \(hint: pip install 'shardprep\[remote\]'\)\n", out.stdout), out.stdout + out.stderr


def test_a_forked_child_never_closes_the_parents_http_connections(http_backend, local):
    """A DataLoader worker (a fork) that drops or collects the parent's HTTP file system must not unregister
    the parent's sockets from the parent's epoll (shared across fork): the parent's next read would then
    wait for aiohttp's 300 s timeout.  The child here does what a worker may do: create its own file
    system (fsspec empties its instance cache) and run the collector."""
    import gc
    import os
    import signal

    url = http_backend.put_dir(local)
    parent = locations.read_bytes(f"{url}/index.json")          # the parent holds a pooled connection
    pid = os.fork()
    if pid == 0:                                               # the child: never returns to pytest
        try:
            locations.read_bytes(f"{url}/index.json")
            gc.collect()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    # In the parent, with a deadline far below aiohttp's 300 s: SIGALRM interrupts a hung read.
    def hung(*_):
        raise TimeoutError("the parent's read hung after a forked child ran")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        for _ in range(3):
            assert locations.read_bytes(f"{url}/index.json") == parent
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
