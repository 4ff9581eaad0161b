"""Shared fixtures: a tokenizer trained offline, and the shared GPT-2 tokenizer/corpus when present
(tests skip cleanly without them).  Plain helper functions live in ``helpers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

# Session fixtures shared by several test modules: a real S3 API (moto server), the other object-store
# emulators (remote_servers.py), the corpus of the remote-input tests and the live Slurm cluster.
pytest_plugins = ("s3_server", "remote_servers", "remote_corpus", "slurm_cluster")


def _find_shared() -> Path:
    """``shared/`` beside the checkout; a git worktree sits deeper (``wt/<name>/``), so look upward."""
    here = Path(__file__).resolve()
    for parent in here.parents[1:]:
        if (parent / "shared").is_dir():
            return parent / "shared"
    return here.parents[2] / "shared"


# No deadline for property tests: these machines are shared and noisy, and a deadline is a timed test
# (examples that took 340 ms instead of 200 ms failed as "flaky" under load).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:     # a core install: the property tests are skipped for their missing extra
    pass
else:
    _hypothesis_settings.register_profile("shardprep", deadline=None)
    _hypothesis_settings.load_profile("shardprep")

SHARED = _find_shared()
GPT2_TOKENIZER = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
SHARED_CORPUS = SHARED / "corpus"
SHARED_TOKENIZERS = SHARED / "tokenizers"


@pytest.fixture(scope="session")
def sample_tokenizer(tmp_path_factory) -> Path:
    from shardprep.demo_data import build_sample_tokenizer

    return build_sample_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="session")
def gpt2_tokenizer() -> Path:
    if not GPT2_TOKENIZER.is_file():
        pytest.skip(f"shared GPT-2 tokenizer not present at {GPT2_TOKENIZER}")
    return GPT2_TOKENIZER


@pytest.fixture(scope="session")
def shared_corpus() -> Path:
    if not (SHARED_CORPUS / "wikitext2_valid.txt").is_file():
        pytest.skip(f"shared corpus not present in {SHARED_CORPUS}")
    return SHARED_CORPUS
