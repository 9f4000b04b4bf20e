"""The cross-rank critical path (hpcprof.analysis.reduce.critical_path): by hand on small chains, its
total against the replayed step time on every real set, and the drilled stall on it for the injected
time (trace drills: hpcprof.drills.trace_drill)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis.ranks.categories import CAUSE_CATEGORIES
from hpcprof.analysis.reduce import whatif
from hpcprof.analysis.reduce.critical_path import critical_paths


def _chain(colls_rows, steps_rows):
    """colls_rows: (rank, kind, n-th, arrival ms, end ms, cum at arrival, cum at end);
    steps_rows: (rank, start ms, end ms, cum at start, cum at stop); one step (1)."""
    colls = pd.DataFrame([{"rank": r, "group": "g", "kind": k, "name": k, "seq": float("nan"), "step": 1, "idx": i,
                           "arrival_us": a * 1e3, "end_us": e * 1e3,
                           **{f"cum_{c}_arrival_ms": ca.get(c, 0.0) for c in CAUSE_CATEGORIES},
                           **{f"cum_{c}_end_ms": ce.get(c, 0.0) for c in CAUSE_CATEGORIES}}
                          for r, k, i, a, e, ca, ce in colls_rows])
    steps = pd.DataFrame([{"rank": r, "step": 1, "ts_us": a * 1e3, "end_us": b * 1e3,
                           **{f"cum_{c}_start_ms": c0.get(c, 0.0) for c in CAUSE_CATEGORIES},
                           **{f"cum_{c}_stop_ms": c1.get(c, 0.0) for c in CAUSE_CATEGORIES}}
                          for r, a, b, c0, c1 in steps_rows])
    w = whatif.analyze(colls, steps, {0: "n", 1: "n", 2: "n"})
    return w, critical_paths(w.graphs, w.matching.df, steps)


def test_three_ranks_by_hand():
    # c1: all arrive at 10 (segments 10 of CPU work), transfer 1, leave 11. Rank 2 then computes 20 ms
    # on the GPU before c2 (the others 5): arrives at 31, c2 leaves 32; tails 3 (host gap): step 35.
    # Path: rank 0's segment before c1 (10, the first of equal arrivals), c1's transfer (1), rank 2's
    # segment before c2 (20), c2's transfer (1), the tail of the rank ending last (3): 35 = replayed.
    cpu10 = {"cpu_work": 10.0}
    rows, st = [], []
    for r in range(3):
        seg2 = 20.0 if r == 2 else 5.0
        rows += [(r, "ar", 0, 10, 11, cpu10, {"cpu_work": 10.0}),
                 (r, "ar", 1, 11 + seg2, 32, {"cpu_work": 10.0, "gpu_compute": seg2}, {"cpu_work": 10.0, "gpu_compute": seg2})]
        st.append((r, 0, 35, {}, {"cpu_work": 10.0, "gpu_compute": seg2, "host_gap": 3.0}))
    w, cp = _chain(rows, st)
    s = cp.summary()["steps"][0]
    assert s["total_ms"] == pytest.approx(35.0) and s["replayed_ms"] == pytest.approx(35.0) == w.steps["replayed_ms"].iloc[0]
    assert [(x["rank"], x["kind"], round(x["dur_ms"], 6)) for x in s["chain"]] == [
        (0, "segment", 10.0), (None, "collective", 1.0), (2, "segment", 20.0), (None, "collective", 1.0), (0, "tail", 3.0)]
    assert s["by_rank_ms"] == pytest.approx({"2": 20.0, "0": 13.0})
    assert s["by_category_ms"] == pytest.approx({"gpu_compute": 20.0, "cpu_work": 10.0, "host_gap": 3.0, "transfer": 2.0})
    assert [x["start_ms"] for x in s["chain"]] == pytest.approx([0.0, 10.0, 11.0, 31.0, 32.0])


def test_a_late_step_start_is_start_skew():
    # rank 1 enters the step 5 ms after rank 0; both work 10 ms: rank 1 arrives last (15), the
    # all-reduce leaves at 16, tails 4: step 20 = start skew 5 + rank 1's 10 + transfer 1 + tail 4
    rows = [(0, "ar", 0, 10, 16, {"cpu_work": 10.0}, {"cpu_work": 10.0}), (1, "ar", 0, 15, 16, {"cpu_work": 10.0}, {"cpu_work": 10.0})]
    st = [(0, 0, 20, {}, {"cpu_work": 14.0}), (1, 5, 20, {}, {"cpu_work": 14.0})]
    _, cp = _chain(rows, st)
    s = cp.summary()["steps"][0]
    assert [(x["rank"], x["kind"]) for x in s["chain"]] == [(1, "start_skew"), (1, "segment"), (None, "collective"), (0, "tail")]
    assert s["by_category_ms"] == pytest.approx({"cpu_work": 14.0, "start_skew": 5.0, "transfer": 1.0})
    assert s["total_ms"] == pytest.approx(20.0) == s["replayed_ms"]


@pytest.mark.parametrize("name", ["dlrm", "sampled", "dlrm_stall", "sampled_stall"])
def test_path_total_equals_the_replayed_step_on_every_real_set(replayed_sets, name):
    _, s, _ = replayed_sets[name]
    tables = Path(s["outputs"]["tables"])
    links = pd.read_parquet(tables / "critical_path.parquet")
    replayed = pd.read_parquet(tables / "whatif_steps.parquet").set_index("step")["replayed_ms"]
    total = links.groupby("step")["dur_ms"].sum()
    assert sorted(total.index) == sorted(replayed.index)
    pd.testing.assert_series_equal(total.sort_index(), replayed.sort_index(), check_names=False, atol=1e-6, rtol=0)
    # the links follow each other without gap or overlap, from the step's earliest rank start
    for step, g in links.groupby("step"):
        g = g.sort_values("order")
        assert g["start_ms"].iloc[0] == pytest.approx(0.0, abs=1e-9)
        assert (g["start_ms"] + g["dur_ms"]).iloc[:-1].to_numpy() == pytest.approx(g["start_ms"].iloc[1:].to_numpy(), abs=1e-6)
        cats = [c for c in g.columns if c.endswith("_ms") and c not in ("start_ms", "dur_ms")]
        assert g[cats].sum(axis=1).to_numpy() == pytest.approx(g["dur_ms"].to_numpy(), abs=1e-3)
    cp = s["critical_path"]
    assert cp["total_ms_per_step"] == pytest.approx(cp["replayed_ms_per_step"], abs=0.011)
    assert s["outputs"]["plots"]["critical_path"].endswith("critical_path.png") and Path(s["outputs"]["plots"]["critical_path"]).stat().st_size > 0


@pytest.mark.parametrize("drilled,base,rank", [("dlrm_stall", "dlrm", 4), ("sampled_stall", "sampled", 1)])
def test_the_drilled_stall_is_on_the_path_for_the_injected_time(replayed_sets, drilled, base, rank):
    _, s, info = replayed_sets[drilled]
    _, s0, _ = replayed_sets[base]
    step, stall_ms = info["step"], info["stall_ms"]
    links = pd.read_parquet(Path(s["outputs"]["tables"]) / "critical_path.parquet")
    mine = links[(links["step"] == step) & (links["rank"] == rank) & (links["kind"] == "segment")]
    # the stalled segment ends where the drilled rank's collective now starts (one host: one clock)
    arrival_us = float(info["at_us"]) + stall_ms * 1e3
    hit = mine[((mine["start_us"] + mine["dur_ms"] * 1e3) - arrival_us).abs() <= 1.0]
    assert len(hit) == 1, mine[["start_us", "dur_ms", "collective"]]
    assert float(hit["dur_ms"].iloc[0]) >= stall_ms
    # and the path grew by what the drill added to the step
    before = {st["step"]: st["total_ms"] for st in s0["critical_path"]["steps"]}
    after = {st["step"]: st["total_ms"] for st in s["critical_path"]["steps"]}
    print(f"{drilled}: stall {stall_ms} ms, job step +{info['step_increase_ms'][step]:.3f} ms, path +{after[step] - before[step]:.3f} ms, "
          f"stalled segment {float(hit['dur_ms'].iloc[0]):.3f} ms")
    assert after[step] - before[step] == pytest.approx(info["step_increase_ms"][step], rel=0.02, abs=0.05)


def test_the_path_has_its_own_lane_on_the_merged_timeline(replayed_sets):
    from hpcprof.analysis.outputs.timeline.critical_lane import LANE_NAME, LANE_TID

    _, s, info = replayed_sets["dlrm_stall"]
    with gzip.open(s["timeline"]["path"], "rt") as fh:
        doc = json.load(fh)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert all(names.get((r, LANE_TID)) == LANE_NAME for r in range(8))  # a thread at the top of every rank
    lane = sorted((e for e in doc["traceEvents"] if e.get("tid") == LANE_TID and e["ph"] == "X"), key=lambda e: e["ts"])
    step = s["critical_path"]["steps"][0]
    assert len(lane) == step["links"]
    assert lane[0]["ts"] == pytest.approx(0.0, abs=0.01)  # time 0 of the timeline: the earliest rank's step start
    assert sum(e["dur"] for e in lane) / 1e3 == pytest.approx(step["total_ms"], abs=0.02)
    # the slices follow each other; each sits on its rank (a transfer on the rank that arrived last)
    for a, b in zip(lane, lane[1:]):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=0.01)
    stalled = [e for e in lane if e["pid"] == 4 and e["name"].startswith("critical path: rank 4, work before") and e["dur"] / 1e3 >= info["stall_ms"]]
    assert len(stalled) == 1
    # a flow arrow wherever the chain moves to another rank
    moves = sum(1 for a, b in zip(lane, lane[1:]) if a["pid"] != b["pid"])
    assert sum(1 for e in doc["traceEvents"] if e.get("tid") == LANE_TID and e["ph"] == "s") == moves > 0


def test_the_report_and_the_console_show_the_path(replayed_sets):
    # the drilled rank 4 carries the path (the stall is most of the step); a user reads that in the
    # verdict, the report's section (chart, per-step totals, the chain) and the console
    from hpcprof.analysis import console_summary

    _, s, info = replayed_sets["dlrm_stall"]
    cp = s["critical_path"]
    top_rank, top_ms = next(iter(cp["by_rank_ms_per_step"].items()))
    assert top_rank == "4" and top_ms >= info["stall_ms"]
    page = open(s["outputs"]["report"], encoding="utf-8").read()
    verdict = page[page.index("<section id='verdict'"):]
    verdict = verdict[:verdict.index("</section>")]
    assert "<b>Critical path</b> across ranks" in verdict and f"rank 4 {top_ms:.2f}" in verdict.replace(",", "")
    sec = page[page.index("<section id='critical-path'>"):]
    sec = sec[:sec.index("</section>")]
    assert "<img" in sec and "The chain of step" in sec
    assert sec.count("<tr") >= 1 + cp["steps"][0]["links"]  # the per-step totals and every link of the chain
    text = console_summary(s)
    line = next(x for x in text.splitlines() if x.startswith("critical path across ranks"))
    assert f"{cp['total_ms_per_step']:.2f} ms per step" in line and "rank 4" in line
