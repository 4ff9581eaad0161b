"""The loader reading ``s3://`` through the one S3 layer (``shardprep.storage.s3``), against moto's server
on 127.0.0.1 with a recording proxy in front: botocore's standard retries and nothing on top (a 403 or
NoSuchKey is sent once, a 503 is retried, a 500 forever is sent exactly ``max_attempts`` times), one
repeat of a body that broke mid-stream, and the endpoint/profile options working for the loader as they
do for staging.  Same batches as local, ranged reads only, exactness and resume: ``test_loader_remote.py``
and ``test_loader_data.py``, over every store."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import shard_documents
from loader_helpers import make_dataset
from s3_server import FaultProxy, make_bucket, s3_client

from shardprep.errors import ConfigError, IncompleteError, TransferError
from shardprep.loader import ShardDataset
from shardprep.storage.s3 import ClientOptions

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


def docs_of(url: str, **storage) -> list[list[int]]:
    return [d["input_ids"].tolist() for d in ShardDataset(url, mode="doc", shuffle=False, **storage)]


def test_503_is_retried_by_botocore_and_nothing_retries_on_top(local, s3_endpoint):
    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("shard-00002.tar", times=2, status=503, code="ServiceUnavailable")
        proxy.fail("shard-00000.json", times=1, status=500)
        docs = docs_of(url, s3=ClientOptions(endpoint_url=proxy.url, max_attempts=3))
        first_range = proxy.requests_for("shard-00002.tar", "GET")[0].range
        same_range = [r.status for r in proxy.requests_for("shard-00002.tar", "GET") if r.range == first_range]
        sidecar = [r.status for r in proxy.requests_for("shard-00000.json", "GET")]
    assert docs == shard_documents(local)
    assert same_range == [503, 503, 206] and sidecar == [500, 200]

    with FaultProxy(s3_endpoint) as proxy:          # a 500 forever: exactly max_attempts requests, then an error
        proxy.fail("shard-00001.tar", status=500)
        with pytest.raises(TransferError, match=r"shard-00001.tar: GET bytes=\d+-\d+: InternalError \(HTTP 500\)"):
            docs_of(url, s3=ClientOptions(endpoint_url=proxy.url, max_attempts=3))
        assert len(proxy.requests_for("shard-00001.tar", "GET")) == 3


@pytest.mark.parametrize("status,code", [(403, "AccessDenied"), (400, "InvalidRequest")])
def test_non_retryable_errors_are_sent_once(local, s3_endpoint, status, code):
    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("shard-00001.tar", status=status, code=code)
        with pytest.raises(TransferError, match=rf"shard-00001.tar: GET bytes=.*{code} \(HTTP {status}\)"):
            docs_of(url, endpoint_url=proxy.url)
        assert len(proxy.requests_for("shard-00001.tar", "GET")) == 1


def test_missing_object_is_sent_once_and_named(local, s3_endpoint):
    url = upload(s3_endpoint, local, skip=("shard-00001.json",))   # listed shard, no sidecar: NoSuchKey
    with FaultProxy(s3_endpoint) as proxy:
        with pytest.raises(IncompleteError, match=r"shard-00001.json: sidecar of shard-00001.tar is missing"):
            docs_of(url, endpoint_url=proxy.url)
        assert [r.status for r in proxy.requests_for("shard-00001.json", "GET")] == [404]


def test_a_body_cut_mid_stream_is_requested_once_more(local, s3_endpoint):
    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        proxy.cut("shard-00002.tar", times=1)
        assert docs_of(url, endpoint_url=proxy.url) == shard_documents(local)
        gets = proxy.requests_for("shard-00002.tar", "GET")
        assert gets[0].range == gets[1].range                      # the cut range, sent again
    with FaultProxy(s3_endpoint) as proxy:                         # cut every time: two requests, then an error
        proxy.cut("shard-00002.tar")
        with pytest.raises(TransferError, match="shard-00002.tar: GET bytes="):
            docs_of(url, endpoint_url=proxy.url)
        assert len(proxy.requests_for("shard-00002.tar", "GET")) == 2


def test_profile_reaches_the_loader_as_it_reaches_staging(local, s3_endpoint, tmp_path, monkeypatch):
    """A named profile whose config holds the endpoint: the loader and ``stage`` both go there."""
    from shardprep.staging.stage import StageOptions, stage_prefix

    url = upload(s3_endpoint, local)
    with FaultProxy(s3_endpoint) as proxy:
        config = tmp_path / "aws-config"
        config.write_text(f"[profile shardtest]\nregion = us-east-1\nendpoint_url = {proxy.url}\n")
        credentials = tmp_path / "aws-credentials"     # a named profile takes its keys from the files, not the env
        credentials.write_text("[shardtest]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        profile = ClientOptions(profile="shardtest")
        assert docs_of(url, s3=profile) == shard_documents(local)
        assert proxy.requests_for("shard-00002.tar", "GET")          # the profile's endpoint was used
        before = len(proxy.requests_for("/runs/shards/index.json", "GET"))
        summary = stage_prefix(StageOptions(url, tmp_path / "staged", progress=False, client=profile))
        assert not summary.failed and len(proxy.requests_for("/runs/shards/index.json", "GET")) == before + 1
    assert (tmp_path / "staged" / "index.json").read_bytes() == (local / "index.json").read_bytes()
    with pytest.raises(ConfigError, match="nosuchprofile"):
        ShardDataset(url, mode="doc", s3=ClientOptions(profile="nosuchprofile"))
    with pytest.raises(ConfigError, match="endpoint_url=.* and s3=.* both given"):
        ShardDataset(url, mode="doc", endpoint_url=s3_endpoint, s3=profile)
