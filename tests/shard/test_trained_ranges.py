"""Chat shards (format 2): each chunk's trained token ranges stored beside its tokens, read back exactly by
the chunk table's one ranged read and by a tar walk, refused when malformed; other shards unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.shard import trained as tm
from shardprep.shard.reader import read_chunk, read_trained, walk_tar
from shardprep.shard.trained import Trained
from shardprep.shard.writer import ShardWriter
from shardprep.storage.local import LocalSource


@st.composite
def documents(draw) -> tuple[np.ndarray, Trained]:
    """Document lengths and, per document, sorted ranges that neither overlap nor touch."""
    lengths, counts, ranges = [], [], []
    for _ in range(draw(st.integers(1, 30))):
        n = draw(st.integers(1, 70_000 if draw(st.integers(0, 20)) == 0 else 300))
        cuts = sorted(draw(st.sets(st.integers(0, n), max_size=8)))
        pairs = [(a, b) for a, b in zip(cuts[::2], cuts[1::2])]
        kept = [(a, b) for i, (a, b) in enumerate(pairs) if i == 0 or a > pairs[i - 1][1]]
        lengths.append(n)
        counts.append(len(kept))
        ranges += kept
    return np.array(lengths), Trained(np.array(counts), np.array(ranges, dtype=np.int64).reshape(-1, 2))


@settings(max_examples=examples(60), deadline=None)
@given(documents(), st.integers(50, 5000))
def test_written_ranges_read_back_exactly_by_chunk_and_by_tar_walk(tmp_path_factory, docs, chunk_tokens):
    lengths, trained = docs
    path = tmp_path_factory.mktemp("s") / "shard-00000.tar"
    ids = np.arange(int(lengths.sum())) % 1000
    with ShardWriter(path, task=0, layout="pack", dtype="uint16", chunk_tokens=chunk_tokens, chat=True) as w:
        half = len(lengths) // 2           # two batches: a chunk may take documents of both
        w.add(ids[:int(lengths[:half].sum())], lengths[:half], trained.docs(0, half))
        w.add(ids[int(lengths[:half].sum()):], lengths[half:], trained.docs(half, len(lengths)))
        result = w.close()
    assert w.trained_tokens == trained.trained_tokens()
    src = LocalSource(path)
    parts = []
    for chunk in result.chunks.chunks():
        _, lens = read_chunk(src, chunk, "uint16")
        parts.append(read_trained(src, chunk, lens))
    src.close()
    back = Trained.concat(parts)
    walked = Trained.concat([s.trained for s in walk_tar(path)])
    for got in (back, walked):
        assert got.counts.tolist() == trained.counts.tolist() and got.ranges.tolist() == trained.ranges.tolist()
    mask = trained.mask(lengths)
    assert int(mask.sum()) == trained.trained_tokens()


def test_the_mask_marks_exactly_the_ranges():
    t = Trained(np.array([2, 0, 1]), np.array([[0, 2], [4, 5], [1, 3]]))
    assert t.mask(np.array([5, 2, 3])).astype(int).tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("counts,ranges,why", [
    ([1], [[2, 2]], "document 0"),                       # empty
    ([1], [[0, 6]], "outside"),                          # past the end
    ([2], [[0, 2], [2, 4]], "not after"),                # touching
    ([2], [[3, 4], [0, 1]], "not after"),                # out of order
])
def test_malformed_ranges_are_refused_naming_the_document(counts, ranges, why):
    data, size = tm.encode(Trained(np.array(counts), np.array(ranges)), np.array([5]))
    with pytest.raises(ValueError, match=why):
        tm.decode(data, size, np.array([5]))


def test_counts_that_run_past_the_member_are_refused():
    data, size = tm.encode(Trained(np.array([1, 0]), np.array([[0, 1]])), np.array([3, 3]))
    with pytest.raises(ValueError, match="end at document 1"):
        tm.decode(data[:-2], size, np.array([3, 3]))


def test_a_chat_writer_wants_ranges_with_every_batch_and_others_none(tmp_path):
    with ShardWriter(tmp_path / "a.tar", task=0, layout="pack", dtype="uint16", chunk_tokens=10, chat=True) as w:
        with pytest.raises(ValueError, match="trained ranges"):
            w.add(np.arange(3), np.array([3]))
    with ShardWriter(tmp_path / "b.tar", task=0, layout="pack", dtype="uint16", chunk_tokens=10) as w:
        with pytest.raises(ValueError, match="trained ranges"):
            w.add(np.arange(3), np.array([3]), Trained.empty(1))
        w.add(np.arange(3), np.array([3]))
        assert w.close().chunks.chat is False
