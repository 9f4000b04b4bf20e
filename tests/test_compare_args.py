"""Issue 37 items 6, 17 and 19: what compare makes of its arguments. One run given twice (also as a
symlink or as its analysis folder) is one run; a noise.json that is not one is a one-line error
naming the file and the field; an explicit arm of two specs is named and is no calibration; a
failed replicate is not listed as measured; and compare writes nothing into the folders it is
given (trace folders are analysed under --out)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from handmade_runs import SPEC, make_run, make_set

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data"


def _compare(*args, out=None):
    extra = ["--out", str(out)] if out is not None else []
    return subprocess.run([sys.executable, "-m", "hpcprof.compare", *map(str, args), *extra, "--quiet", "--no-op-deltas"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ item 6
def test_the_same_run_given_twice_is_nothing_to_compare(tmp_path):
    """`compare runs/A-r1 runs/A-r1` made a two-run arm of one run (SD 0.0% "from replicates") and
    wrote it as a noise.json calibration. Given twice, through a symlink, or as the run directory and
    its analysis folder, it is one run: nothing to compare, and nothing written."""
    ana = make_run(tmp_path, "A-r1", 100.0, 0, group="A", count=3)
    run = ana.parent
    (tmp_path / "link").symlink_to(run)
    for args in ((ana, ana), (ana, tmp_path / "link" / "analysis"), (run, ana), (f"{ana}/", tmp_path / "." / "A-r1" / "analysis")):
        out = tmp_path / "c"
        p = _compare(*args, out=out)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "nothing to compare" in lines[0] and "one run" in lines[0], lines
        assert not (out / "noise.json").exists() and not (out / "compare.json").exists()


def test_a_run_given_twice_among_others_counts_once(tmp_path):
    a1 = make_run(tmp_path, "a1", 100.0, 0)
    b1 = make_run(tmp_path, "b1", 100.0, 5)
    p = _compare(a1, b1, tmp_path / "a1" / "analysis", out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert [r["label"] for r in res["runs"]] == ["a1", "b1"]
    assert any("given twice" in w and "counted once" in w for w in res["warnings"]), res["warnings"]


def test_one_run_in_two_explicit_arms_is_refused(tmp_path):
    a1, a2, b1 = make_run(tmp_path, "a1", 100.0, 0), make_run(tmp_path, "a2", 100.0, 5), make_run(tmp_path, "b1", 90.0, 10)
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", "--group", f"x={a1},{a2}", "--group", f"y={b1},{a1.parent}",
                        "--out", str(tmp_path / "c"), "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert str(a1.parent) in p.stderr and "x" in p.stderr and "y" in p.stderr and "one arm" in p.stderr


# ------------------------------------------------------------------ item 17
def _noise_doc(entry) -> str:
    return json.dumps({"metrics": {"samples_per_s": entry, "step_ms": entry}})


BAD_NOISE = {
    "deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "huge-sd": (_noise_doc({"sd": 1e308, "df": 4}), "metrics.samples_per_s.sd"),
    "huge-int-sd": ('{"metrics": {"step_ms": {"sd": 1' + "0" * 400 + ', "df": 4}}}', "metrics.step_ms.sd"),
    "bool-sd": (_noise_doc({"sd": True, "df": 4}), "metrics.samples_per_s.sd"),
    "text-sd": (_noise_doc({"sd": "0.04", "df": 4}), "metrics.samples_per_s.sd"),
    "bool-df": (_noise_doc({"sd": 0.04, "df": True}), "metrics.samples_per_s.df"),
    "list-metrics": (json.dumps({"metrics": [1, 2]}), "metrics"),
    "bool-drift": (_noise_doc({"sd": 0.04, "df": 4, "drift": {"sd": False, "df": 2}}), "metrics.samples_per_s.drift.sd"),
}


@pytest.mark.parametrize("case", sorted(BAD_NOISE))
def test_a_noise_file_that_is_not_one_is_one_line_naming_file_and_field(tmp_path, case):
    """100,000-deep nesting ended "comparison failed (RecursionError)", sd 1e308 in OverflowError,
    and `"sd": true` was an SD of 171.8%. Each is one line naming the file and the field, before
    anything is analysed or written."""
    text, field = BAD_NOISE[case]
    cal = tmp_path / "cal" / "noise.json"
    cal.parent.mkdir()
    cal.write_text(text)
    a, b = make_run(tmp_path, "a", 100.0, 0), make_run(tmp_path, "b", 90.0, 0)
    p = _compare(a, b, "--noise", cal.parent, out=tmp_path / "c")
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, lines
    assert str(cal) in lines[0] and "not a readable noise.json" in lines[0] and field in lines[0], lines
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------ item 19
def test_an_explicit_arm_of_two_specs_is_named_and_not_written_as_noise(tmp_path):
    """`--group X=` mixing two specs gave no word and a noise.json measured across them."""
    other = {**SPEC, "data": {"batch_size": 64}}
    x1, x2 = make_run(tmp_path, "x1", 100.0, 0), make_run(tmp_path, "x2", 60.0, 5, spec=other)
    y1, y2 = make_run(tmp_path, "y1", 100.0, 10), make_run(tmp_path, "y2", 101.0, 15)
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", "--group", f"X={x1},{x2}", "--group", f"Y={y1},{y2}",
                        "--out", str(tmp_path / "c"), "--quiet", "--no-op-deltas"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "warning: X: its runs ran 2 different specs" in p.stdout and "not written to noise.json" in p.stdout, p.stdout
    cal = json.loads((tmp_path / "c" / "noise.json").read_text())
    assert [a["label"] for a in cal["arms"]] == ["Y"] and cal["metrics"]["step_ms"]["df"] == 1


def test_noise_json_lists_only_the_runs_it_measured(tmp_path):
    """A failed replicate is left out of the statistics; noise.json listed it among the arm's runs."""
    runs = make_set(tmp_path, "a", [100.0, 101.0], [0, 5])
    runs.append(make_run(tmp_path, "a-r3", 50.0, 10, group="a", index=3, count=3, state="failed"))
    p = _compare(*runs, out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    cal = json.loads((tmp_path / "c" / "noise.json").read_text())
    assert cal["arms"] == [{"label": "a", "runs": ["a-r1", "a-r2"]}]


def test_comparing_a_runs_trace_folder_writes_nothing_into_it(tmp_path):
    """`compare runs/x/traces runs/y/traces` wrote analysis/ inside each traces/ folder. Trace
    folders the user gives are analysed under --out (DIR/analyses/), writable or not."""
    x, y = tmp_path / "x" / "traces", tmp_path / "y" / "traces"
    shutil.copytree(TRACES / "kineto_resnet50_v100_workers0", x)
    shutil.copytree(TRACES / "kineto_resnet50_v100_workers4", y)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    p = _compare(x, y, out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "c"))
    assert after == before
    res = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert all(Path(r["analysis"]).parent == tmp_path / "c" / "analyses" for r in res["runs"])
