"""Issue 23 items 10, 15, 16 and 17 (analysis side): inputs and options that make no sense are one
line saying what to do, our own outputs are never read as inputs, and nothing stale passes for
the current analysis.

On a copy of the real 8-rank DLRM trace set (8 x V100, profiled step 10)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import one_line_error

from hpcprof.analysis import analyze

from .conftest import REPO


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcprof.analyze", *args, "--quiet"], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ------------------------------------------------------------------ item 10: outputs are never inputs
def test_an_output_folder_that_is_the_trace_folder_is_refused(dlrm_copy, tmp_path):
    before = _listing(dlrm_copy)
    one_line_error(_cli(str(dlrm_copy), "--out", str(dlrm_copy)), "--out", "read from")
    assert _listing(dlrm_copy) == before, "something was written into the trace folder"
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    for p in dlrm_copy.iterdir():
        shutil.copy(p, run / "traces" / p.name)
    one_line_error(_cli(str(run), "--out", str(run / "traces")), "--out", "read from")
    one_line_error(_cli(str(run), "--out", str(run / "traces" / ".." / "traces")), "--out")


def test_our_merged_timeline_in_a_trace_folder_is_never_taken_for_a_rank(dlrm_copy, tmp_path):
    ref = analyze(dlrm_copy, out=tmp_path / "ref", progress=False)
    # what an older version left when told --out <trace folder>: its outputs beside the traces
    shutil.copy(tmp_path / "ref" / "timeline.pt.trace.json.gz", dlrm_copy / "timeline.pt.trace.json.gz")
    s = analyze(dlrm_copy, out=tmp_path / "again", progress=False)
    assert not [w for w in s["warnings"] if "timeline.pt.trace.json.gz" in w], s["warnings"]
    assert s["ranks_analyzed"] == ref["ranks_analyzed"] == list(range(8))
    assert [r["file"] for r in s["per_rank"]] == [r["file"] for r in ref["per_rank"]]


# ------------------------------------------------------------------ item 15: option values
@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_timeline_budget_below_one_is_refused(dlrm_copy, tmp_path, value):
    one_line_error(_cli(str(dlrm_copy), "--out", str(tmp_path / "o"), "--timeline-max-events", value), "--timeline-max-events")


def test_a_timeline_budget_it_cannot_keep_is_said(dlrm_copy, tmp_path):
    s = analyze(dlrm_copy, out=tmp_path / "o", progress=False, timeline_max_events=10)
    tl = s["timeline"]
    assert tl["max_events"] == 10 and tl["events"] > 10
    assert any("--timeline-max-events 10" in w and f"{tl['events']:,}" in w for w in s["warnings"]), s["warnings"]


def test_a_manifest_world_size_that_is_not_a_number_is_named_and_ignored(dlrm_copy, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(dlrm_copy, run / "traces")
    (run / "manifest.json").write_text(json.dumps({"name": "run", "world_size": "two", "executor": "local"}))
    s = analyze(run, progress=False)
    assert s["ranks_analyzed"] == list(range(8)), s["warnings"]
    assert any("world_size" in w and "'two'" in w for w in s["warnings"]), s["warnings"]
    assert not [w for w in s["warnings"] if "differs from the job's" in w]


def test_a_clock_skew_drill_on_a_node_of_no_rank_is_refused_or_said(dlrm_copy, tmp_path):
    p = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--job", str(REPO / "jobs" / "demo-local.toml"),
                        "--cluster", "local", "--inject-clock-skew", "nohost:5", "--runs-dir", str(tmp_path / "runs"),
                        "--name", "skew"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("hpcprof.submit: error")]
    assert len(err) == 1 and "'nohost'" in err[0] and "--inject-clock-skew" in err[0], p.stderr
    assert not (tmp_path / "runs" / "skew").exists()
    # a SLURM run cannot be checked before it runs: the analysis says the drill shifted nothing
    run = tmp_path / "run"
    shutil.copytree(dlrm_copy, run / "traces")
    (run / "manifest.json").write_text(json.dumps({"name": "run", "world_size": 8, "executor": "sbatch",
                                                   "drills": {"clock_skew": {"node": "nohost", "ms": 5.0}}}))
    s = analyze(run, progress=False)
    assert any("clock-skew drill" in w and "'nohost'" in w for w in s["warnings"]), s["warnings"]


# ------------------------------------------------------------------ item 16: messages that mislead
@pytest.mark.parametrize("ranks,needle", [(["-3"], "--ranks -3"), (["99"], "ranks found: 0, 1, 2, 3, 4, 5, 6, 7")])
def test_ranks_that_do_not_exist_are_one_line_about_ranks(dlrm_copy, tmp_path, ranks, needle):
    line = one_line_error(_cli(str(dlrm_copy), "--out", str(tmp_path / "o"), "--ranks", *ranks), needle)
    assert "GPU" not in line and "kernel" not in line


@pytest.mark.parametrize("content", ["[]", "42", "\"text\""])
def test_a_summary_json_that_is_not_an_object_is_replaced_by_a_new_analysis(dlrm_copy, tmp_path, content):
    out = tmp_path / "o"
    out.mkdir()
    (out / "summary.json").write_text(content)
    p = _cli(str(dlrm_copy), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert isinstance(json.loads((out / "summary.json").read_text()), dict)


@pytest.mark.parametrize("outcome", [{"state": "interrupted", "signal": "SIGTERM"}, None])
def test_a_dead_run_without_traces_is_not_analyse_again_later(tmp_path, outcome):
    """An interrupted run, and one whose ranks died without a word (a full disk): nothing of them
    runs, so no trace will ever come; the message must not send the user back later."""
    run = tmp_path / "run"
    for d in ("traces", "steps", "logs"):
        (run / d).mkdir(parents=True)
    m = {"name": "run", "executor": "local", "job_id": "4242", "world_size": 2, "spec": {"train": {"steps": 50}},
         "created": "2026-01-01T00:00:00+0000", "launcher_host": os.uname().nodename, "launcher_pid": 2**22 + 17,
         "ranks": [{"rank": r, "node": os.uname().nodename, "pid": 2**22 + r} for r in (0, 1)]}
    if outcome:
        m["outcome"] = dict(outcome, time="2026-01-01T00:01:00+0000")
    (run / "manifest.json").write_text(json.dumps(m))
    for r in (0, 1):
        p = run / "steps" / f"rank-{r}.jsonl"
        p.write_text("".join(json.dumps({"step": s, "rank": r, "step_s": 0.1, "batch_size": 8}) + "\n" for s in range(3)))
        os.utime(p, (1e9, 1e9))
    line = one_line_error(_cli(str(run)), "no trace", "none will come")
    assert "again later" not in line
    assert ("interrupted" in line) if outcome else ("stopped" in line)


# ------------------------------------------------------------------ item 17: nothing stale
def test_a_timeline_not_written_this_time_does_not_stay_from_the_last_analysis(dlrm_copy, tmp_path):
    out = tmp_path / "o"
    first = analyze(dlrm_copy, out=out, progress=False, timeline_steps=[10])
    assert (out / "timeline.pt.trace.json.gz").is_file() and first["timeline"]["steps"] == [10]
    second = analyze(dlrm_copy, out=out, progress=False, timeline_steps=[999])
    assert "error" in second["timeline"]
    assert not (out / "timeline.pt.trace.json.gz").exists(), "the previous analysis' timeline stayed"
    assert "No merged timeline" in (out / "report.html").read_text()
    assert "timeline.pt.trace.json.gz" not in second["outputs"]["files"]


@pytest.mark.parametrize("rank,message", [
    ("9", "HPCPROF_RANK=9: rank 9 is not in this analysis; analysed ranks: 0, 1, 2, 3, 4, 5, 6, 7"),
    ("five", "HPCPROF_RANK='five' is not a rank number; give a rank of the analysis, or -1"),
])
def test_the_notebook_names_a_rank_that_is_not_in_the_analysis(dlrm_copy, tmp_path, rank, message):
    """A rank the analysis does not hold gave a bare KeyError: 9; a rank that is not a number, a
    bare "invalid literal for int()"."""
    nb = REPO / "analysis" / "post_job.ipynb"
    env = {**os.environ, "MPLBACKEND": "Agg", "HPCPROF_RUN_DIR": str(dlrm_copy), "HPCPROF_RANK": rank}
    p = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", str(nb),
                        "--output-dir", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr[-3000:]
    assert "KeyError" not in p.stderr and "invalid literal" not in p.stderr


# ------------------------------------------------------------------ issue 37 items 14, 15: the manifest
def _run_of(dlrm: Path, root: Path, manifest: dict) -> Path:
    """A run directory holding the DLRM traces as its baseline (traces/) and `manifest`."""
    shutil.copytree(dlrm, root / "traces")
    (root / "manifest.json").write_text(json.dumps({"name": "run", "world_size": 8, "executor": "local", **manifest}))
    return root


BASELINE = {"index": 0, "kind": "baseline", "steps": [8, 10], "folder": "traces"}


@pytest.mark.parametrize("case", ["a rank died in the capture", "a capture numbered -1"])
def test_a_capture_that_cannot_be_analysed_is_named_and_the_rest_is_analysed(dlrm_copy, tmp_path, parse_cache, case):
    """A triggered run where a rank died during capture 1 (its folder traces/capture-1 never
    written), or whose manifest numbers a capture -1: `analyze` failed whole with a
    FileNotFoundError, the baseline not analysed either."""
    captures = [BASELINE, {"index": 1, "kind": "rank", "rank": 3, "steps": [20, 22], "folder": "traces/capture-1"}]
    if case == "a capture numbered -1":
        captures.append({"index": -1, "kind": "rank", "rank": 5, "steps": [30, 32], "folder": "traces/capture--1"})
    run = _run_of(dlrm_copy, tmp_path / "run", {"captures": captures})
    if case == "a capture numbered -1":
        shutil.copytree(dlrm_copy, run / "traces" / "capture-1")
    p = _cli(str(run), "--cache-dir", str(parse_cache))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    s = json.loads((run / "analysis" / "summary.json").read_text())
    assert s["ranks_analyzed"] == list(range(8))  # the baseline
    by_index = {c["index"]: c for c in s["captures"]}
    if case == "a rank died in the capture":
        said = [w for w in s["warnings"] if "capture 1" in w]
        assert len(said) == 1 and "traces/capture-1" in said[0] and "\n" not in said[0], s["warnings"]
        assert sorted(by_index) == [0, 1] and by_index[1]["error"] and by_index[1]["report"] is None
    else:
        said = [w for w in s["warnings"] if "-1" in w]
        assert len(said) == 1 and "manifest.json" in said[0] and "captures" in said[0], s["warnings"]
        assert sorted(by_index) == [0, 1] and by_index[1]["error"] is None  # capture 1 analysed
        assert (run / "analysis" / "capture-1" / "summary.json").is_file()


def test_malformed_rank_entries_of_the_manifest_are_named_and_the_others_used(dlrm_copy, tmp_path, parse_cache):
    """Issue 37 item 15: a manifest rank entry `"rank": "a"` killed the whole analysis (int('a'))."""
    entries = [{"rank": r, "node": f"node{r}"} for r in range(8)]
    entries[5] = {"rank": "a", "node": "node5"}
    entries[6] = {"rank": None, "node": "node6"}
    entries += ["junk", {"rank": True, "node": "nodeX"}, {"rank": 2.5, "node": "nodeY"}]
    run = _run_of(dlrm_copy, tmp_path / "run", {"ranks": entries})
    s = analyze(run, progress=False, cache_dir=parse_cache)
    assert s["ranks_analyzed"] == list(range(8))
    nodes = {r["rank"]: r["node"] for r in s["per_rank"]}
    assert nodes == {r: (None if r in (5, 6) else f"node{r}") for r in range(8)}, nodes  # DLRM's traces name no host
    said = [w for w in s["warnings"] if "manifest.json" in w and "ranks" in w]
    assert len(said) == 1, s["warnings"]
    for bad in ("'a'", "None", "'junk'", "True", "2.5"):
        assert bad in said[0], (bad, said[0])
