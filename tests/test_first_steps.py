"""A newcomer's first steps lead somewhere (issue 23, item 14): the demo shows a parallel job, the report's
axes make sense for a 1-task job, a tokenizer directory that cannot load says why (a hub that cannot be
reached: tests/e2e/test_hub_unreachable.py), a torn sidecar is missing for a reason (and never done), and the docs the README and examples cite exist and agree with the tools.
"""

from __future__ import annotations

import fnmatch
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import run_cli

from shardprep.errors import EXIT_INCOMPLETE, EXIT_TOKENIZER

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"


def test_the_demo_runs_several_tasks_into_several_shards_of_several_samples(tmp_path):
    proc = run_cli("demo", "--workdir", tmp_path / "demo", "--files", "3", "--docs-per-file", "600")
    index = json.loads((tmp_path / "demo" / "shards" / "index.json").read_text())
    assert index["totals"]["shards"] == 3 and index["totals"]["samples"] > 3
    assert "demo: 3 task(s), one per input file" in proc.stdout and "a sample: whole documents" in proc.stdout
    assert "; verified" in proc.stdout
    again = run_cli("demo", "--workdir", tmp_path / "demo", "--files", "3", "--docs-per-file", "600")
    assert "--overwrite" not in again.stderr       # the same plan again: nothing redone, nothing removed


def _tick_labels(html: str) -> dict[str, dict[str, list[str]]]:
    """{figure title: {matplotlib axis id: tick labels}} of the SVG figures inlined in a report page."""
    out = {}
    for m in re.finditer(r'<svg[^>]*aria-label="([^"]*)".*?</svg>', html, re.S):
        root = ET.fromstring(m.group(0).replace("xlink:href", "href"))
        out[m.group(1)] = {g.get("id"): ["".join(t.itertext()).strip() for tick in g
                                         if tick.get("id", "").startswith(("xtick_", "ytick_"))
                                         for t in tick.iter(f"{SVG}text")]
                           for g in root.iter(f"{SVG}g") if g.get("id", "").startswith("matplotlib.axis_")}
    return out


@pytest.mark.requires("report")
def test_the_demo_ends_by_writing_the_report_and_a_one_task_jobs_axes_are_whole_numbers(tmp_path):
    proc = run_cli("demo", "--workdir", tmp_path / "demo", "--files", "1", "--docs-per-file", "50")
    page = tmp_path / "demo" / "shards" / "report.html"
    assert proc.stdout.strip().splitlines()[-1].startswith(f"report: {page} ") and page.is_file()
    assert (tmp_path / "demo" / "shards" / "report-doc-lengths.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ticks = _tick_labels(page.read_text())
    assert ticks["Tokens per shard"]["matplotlib.axis_1"] == ["1"]          # was 0.30 ... 1.65
    assert ticks["Tasks: throughput and duration"]["matplotlib.axis_3"] == ["0"]   # was -0.4 ... 0.4
    assert ticks["Task timeline"]["matplotlib.axis_2"] == ["0"]             # was -0.045 ... 0.045


def test_an_empty_tokenizer_directory_says_what_it_lacks(tmp_path):
    (tmp_path / "a.txt").write_text("one document\n")
    (tmp_path / "tok").mkdir()
    proc = run_cli("plan", "-i", tmp_path / "a.txt", "-o", tmp_path / "o", "-t", tmp_path / "tok",
                   check=EXIT_TOKENIZER)
    assert f"tokenizer directory {tmp_path / 'tok'} holds no tokenizer files: no tokenizer.json" in proc.stderr
    assert "(it is empty)" in proc.stderr and "Couldn't instantiate" not in proc.stderr
    (tmp_path / "tok" / "README.md").write_text("notes")
    proc = run_cli("plan", "-i", tmp_path / "a.txt", "-o", tmp_path / "o", "-t", tmp_path / "tok",
                   check=EXIT_TOKENIZER)
    assert "(it holds: README.md)" in proc.stderr


def test_a_torn_sidecar_is_missing_with_its_reason_and_never_done(tmp_path, sample_tokenizer):
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    for i in range(2):
        (raw / f"{i}.txt").write_text("".join(f"document {i}-{j}\n" for j in range(50)))
    run_cli("submit", "-i", raw, "-o", out, "-t", sample_tokenizer, "--one-file-per-task", "--no-finalize",
            "--no-progress")
    sidecar = out / "shard-00001.json"
    sidecar.write_bytes(sidecar.read_bytes()[:200])                      # torn (a copy cut short, say)
    status = run_cli("status", out, check=EXIT_INCOMPLETE).stdout
    assert "missing:  1  [1]" in status
    assert f"task 1: sidecar unreadable ({sidecar}: not valid JSON" in status
    assert f"next: `shardprep submit --resume {out}` runs the tasks not done" in status
    report = json.loads(run_cli("report", out, "--json").stdout)
    rows = {r["task"]: r for r in report["tasks"]["per_task"]}
    assert rows[0]["status"] == "done" and rows[0]["problem"] is None
    assert rows[1]["status"] == "missing" and "sidecar unreadable" in rows[1]["problem"]   # its log said done
    assert report["progress"]["done"] == 1 and report["progress"]["missing"] == 1
    run_cli("submit", "--resume", out, "--no-progress")                   # the advice works
    assert "index.json: written" in run_cli("status", out).stdout


def test_the_docs_the_readme_and_examples_cite_exist_and_agree_with_the_tools():
    cited = re.compile(r'(docs/[a-z_]+\.md)`?[,:]? \(?["\']([^"\']+)["\']')     # docs/x.md, "Section"
    sources = [REPO / "README.md", *sorted((REPO / "examples").glob("*.py")), *sorted(REPO.glob("shardprep/**/*.py")),
               *sorted((REPO / "docs").glob("*.md"))]
    cites = [(source, doc, " ".join(section.split())) for source in sources
             for doc, section in cited.findall(source.read_text())]
    assert any(source.name == "train_wds.py" and section == "webdataset" for source, _, section in cites)
    for source, doc, section in cites:
        headers = [" ".join(h.lower().split()) for h in re.findall(r"^#+ (.+)$", (REPO / doc).read_text(), re.M)]
        assert any(section.lower() in h for h in headers), f"{source.name} cites {doc}, {section!r}: no such section"
    # README's "Use" block stages what export-hf writes
    readme = (REPO / "README.md").read_text()
    export = re.search(r"shardprep export-hf [^\n]*", readme).group(0)
    written = "part-00000-of-00064." + ("txt" if "--format txt" in export else "jsonl")
    globs = re.findall(r"shardprep stage [^\n]*--include '([^']+)'", readme)
    assert globs and all(fnmatch.fnmatch(written, g) for g in globs), (globs, written)
