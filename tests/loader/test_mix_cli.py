"""``shardprep mix SPEC`` and ``shardprep report SPEC``, through the real CLI: the numbers agree with what the
loader reads, and a mixture that cannot be read is refused in one line with the loader's exit code."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from loader_helpers import make_dataset, mixture_sources

from shardprep.loader import ShardDataset, make_dataloader

WEIGHTS = {"big": 0.6, "mid": 0.3, "tiny": 0.1}


@pytest.fixture(scope="module")
def sources(tmp_path_factory, sample_tokenizer) -> dict[str, Path]:
    return mixture_sources(tmp_path_factory.mktemp("mixcli"), sample_tokenizer)


def write_spec(path: Path, sources: dict[str, Path], weights: dict[str, float], **extra) -> Path:
    path.write_text(json.dumps({"sources": [{"name": n, "path": str(sources[n]), "weight": w}
                                            for n, w in weights.items()], **extra}))
    return path


def test_mix_json_matches_what_the_loader_reads(sources, tmp_path):
    spec = write_spec(tmp_path / "mix.json", sources, WEIGHTS)
    got = json.loads(run_cli("mix", spec, "--seq-len", "16", "--tokens", "40K", "--rows", "50", "--seed", "2",
                             "--json").stdout)
    assert got["units"] == 40_000 // 16 and got["tokens"] == 40_000 and got["length_from"] == "total_tokens"
    assert got["quotas"] == [6, 3, 1] and got["bounds"] == {"prefix": 0.75, "window": 1.5}
    rows = {r["name"]: r for r in got["sources"]}
    assert sum(r["taken_tokens"] for r in rows.values()) == got["tokens"]
    assert [rows[n]["share"] for n in WEIGHTS] == list(WEIGHTS.values())
    assert rows["tiny"]["epochs"] > 5 and rows["big"]["epochs"] < 1      # the small source repeats
    ds = ShardDataset(spec, mode="pack", seq_len=16, seed=2, total_tokens=40_000, return_doc_info=True)
    first = [b["source_ids"][0].item() for b, _ in zip(make_dataloader(ds, batch_size=1), range(50))]
    assert got["schedule"] == [ds.mixture.names[i] for i in first]
    assert [rows[n]["taken_units"] for n in WEIGHTS] == ds.mixture.schedule.draws(ds.num_units).tolist()


def test_mix_text_names_every_source_and_the_bound(sources, tmp_path):
    spec = write_spec(tmp_path / "mix.json", sources, WEIGHTS)
    out = run_cli("mix", spec, "--seq-len", "16").stdout
    assert "length from the sources' tokens together" in out and "within 1.5 row(s)" in out
    table = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in [[n] for n in WEIGHTS]}
    assert set(table) == set(WEIGHTS) and table["big"][3] == "0.6000"
    assert re.search(r"^first 32 rows: (big|mid|tiny)( (big|mid|tiny)){31}$", out, re.M)


def test_mix_refuses_in_one_line(sources, tmp_path):
    other = make_dataset(tmp_path / "other", _other_tokenizer(tmp_path), [20], seed=4)
    spec = write_spec(tmp_path / "mix.json", {**sources, "other": other}, {"big": 0.9, "other": 0.1})
    proc = run_cli("mix", spec, "--seq-len", "16", check=3)
    assert proc.stderr.count("\n") == 1 and "mixture source 'other'" in proc.stderr and "tokenized differently" in proc.stderr
    assert run_cli("mix", spec, "--seq-len", "16", "--allow-tokenizer-mismatch").returncode == 0
    bad = write_spec(tmp_path / "bad.json", sources, {"big": 0.9, "mid": 0.0})
    proc = run_cli("mix", bad, check=2)
    assert proc.stderr.count("\n") == 1 and "source 'mid'" in proc.stderr and "weight=0.0 is invalid" in proc.stderr
    assert "not a token count" in run_cli("mix", bad, "--tokens", "lots", check=2).stderr


def _other_tokenizer(tmp_path: Path) -> Path:
    from shardprep.demo_data import build_sample_tokenizer

    return build_sample_tokenizer(tmp_path / "small-tokenizer.json", vocab_size=400)   # different merges and ids


def test_report_page_of_a_spec_shows_the_same_numbers_as_its_json(sources, tmp_path):
    spec = tmp_path / "two.yaml"                  # the page's defaults (rows of 2048): sources of >= 2048 tokens
    spec.write_text("sources:\n" + "".join(f"  - {{name: {n}, path: '{sources[n]}', weight: {w}}}\n"
                                            for n, w in {"big": 0.7, "mid": 0.3}.items()))
    numbers = json.loads(run_cli("report", spec, "--json").stdout)
    assert run_cli("report", spec).stdout.strip() == f"report: {tmp_path / 'two-report.html'}"
    page = (tmp_path / "two-report.html").read_text()
    found = re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page)
    assert {k for k, _ in found} >= {"units", "tokens", "sources.0.tokens", "sources.1.epochs", "bounds.window"}
    for key, value in found:
        want = numbers
        for part in key.split("."):
            want = want[int(part)] if isinstance(want, list) else want[part]
        assert html.unescape(value) == (repr(want) if isinstance(want, float) else str(want)), key
    assert np.isclose(sum(s["share"] for s in numbers["sources"]), 1.0) and "big mid" in page
