"""From raw text to training batches with the Python API, on the embedded sample data.

    python examples/tokenize_and_read.py [WORKDIR]

Writes a small sample corpus and tokenizer (offline), tokenizes it with the local executor into
WORKDIR/shards, then reads it back three ways: every document in order (doc mode), packed rows for
pretraining, and padded rows for fine-tuning.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from shardprep.api import tokenize_directory
from shardprep.demo_data import build_sample_tokenizer, write_sample_corpus
from shardprep.loader import ShardDataset, make_dataloader


def main(workdir: Path) -> None:
    raw = write_sample_corpus(workdir / "raw", files=3, docs_per_file=100)
    tokenizer = build_sample_tokenizer(workdir / "tokenizer.json")
    shards = tokenize_directory(raw, workdir / "shards", tokenizer)

    docs = list(ShardDataset(shards, mode="doc", shuffle=False))
    print(f"{len(docs)} documents; the first has {len(docs[0]['input_ids'])} tokens (EOS included)")

    pack = make_dataloader(ShardDataset(shards, mode="pack", seq_len=128, seed=0), batch_size=4)
    batch = next(iter(pack))
    print(f"pack: {len(pack)} batches per epoch, input_ids {tuple(batch['input_ids'].shape)}, "
          f"dropped to keep ranks equal: {pack.dropped}")

    pad = make_dataloader(ShardDataset(shards, mode="pad", seq_len=64, seed=0), batch_size=4)
    batch = next(iter(pad))
    print(f"pad: attention_mask sums {batch['attention_mask'].sum(dim=1).tolist()}, "
          f"labels -100 on padding only: {bool(((batch['labels'] == -100) == (batch['attention_mask'] == 0)).all())}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shardprep-example-")))
