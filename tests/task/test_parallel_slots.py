"""How a task's encoding workers hand their ids back (job.slots): shared slots, the pipe when a piece
outgrows its slot, and the writer letting go of a slot before it is reused."""

from __future__ import annotations

import numpy as np
import pytest

from shardprep.job.slots import PieceIds, Slots
from shardprep.shard.writer import ShardWriter


def _batches(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lengths = rng.integers(1, 40, size=int(rng.integers(1, 20))).astype(np.int64)
        out.append((rng.integers(0, 50_000, size=int(lengths.sum())).astype(np.uint16), lengths))
    return out


@pytest.mark.parametrize("tokens, docs", [(10_000, 1_000), (150, 1_000), (10_000, 12), (0, 0)])
def test_a_piece_is_in_its_slot_while_it_fits_and_piped_whole_once_it_does_not(tokens, docs):
    slots = Slots(3, tokens, docs, np.dtype(np.uint16))
    batches = _batches(12, seed=tokens + docs)
    out = PieceIds(slots, 1)
    for ids, lengths in batches:
        out.add(ids, lengths)
    want_ids = np.concatenate([b[0] for b in batches])
    want_lens = np.concatenate([b[1] for b in batches])
    assert (out.tokens, out.docs) == (want_ids.size, want_lens.size)
    piped = out.piped()
    fits = want_ids.size <= tokens and want_lens.size <= docs
    if fits:
        assert piped is None
        got_ids, got_lens = slots.take(1, out.tokens, out.docs)
    else:
        assert piped is not None
        got_ids, got_lens = np.frombuffer(piped[0], np.uint16), np.frombuffer(piped[1], np.int64)
    assert np.array_equal(got_ids, want_ids) and np.array_equal(got_lens, want_lens)


def test_slots_are_separate():
    slots = Slots(2, 100, 10, np.dtype(np.uint32))
    for slot, value in ((0, 7), (1, 9)):
        out = PieceIds(slots, slot)
        out.add(np.full(100, value, np.uint32), np.full(10, 10, np.int64))
    assert set(slots.take(0, 100, 10)[0].tolist()) == {7} and set(slots.take(1, 100, 10)[0].tolist()) == {9}


def test_the_writer_keeps_nothing_of_a_released_buffer(tmp_path):
    """Ids added from a buffer that is then overwritten (a slot given out again) write the same shard as
    ids in buffers of their own, provided ``release`` came in between."""
    batches = _batches(30, seed=3)

    def write(name: str, reuse: bool) -> bytes:
        buf_ids, buf_lens = np.empty(2_000, np.uint16), np.empty(100, np.int64)
        with ShardWriter(tmp_path / name, task=0, layout="pack", dtype="uint16", chunk_tokens=97) as w:
            for ids, lengths in batches:
                if reuse:
                    buf_ids[:ids.size], buf_lens[:lengths.size] = ids, lengths
                    w.add(buf_ids[:ids.size], buf_lens[:lengths.size])
                    w.release()
                    buf_ids[:], buf_lens[:] = 1, 1                # the next piece lands here
                else:
                    w.add(ids.copy(), lengths.copy())
            w.close()
        return (tmp_path / name).read_bytes()

    assert write("reused.tar", True) == write("own.tar", False)
