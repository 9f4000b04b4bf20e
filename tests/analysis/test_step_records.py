"""Issue 23 items 8 and 11: no number from broken step records or from part of the job.

- The job's throughput is the whole job's, whatever traces are analysed: with `--ranks 0`, or with
  rank 1's trace emptied, it used to be rank 0's samples/s labelled as the job's (46.2 instead of
  81.5). The answer known independently: the analysis of the intact run, in the same test.
- Step records that cannot be true (step_s NaN, inf, negative or 0, batch_size 0, step 10^18, a
  file holding another rank's records) are named (file, rank, field) and left out of every
  figure: the figures equal those of the same run with those lines deleted, and the run state no
  longer says "completed" for a run whose rank 1 recorded nothing of its own.

Each test alters a copy of the session's real 2-rank CPU run (tests/conftest.py small_cpu_run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpcprof.analysis import analyze
from hpcprof.rundir.state import run_state


@pytest.fixture(scope="module")
def base(small_cpu_run, tmp_path_factory) -> tuple[Path, dict]:
    """A copy of the real run and its analysis, untouched: the reference figures."""
    _, run = small_cpu_run
    dst = tmp_path_factory.mktemp("base") / "run"
    shutil.copytree(run.root, dst, ignore=shutil.ignore_patterns("analysis"))
    return dst, analyze(dst, out=dst.parent / "out", workers=2, progress=False)


def _copy(base_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(base_run, dst, ignore=shutil.ignore_patterns("analysis"))
    return dst


def _job(summary: dict) -> dict:
    return summary["throughput"]["job"]


@pytest.mark.parametrize("how", ["--ranks 0", "rank 1's trace empty", "rank 1's trace truncated"])
def test_the_job_throughput_is_the_whole_jobs_whatever_traces_are_analysed(base, tmp_path, how):
    base_run, ref = base
    run = _copy(base_run, tmp_path)
    trace = run / "traces" / "rank-1.pt.trace.json.gz"
    if how == "rank 1's trace empty":
        trace.write_bytes(b"")
    elif how == "rank 1's trace truncated":
        trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    s = analyze(run, workers=2, progress=False, ranks=[0] if how == "--ranks 0" else None)
    assert s["ranks_analyzed"] == [0]
    assert _job(s)["median_samples_per_s"] == _job(ref)["median_samples_per_s"], (_job(s), _job(ref))
    assert _job(s)["ci95_samples_per_s"] == _job(ref)["ci95_samples_per_s"]
    assert _job(s)["ranks"] == [0, 1] and _job(s)["missing_ranks"] == []
    # one rank's samples/s is about half the job's (2 ranks): it must not be what is reported
    r0 = next(r for r in ref["throughput"]["per_rank"] if r["rank"] == 0)["median_samples_per_s"]
    assert _job(s)["median_samples_per_s"] > 1.5 * r0


def _records(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def _write(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_records_that_cannot_be_true_are_named_and_left_out(base, tmp_path):
    base_run, _ = base
    bad_run = _copy(base_run, tmp_path / "bad")
    steps = _records(bad_run / "steps" / "rank-1.jsonl")
    assert len(steps) >= 12
    # copies of real steady records, each with one field that cannot be true, written after the real ones
    spoiled = [("step_s", float("nan")), ("step_s", float("inf")), ("step_s", -0.2), ("step_s", 0.0),
               ("batch_size", 0), ("step", 10**18), ("rank", 0), ("forward_s", float("-inf"))]
    extra = [dict(steps[6 + i % 4], **{key: value}) for i, (key, value) in enumerate(spoiled)]
    with (bad_run / "steps" / "rank-1.jsonl").open("a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in extra))  # NaN, Infinity as Python writes them
    bad = analyze(bad_run, workers=2, progress=False)
    clean = base[1]  # the same run without those records: what the figures must be
    warned = [w for w in bad["warnings"] if "steps/rank-1.jsonl" in w]
    assert len(warned) == 1, bad["warnings"]
    for field in ("step_s", "batch_size", "step (", "rank (", "forward_s"):
        assert field in warned[0], (field, warned[0])
    assert f"{len(spoiled)} record(s) excluded" in warned[0], warned[0]
    assert "rank 1" in warned[0]
    assert bad["throughput"] == clean["throughput"]
    assert bad["step_time"] == clean["step_time"]
    lo, hi = _job(bad)["ci95_samples_per_s"]
    assert 0 < lo <= _job(bad)["median_samples_per_s"] <= hi


def test_a_file_of_another_rank_is_not_counted_as_that_rank(base, tmp_path):
    """rank-1.jsonl replaced by a copy of rank-0.jsonl (a duplicated rank): named, rank 1 has no
    usable record, the job has no throughput (one rank's is not the job's), the run is not complete."""
    base_run, ref = base
    run = _copy(base_run, tmp_path)
    shutil.copy(run / "steps" / "rank-0.jsonl", run / "steps" / "rank-1.jsonl")
    s = analyze(run, workers=2, progress=False)
    assert any("steps/rank-1.jsonl" in w and "rank (0" in w for w in s["warnings"]), s["warnings"]
    assert any("no job throughput" in w and "rank(s) 1" in w for w in s["warnings"]), s["warnings"]
    assert _job(s)["median_samples_per_s"] is None and _job(s)["missing_ranks"] == [1]
    per_rank = {r["rank"]: r["median_samples_per_s"] for r in s["throughput"]["per_rank"]}
    assert per_rank == {0: next(r for r in ref["throughput"]["per_rank"] if r["rank"] == 0)["median_samples_per_s"]}
    assert run_state(run).state != "completed"
    assert s["run_state"]["state"] != "completed"


def test_an_absurd_step_number_does_not_complete_a_run(base, tmp_path):
    base_run, _ = base
    run = _copy(base_run, tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m.pop("outcome", None)
    (run / "manifest.json").write_text(json.dumps(m))
    for r in (0, 1):  # both ranks stopped after 3 steps, then one absurd record each
        recs = _records(run / "steps" / f"rank-{r}.jsonl")[:3]
        _write(run / "steps" / f"rank-{r}.jsonl", recs + [dict(recs[-1], step=10**18)])
    st = run_state(run)
    assert st.state != "completed" and st.steps_done == 3, st


def test_step_times_no_run_could_take_are_named_and_left_out(base, tmp_path):
    """Issue 37 item 5: a step_s of 1e300 made the job's interval 0.0-650 samples/s, unflagged.
    Times beyond a day (a step's, a region's, the GPU's) are named and left out: the figures equal
    those of the same run without those records."""
    base_run, clean = base
    run = _copy(base_run, tmp_path)
    steps = _records(run / "steps" / "rank-1.jsonl")
    spoiled = [("step_s", 1e300), ("step_s", 86_401.0), ("backward_s", 1e300), ("gpu_ms", 1e300),
               ("regions", {"attention": 1e300})]
    extra = [dict(steps[6 + i % 4], **{key: value}) for i, (key, value) in enumerate(spoiled)]
    with (run / "steps" / "rank-1.jsonl").open("a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in extra))
    s = analyze(run, workers=2, progress=False)
    warned = [w for w in s["warnings"] if "steps/rank-1.jsonl" in w]
    assert len(warned) == 1 and f"{len(spoiled)} record(s) excluded" in warned[0], s["warnings"]
    for field in ("step_s", "backward_s", "gpu_ms", "regions"):
        assert field in warned[0], (field, warned[0])
    assert s["throughput"] == clean["throughput"]
    assert s["step_time"] == clean["step_time"]
