"""The report page in a real headless browser (Debian's chromium): load the file, read every number from
the DOM and check it against ``--json`` (whose numbers tests/test_report.py checks against the files),
and keep a screenshot as an artifact (tests/artifacts/, git-ignored; its path is printed).

chromium is installed with apt-get when missing and we are root (CI); otherwise, or when it cannot
start, the test skips and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from helpers import run_cli
from report_helpers import TRICKY, expected_numbers, lookup, make_job

pytestmark = pytest.mark.slow
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def _install_chromium() -> str | None:
    if shutil.which("chromium") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return shutil.which("chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "chromium"]):
        subprocess.run(cmd, env=env, capture_output=True, timeout=900)
        if cmd[1] == "install" and shutil.which("chromium"):
            break
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def chromium(tmp_path_factory) -> list[str]:
    """The chromium command line (binary + flags), after checking that it starts and renders a file."""
    binary = _install_chromium()
    if binary is None:
        pytest.skip("chromium is not installed and could not be installed (needs root and apt-get: "
                    "apt-get install chromium)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}"]
    probe = tmp_path_factory.mktemp("probe") / "probe.html"
    probe.write_text("<p id=x>ok</p>")
    try:
        proc = subprocess.run([*cmd, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip("chromium did not finish rendering a one-line page within 120 s")
    if proc.returncode != 0 or "ok</p>" not in proc.stdout:
        pytest.skip(f"chromium cannot start here (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return cmd


class Numbers(HTMLParser):
    """Collects every ``data-key`` number with its text, and the names of all elements seen."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: list[dict] = []
        self.tags: set[str] = set()
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if "data-key" in a:
            self._open = {"key": a["data-key"], "value": a["data-value"], "text": ""}
            self.numbers.append(self._open)

    def handle_data(self, data):
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag):
        if tag == "span":
            self._open = None


def _same(dom_value: str, json_value) -> bool:
    if json_value is None:
        return dom_value == ""
    if isinstance(json_value, float):
        return float(dom_value) == json_value          # written with repr(): exact round trip
    return dom_value == str(json_value)


@pytest.mark.requires("report")
def test_page_in_chromium_shows_the_json_numbers(tmp_path, sample_tokenizer, chromium):
    out = make_job(tmp_path, sample_tokenizer, "--chunk-tokens", "1024")
    page = tmp_path / "page" / "report.html"
    run_cli("report", out, "--html", page)
    numbers = orjson.loads(run_cli("report", out, "--json").stdout)
    source = page.read_text()
    for remote in ('src="http', "src='http", 'href="http', "url(http", "@import", "<script", "<link"):
        assert remote not in source, f"the page must not load anything: found {remote!r}"

    proc = subprocess.run([*chromium, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Numbers()
    dom.feed(proc.stdout)
    assert "script" not in dom.tags                                  # the <script> in a document stayed text
    assert numbers["samples"][0]["head"].startswith(TRICKY)         # shown escaped, control character visible
    assert "Markup &lt;script&gt;alert(\"x\")&lt;/script&gt; &amp; a bell \\x07 stays text." in proc.stdout
    keys = {n["key"] for n in dom.numbers}
    assert {"totals.tokens", "totals.documents", "totals.shards", "totals.bytes", "totals.skipped",
            "progress.done", "doc_lengths.median", "shards.tokens.max", "tasks.mtok_per_s.median",
            "skipped.by_reason.malformed_json", "tokenizer.vocab_size", "backends.0.tasks"} <= keys
    assert len(dom.numbers) >= 50
    for n in dom.numbers:                                             # every number on the page = the JSON's
        assert _same(n["value"], lookup(numbers, n["key"])), n
    exp = expected_numbers(out)                                       # ... = the files' (totals, shown as text)
    for k in ("tokens", "documents", "shards", "skipped"):
        shown = next(n["text"] for n in dom.numbers if n["key"] == f"totals.{k}")
        assert shown == f"{exp['totals'][k]:,}", k

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-screenshot.png"
    shot.unlink(missing_ok=True)
    proc = subprocess.run([*chromium, "--window-size=1280,4200", "--hide-scrollbars", f"--screenshot={shot}",
                           page.as_uri()], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    print(f"\nscreenshot of the report page: {shot}")
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[1] == 1280 and pixels.std() > 0.05           # not a blank page
    shutil.copy(page, ARTIFACTS / "report.html")
