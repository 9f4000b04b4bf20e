"""hpcprof runs on both HTA releases and says which one ran.

HTA is published as HolisticTraceAnalysis up to 0.5.0 (what pyproject depends on and this
environment has) and as traceinsight from 0.6 on, with the same `hta` module. Here traceinsight is
installed the way a user would try it beside an environment: `pip install --no-deps --target DIR`,
DIR first on PYTHONPATH (HolisticTraceAnalysis' metadata stays installed below it). In that
environment `python -m hpcprof.analyze` of the DLRM traces must finish, name the release that ran
in summary.json, and give per-rank temporal breakdowns equal to what that same HTA's own
`TraceAnalysis.get_temporal_breakdown` computes on the folder, run in the same environment.
Needs the package registry (pip) once per session.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DLRM, REPO, require

TRACEINSIGHT = "0.6.1"

HTA_TEMPORAL = """
import json, logging, sys
logging.getLogger("hta").setLevel(logging.ERROR)
import hta
from hta.trace_analysis import TraceAnalysis
tb = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print("HTA-RESULT " + json.dumps({"version": hta.__version__, "temporal": tb.to_dict("records")}))
"""
"""HTA's own temporal breakdown of a folder, with the version of the `hta` module that computed it."""


@pytest.fixture(scope="module")
def traceinsight_dir(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("traceinsight")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--target", str(target), f"traceinsight=={TRACEINSIGHT}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"pip could not install traceinsight {TRACEINSIGHT}:\n{proc.stderr[-2000:]}"
    return target


def _env(first: list[Path]) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, first), str(REPO)]))


def _analyze_and_hta(env: dict[str, str], out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    folder = require(DLRM)
    cmd = [sys.executable, "-m", "hpcprof.analyze", str(folder), "--out", str(out), "--quiet", "--no-cache"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    hta = subprocess.run([sys.executable, "-c", HTA_TEMPORAL, str(folder)], cwd=REPO, env=env, capture_output=True, check=False,
                         text=True, timeout=300)
    assert hta.returncode == 0, hta.stderr[-3000:]
    line = next(x for x in hta.stdout.splitlines() if x.startswith("HTA-RESULT "))
    return proc, json.loads(line[len("HTA-RESULT "):])


@pytest.fixture(scope="module", params=["traceinsight", "HolisticTraceAnalysis"])
def release_run(request, tmp_path_factory):
    """(distribution, the analysis' process, its summary or None, HTA's own result) in an
    environment where `hta` comes from that distribution."""
    first = [request.getfixturevalue("traceinsight_dir")] if request.param == "traceinsight" else []
    out = tmp_path_factory.mktemp(f"analysis-{request.param}")
    proc, hta = _analyze_and_hta(_env(first), out)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else None
    return request.param, proc, summary, hta


def test_analyze_exits_0_and_names_the_hta_release_that_ran(release_run):
    dist, proc, summary, hta = release_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    if dist == "traceinsight":
        assert hta["version"] == TRACEINSIGHT  # the environment really imports traceinsight's hta
    else:
        assert hta["version"] == importlib.metadata.version("HolisticTraceAnalysis")
    assert summary["hta"] == f"{dist} {hta['version']}"


def test_per_rank_temporal_breakdown_equals_that_releases_own(release_run):
    _, proc, summary, hta = release_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = {row["rank"]: row for row in hta["temporal"]}
    ours = {row["rank"]: row for row in summary["per_rank"]}
    assert sorted(ours) == sorted(theirs) and len(ours) == 8
    for rank, row in theirs.items():
        assert ours[rank]["idle_pct"] == pytest.approx(row["idle_time_pctg"], abs=0.01), rank
        assert ours[rank]["compute_pct"] == pytest.approx(row["compute_time_pctg"], abs=0.01), rank
        assert ours[rank]["non_compute_pct"] == pytest.approx(row["non_compute_time_pctg"], abs=0.01), rank


def test_a_release_the_fast_loader_does_not_mirror_is_one_warning_line(release_run):
    dist, proc, summary, _ = release_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [w for w in summary["warnings"] if "fast loader" in w]
    if dist == "traceinsight":  # the fast loader mirrors HTA 0.5's parser: 0.6.1's own parser reads the traces
        assert len(said) == 1 and f"traceinsight {TRACEINSIGHT}" in said[0] and "\n" not in said[0]
    else:
        assert said == []


RELEASE = "import sys; sys.path[:0] = sys.argv[1:]; from hpcprof.hta_release import require_hta; print(require_hta())"
"""What hpcprof reads as the installed HTA, with only the folders given on the path (`python -S`: no
site-packages, so no HolisticTraceAnalysis metadata either)."""


def test_traceinsight_alone_is_named_and_no_hta_is_one_line_naming_both(traceinsight_dir):
    alone = subprocess.run([sys.executable, "-S", "-c", RELEASE, str(traceinsight_dir), str(REPO)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout.strip() == f"traceinsight {TRACEINSIGHT}"
    none = subprocess.run([sys.executable, "-S", "-c", RELEASE, str(REPO)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert none.returncode != 0
    last = none.stderr.strip().splitlines()[-1]
    assert "traceinsight" in last and "HolisticTraceAnalysis" in last
