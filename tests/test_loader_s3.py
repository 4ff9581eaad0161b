"""The loader reading ``s3://`` from a real S3 API server (moto's server mode on 127.0.0.1): same
batches as from the local copy, ranged GETs only (no whole-object download), retries, missing shards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import shard_documents
from loader_helpers import make_dataset
from s3_server import FaultProxy, make_bucket, s3_client

from shardprep.errors import IncompleteError
from shardprep.loader import ShardDataset, make_dataloader
from shardprep.loader import sources

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def local(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("s3src"), sample_tokenizer, [120, 15, 300])


def upload(endpoint: str, output: Path, skip: tuple[str, ...] = ()) -> str:
    bucket = make_bucket(endpoint, "loader")
    client = s3_client(endpoint)
    for f in sorted(output.iterdir()):
        if f.is_file() and f.name not in skip:
            client.upload_file(str(f), bucket, f"runs/shards/{f.name}")
    return f"s3://{bucket}/runs/shards"


def test_s3_reads_match_local_with_ranged_gets(local, s3_endpoint):
    url = upload(s3_endpoint, local)
    docs = [d["input_ids"].tolist() for d in ShardDataset(url, mode="doc", shuffle=False, endpoint_url=s3_endpoint)]
    assert docs == shard_documents(local)

    ranges: list[tuple[str, str | None]] = []

    def remember(request, **_):
        if request.method == "GET" and request.url.split("?")[0].endswith(".tar"):
            value = request.headers.get("Range")
            ranges.append((request.url, value.decode() if isinstance(value, bytes) else value))

    events = sources.s3_client(s3_endpoint).meta.events
    events.register("before-send.s3.GetObject", remember)
    kwargs = dict(mode="pack", seq_len=48, seed=3)
    remote = make_dataloader(ShardDataset(url, endpoint_url=s3_endpoint, **kwargs), batch_size=4)
    it = iter(remote)
    first = [next(it)["input_ids"] for _ in range(3)]
    assert ranges and all(r is not None and r.startswith("bytes=") for _, r in ranges)   # never a full GET
    fetched = sum(int(r.split("-")[1]) - int(r[6:].split("-")[0]) + 1 for _, r in ranges)
    assert fetched < sum(f.stat().st_size for f in local.glob("shard-*.tar")) / 2
    rest = [b["input_ids"] for b in it]
    events.unregister("before-send.s3.GetObject", remember)
    # the same batches as from the local copy, also with forked workers (own boto3 clients)
    local_batches = [b["input_ids"] for b in make_dataloader(ShardDataset(local, **kwargs), batch_size=4)]
    remote2 = [b["input_ids"] for b in make_dataloader(ShardDataset(url, endpoint_url=s3_endpoint, **kwargs),
                                                        batch_size=4, num_workers=2)]
    assert len(first + rest) == len(local_batches) == len(remote2)
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(first + rest, local_batches, remote2))


def test_s3_transient_errors_are_retried(local, s3_endpoint):
    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("shard-00002.tar", times=2, status=503)
        proxy.fail("shard-00000.json", times=1, status=500)
        docs = [d["input_ids"].tolist() for d in ShardDataset(url, mode="doc", shuffle=False,
                                                               endpoint_url=proxy.url)]
        statuses = [r.status for r in proxy.requests_for("shard-00002.tar")]
    assert docs == shard_documents(local)
    assert statuses[:2] == [503, 503] and 206 in statuses


def test_s3_missing_shard_is_refused(local, s3_endpoint):
    url = upload(s3_endpoint, local, skip=("shard-00001.tar",))
    with pytest.raises(IncompleteError, match=r"shard-00001.tar: listed in index.json but missing"):
        ShardDataset(url, mode="doc", endpoint_url=s3_endpoint)
