"""``shardprep.wds`` in stock webdataset pipelines: the same tensors as the loader's pack mode on the same
shards (one rank, one worker, no shuffle), both layouts, from local paths and from S3 through ``pipe:``,
and clear errors on foreign samples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from loader_helpers import make_dataset
from s3_server import aws_env, make_bucket, s3_client

import shardprep.wds as spw
from shardprep._extras import MissingExtra
from shardprep.errors import ConfigError, InputDataError
from shardprep.loader import ShardDataset, make_dataloader

wds = pytest.importorskip("webdataset")


@pytest.fixture(scope="module")
def packed(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("wds-pack"), sample_tokenizer, [3, 250, 40, 600, 12])


@pytest.fixture(scope="module")
def per_doc(tmp_path_factory, sample_tokenizer) -> Path:
    return make_dataset(tmp_path_factory.mktemp("wds-doc"), sample_tokenizer, [30, 70], layout="doc")


def stock(urls: list[str], *stages) -> list[dict]:
    return list(wds.WebDataset(urls, shardshuffle=False).compose(*stages))


def assert_same(expected: list[dict], got: list[dict]) -> None:
    assert len(got) == len(expected) > 0
    for a, b in zip(expected, got):
        assert sorted(a) == sorted(b)
        for key in a:
            assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("seq_len, batch", [(64, 4), (7, 3)])
def test_pack_batches_equal_the_loader(packed, seq_len, batch):
    ds = ShardDataset(packed, mode="pack", seq_len=seq_len, shuffle=False, return_position_ids=True,
                      return_doc_info=True)
    expected = list(make_dataloader(ds, batch_size=batch))
    got = stock(spw.shard_urls(str(packed)), spw.decode(str(packed)),
                spw.pack(seq_len, batch_size=batch, position_ids=True, doc_info=True))
    assert_same(expected, got)


def test_pack_rows_equal_the_loader_in_both_layouts(packed, per_doc):
    for root in (packed, per_doc):
        expected = list(ShardDataset(root, mode="pack", seq_len=50, shuffle=False, return_position_ids=True))
        got = stock(spw.shard_urls(str(root)), spw.decode(), spw.pack(50, position_ids=True))
        assert_same(expected, got)
        assert got[0]["input_ids"].shape == (50,) and got[0]["input_ids"].dtype == torch.int64


def test_decode_gives_every_document_with_its_global_number(per_doc, packed):
    from helpers import shard_documents

    for root in (packed, per_doc):
        samples = stock(spw.shard_urls(str(root)), spw.decode(str(root)))
        docs, numbers = [], []
        for s in samples:
            assert set(s) == {"__key__", "__url__", "tokens", "doclens", "doc_start"}
            docs.extend(d.tolist() for d in torch.from_numpy(s["tokens"].astype("int64")).split(s["doclens"].tolist()))
            numbers.extend(range(s["doc_start"], s["doc_start"] + len(s["doclens"])))
        assert docs == shard_documents(root) and numbers == list(range(len(docs)))


def test_foreign_or_damaged_samples_fail_naming_url_and_key():
    url, key = "/data/x/shard-00003.tar", "00003_000000007"
    with pytest.raises(InputDataError, match=f"{url}: sample {key} has no tokens.u16/tokens.u32 member"):
        spw.decode().decode_one({"__url__": url, "__key__": key, "token_ids.json": b"[1]"})
    with pytest.raises(InputDataError, match=r"tokens.u16 has 3 bytes, not a multiple of 2"):
        spw.decode().decode_one({"__url__": url, "__key__": key, "tokens.u16": b"abc"})
    with pytest.raises(InputDataError, match=r"document lengths sum to 3 for 2 tokens"):
        spw.decode().decode_one({"__url__": url, "__key__": key, "tokens.u16": b"abcd", "doclens.u16": b"\x03\x00"})
    sample = spw.decode().decode_one({"__url__": url, "__key__": key, "tokens.u32": b"\x01\x00\x00\x00"})
    with pytest.raises(ConfigError, match=r"pack\(doc_info=True\) needs global document numbers"):
        list(spw.pack(1, doc_info=True)([sample]))
    with pytest.raises(ConfigError, match="seq_len=0 is invalid"):
        spw.pack(0)


def test_pipeline_helper_and_its_missing_extra(packed, monkeypatch):
    expected = list(make_dataloader(ShardDataset(packed, mode="pack", seq_len=32, shuffle=False), batch_size=2))
    assert_same(expected, list(spw.webdataset_pipeline(str(packed), 32, batch_size=2)))
    monkeypatch.setitem(sys.modules, "webdataset", None)
    with pytest.raises(MissingExtra, match=r"needs the optional package webdataset, which is not installed "
                                           r"\(hint: pip install 'shardprep\[wds\]'\)"):
        spw.webdataset_pipeline(str(packed), 32)


@pytest.mark.s3
def test_s3_output_streams_through_the_aws_cli(packed, s3_endpoint, monkeypatch, caplog):
    bucket = make_bucket(s3_endpoint, "wds")
    client = s3_client(s3_endpoint)
    for f in sorted(packed.iterdir()):
        if f.is_file():
            client.upload_file(str(f), bucket, f"out/{f.name}")
    root = f"s3://{bucket}/out"
    urls = spw.shard_urls(root, endpoint_url=s3_endpoint)
    assert urls[0].startswith("pipe:aws s3 cp --only-show-errors --endpoint-url ") and urls[0].endswith(
        f"{root}/shard-00000.tar -")
    for k, v in aws_env().items():          # the aws CLI child reads credentials from the environment
        monkeypatch.setenv(k, v)
    expected = list(ShardDataset(packed, mode="pack", seq_len=40, shuffle=False))
    decode = spw.decode()
    assert_same(expected, stock(urls, decode, spw.pack(40)))
    assert "not checked against the vocabulary" not in caplog.text     # index.json found beside the shards
    assert list(decode._vocab.values()) == [ShardDataset(packed, mode="pack", seq_len=40).index.tokenizer.vocab_size]


def test_token_ids_beyond_the_vocabulary_are_refused_by_the_stock_pipeline(packed, tmp_path, caplog):
    """Issue 23 item 4: a corrupt shard whose ids pass the dtype but not the vocabulary (65535 with a vocab of
    a few hundred) is refused by ``shardprep.wds`` as by the loader, with the loader's own check."""
    import shutil

    from shardprep.shard.sidecar import Sidecar

    root = tmp_path / "corrupt"
    shutil.copytree(packed, root)
    sidecar = Sidecar.parse((root / "shard-00001.json").read_bytes(), "shard-00001.json")
    data = bytearray((root / "shard-00001.tar").read_bytes())
    at = sidecar.chunks.tokens_offset[0] + 2 * 5                 # the 6th id of the first sample
    data[at:at + 2] = (65535).to_bytes(2, "little")
    (root / "shard-00001.tar").write_bytes(bytes(data))
    key = sidecar.chunks.key[0]
    vocab = ShardDataset(root, mode="pack", seq_len=8).index.tokenizer.vocab_size
    expected = f"corrupt shard {root / 'shard-00001.tar'}: sample {key} holds token id 65535 >= vocab size {vocab}"
    for stages in ((spw.decode(), spw.pack(32)), (spw.decode(str(root)), spw.pack(32, doc_info=True))):
        with pytest.raises(InputDataError, match=expected):
            stock(spw.shard_urls(str(root)), *stages)
    with pytest.raises(InputDataError, match=r"holds token id 65535 >= vocab size"):
        list(spw.webdataset_pipeline(str(root), 32))
    with pytest.raises(InputDataError, match=r"sample .* \(chunk 0\) holds token id 65535 >= vocab size"):
        list(ShardDataset(root, mode="pack", seq_len=32, shuffle=False))      # the loader, for comparison
    # shards away from their index.json: the same check given the vocabulary, and a warning without it
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(root / "shard-00001.tar", lone / "shard-00001.tar")
    with pytest.raises(InputDataError, match="holds token id 65535"):
        stock([str(lone / "shard-00001.tar")], spw.decode(vocab_size=vocab))
    assert stock([str(lone / "shard-00001.tar")], spw.decode())
    assert f"token ids of the shards in {lone} are not checked against the vocabulary" in caplog.text
