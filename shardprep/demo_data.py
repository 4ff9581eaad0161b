"""The embedded default: a generated sample corpus and a small byte-level BPE tokenizer trained offline.

``shardprep demo`` uses them so the whole job runs on a fresh machine with no data and no network; the
tests use them as well.  Everything is deterministic (seeded), so two runs give identical shards.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import random
from pathlib import Path

from shardprep.storage.atomic import atomic_writer
from shardprep.storage.nofollow import real_dir

_WORDS = (
    "the of and to in is was for on that with as by at from his her an were which are this be has had not "
    "first new one two their after also its time may can only other all into more such during city year "
    "data shard token model training cluster node array task file stream batch epoch rank worker tensor "
    "lustre stripe bucket prefix object cache memory index format verify resume signal queue partition"
).split()
_N_WORDS = len(_WORDS)
_MULTILINGUAL = (
    "한국어 문장은 토크나이저에게 어려운 경우입니다.",
    "日本語のテキストも正しく処理されます。",
    "中文文本同样需要被正确地切分。",
    "Ünïcödé façade naïve café — déjà vu.",
    "Emoji: 👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs.",
    "Numbers 1234567890 and 3.14159 and 2026-11-22.",
)


def _below(rng: random.Random, n: int) -> int:
    """``rng.randrange(n)``, drawn as ``random.Random`` draws it (rejection on ``n.bit_length()`` bits)
    without its three Python calls per draw: the corpus, and so every pinned shard, stays the same."""
    bits = n.bit_length()
    draw = rng.getrandbits(bits)
    while draw >= n:
        draw = rng.getrandbits(bits)
    return draw


def _sentence(rng: random.Random) -> str:
    count = 5 + _below(rng, 21)                                 # rng.randint(5, 25)
    words = [_WORDS[_below(rng, _N_WORDS)] for _ in range(count)]   # rng.choice(_WORDS), count times
    words[0] = words[0].capitalize()
    return " ".join(words) + ".!?"[_below(rng, 3)]


def _document(rng: random.Random) -> str:
    parts = [_sentence(rng) for _ in range(1 + _below(rng, 6))]    # rng.randint(1, 6)
    if rng.random() < 0.15:
        parts.insert(_below(rng, len(parts) + 1), _MULTILINGUAL[_below(rng, len(_MULTILINGUAL))])
    return " ".join(parts)


def sample_documents(n: int, seed: int = 0) -> list[str]:
    """``n`` generated documents, the same for the same ``(n, seed)``."""
    return list(_documents(n, seed))


@functools.lru_cache(maxsize=64)
def _documents(n: int, seed: int) -> tuple[str, ...]:
    # Kept per process: the generator draws word by word (~40 us a document), and a process that builds
    # the corpus and trains the tokenizer on it, or several demo jobs, asks for the same ones again.
    rng = random.Random(seed)
    return tuple(_document(rng) for _ in range(n))


def write_sample_corpus(directory: str | Path, *, files: int = 6, docs_per_file: int = 400, seed: int = 0) -> Path:
    """Write a small mixed corpus: plain txt, jsonl, and gzip jsonl files of generated documents."""
    directory = Path(directory)
    real_dir(directory, parents=True)         # written atomically: never through a link planted in it
    for i in range(files):
        docs = sample_documents(docs_per_file, seed=seed * 1000 + i)
        kind = i % 3
        if kind == 0:
            name, data = f"part-{i:03d}.txt", ("\n".join(docs) + "\n").encode("utf-8")
        else:
            lines = "".join(json.dumps({"id": f"{i}-{j}", "text": d}, ensure_ascii=False) + "\n"
                            for j, d in enumerate(docs)).encode("utf-8")
            name, data = (f"part-{i:03d}.jsonl", lines) if kind == 1 else (f"part-{i:03d}.jsonl.gz", lines)
        with atomic_writer(directory / name) as f:
            if name.endswith(".gz"):    # exactly gzip.open(path, "wt")'s bytes: the corpus (and plan) stay pinned
                with gzip.GzipFile(filename=str(directory / name), mode="wb", fileobj=f) as g, \
                        io.TextIOWrapper(g, encoding="utf-8") as text:
                    text.write(data.decode("utf-8"))
            else:
                f.write(data)
    return directory


def build_sample_tokenizer(path: str | Path, *, vocab_size: int = 2000, seed: int = 0) -> Path:
    """Train a byte-level BPE tokenizer (GPT-2 style, ``<|endoftext|>`` as EOS) on generated text.

    Offline and fast (well under a second); byte-level means any input, including CJK and emoji, encodes
    without unknown tokens.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as f:            # as tok.save writes it, but never through a planted link
        f.write(_trained_tokenizer(vocab_size, seed).encode("utf-8"))
    return path


@functools.lru_cache(maxsize=8)
def _trained_tokenizer(vocab_size: int, seed: int) -> str:
    # Kept per process: training takes a third of a second, and the result is the same for the same options.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sample_documents(3000, seed=seed) + list(_MULTILINGUAL), trainer=trainer)
    return str(tok.to_str(pretty=True))
