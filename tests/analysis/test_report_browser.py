"""report.html in a real browser: headless Chromium (Debian package `chromium`, installed by
scripts/install-debian-deps.sh) renders the demo's report and the DLRM set's report; the DOM it
builds must put the verdict before any table. The screenshots are kept (HPCPROF_SCREENSHOT_DIR, or
the test's temporary folder) for a person to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hpcprof.analysis import analyze

from .conftest import DLRM, require

REPO = Path(__file__).resolve().parents[2]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium (Debian package `chromium`; scripts/install-debian-deps.sh installs it as root)")


def browse(report: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--user-data-dir=" + str(report.parent / ".chromium"), *args, report.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


class Order(HTMLParser):
    """Start tags in document order, with their id and class."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def check_report(report: Path, shots: Path, name: str) -> Order:
    png = shots / f"{name}.png"
    res = browse(report, "--window-size=1400,2600", f"--screenshot={png}")
    assert png.is_file() and png.stat().st_size > 20_000, res.stderr[-2000:]
    from PIL import Image

    with Image.open(png) as im:
        assert im.size == (1400, 2600)
        assert len(im.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 50, "blank screenshot"
    dom = browse(report, "--dump-dom")
    assert dom.returncode == 0 and "<body" in dom.stdout, dom.stderr[-2000:]
    doc = Order()
    doc.feed(dom.stdout)
    first = {}
    for i, (tag, attrs) in enumerate(doc.tags):
        first.setdefault(("id", attrs.get("id")), i)
        first.setdefault(("tag", tag), i)
    assert ("id", "verdict") in first, "no verdict section"
    assert first[("id", "verdict")] < first.get(("tag", "table"), 10**9), "a table comes before the verdict"
    assert first[("id", "verdict")] < first.get(("tag", "img"), 10**9), "a chart comes before the verdict"
    # every table scrolls inside its own box
    for i, (tag, _attrs) in enumerate(doc.tags):
        if tag == "table":
            assert doc.tags[i - 1][0] == "div" and "scroll" in doc.tags[i - 1][1].get("class", "")
    text = " ".join(doc.text)
    assert not re.search(r"\d\.\d+e[+-]\d{2}\b", text), "scientific notation in the report"
    return doc


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = Path(os.environ["HPCPROF_SCREENSHOT_DIR"]) if os.environ.get("HPCPROF_SCREENSHOT_DIR") else tmp_path_factory.mktemp("shots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_dlrm_report_in_chromium(tmp_path, shots, parse_cache):
    out = tmp_path / "an"
    s = analyze(require(DLRM), out=out, progress=False, cache_dir=parse_cache)
    doc = check_report(out / "report.html", shots, "report-dlrm")
    text = " ".join(doc.text)
    if s["stragglers"]:
        assert f"Top straggler: rank {s['stragglers'][0]['rank']}" in text
    else:
        assert "No straggler" in text
    assert "Where to look" in text and "ms from the start of step 10" in text


def test_demo_report_in_chromium(tmp_path, shots):
    """The README's `make demo` command (python -m hpcprof.submit --job jobs/demo-local.toml --analyze)."""
    chromium()
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--job", "jobs/demo-local.toml", "--runs-dir", str(runs),
                           "--name", "demo", "--analyze"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = check_report(runs / "demo" / "analysis" / "report.html", shots, "report-demo")
    text = " ".join(doc.text)
    assert "Run configuration" in text and "resnet18" in text
    # CPU run: the GPU charts are left out with one line each, not drawn empty
    assert "left out: CPU-only run" in text
