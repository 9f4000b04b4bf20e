"""HTA's own test traces (tests/data/hta_tests): every folder HTA itself can analyse is analysed
here without a traceback and with the per-rank numbers equal to HTA's; on the folders HTA raises on
we give a warning or a clear AnalysisError instead.

HTA's reference numbers for a folder are computed once and kept in pytest's cache (keyed by the
folder's file sizes and mtimes and the HTA version), and our analysis uses a parse cache in the same
place, so a second run costs seconds; `pytest --cache-clear` recomputes everything.

Suite time: every folder carried in tests/data runs (the three over LARGE_BYTES, mtia_trace_single_rank
and trace_diff/*, take about 30 s together on 2 cores, HTA included). In a full copy of HTA's tests/data
named by HPCPROF_HTA_TESTS_DIR, the folders over LARGE_BYTES (also df_index_resolver,
negative_queue_length_values_check, ns_resolution_trace: 1.2-3 MB compressed, up to a minute of HTA
each) run only with HPCPROF_FULL_HTA_TESTS=1.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis import AnalysisError, analyze, console_summary

from .conftest import TRACES

HTA_TESTS = Path(os.environ.get("HPCPROF_HTA_TESTS_DIR") or TRACES / "hta_tests")
"""HTA's test traces: the copy in tests/data (without its four largest folders, tests/data/README.md),
or a full copy of HTA's tests/data/ named by HPCPROF_HTA_TESTS_DIR."""
LARGE_BYTES = 1_000_000
OUTPUT_DIR = "analysis"  # what `analyze` writes next to a trace folder when no --out is given


def _folders() -> list[str]:
    """Every folder under hta_tests that holds files, relative; our own output folders (written by
    an analysis run without --out) are not trace folders."""
    if not HTA_TESTS.is_dir():
        return []
    out = []
    for d in sorted(p for p in HTA_TESTS.rglob("*") if p.is_dir()):
        rel = d.relative_to(HTA_TESTS)
        if OUTPUT_DIR in rel.parts or any(part.startswith(".") for part in rel.parts):
            continue
        if any(f.is_file() and f.name != "LICENSE" for f in d.iterdir()):
            out.append(str(rel))
    return out


def _key(folder: Path) -> str:
    files = sorted((f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in folder.iterdir() if f.is_file())
    return f"{importlib.metadata.version('HolisticTraceAnalysis')}|negative durations zeroed|{files}"


def hta_reference(folder: Path) -> dict:
    """HTA's numbers for a folder, or {"error": ...} where HTA itself raises. HTA's analyzers run on
    HTA's own frames with the one correction hpcprof makes (docs/analysis.md, "One correction of
    HTA"), restated here: a duration HTA's rounding of nanosecond times made negative is 0."""
    logging.getLogger("hta").setLevel(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis

    ref: dict = {}
    try:
        ta = TraceAnalysis(trace_dir=str(folder))
        ranks = sorted(ta.t.get_all_traces().keys())
        for frame in ta.t.get_all_traces().values():
            negative = frame["dur"] < 0
            frame.loc[negative, "dur"] = 0
            frame.loc[negative, "end"] = frame.loc[negative, "ts"]
        tb = ta.get_temporal_breakdown(visualize=False)
    except Exception as exc:  # HTA raises all sorts on the awkward inputs: that is what we record
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    ref["ranks"] = [int(r) for r in ranks]
    ref["temporal"] = tb.to_dict(orient="records")
    try:
        ov = ta.get_comm_comp_overlap(visualize=False)
        ref["overlap"] = {int(r): float(v) for r, v in zip(ov["rank"], ov["comp_comm_overlap_pctg"])}
    except Exception as exc:
        ref["overlap_error"] = f"{type(exc).__name__}: {exc}"
    try:
        kt, _ = ta.get_gpu_kernel_breakdown(visualize=False)
        ref["kernel_types"] = {str(k): [float(s), float(p)] for k, s, p in zip(kt["kernel_type"], kt["sum"], kt["percentage"])}
    except Exception as exc:
        ref["kernel_types_error"] = f"{type(exc).__name__}: {exc}"
    ref["idle"] = {}
    for r in ranks:
        try:
            idle, _ = ta.get_idle_time_breakdown(ranks=[r], visualize=False)
            ref["idle"][int(r)] = idle[["stream", "idle_category", "idle_time"]].to_dict(orient="records")
        except Exception as exc:
            ref["idle"][int(r)] = f"{type(exc).__name__}: {exc}"
    return ref


@pytest.fixture(params=_folders() or [None])
def case(request, tmp_path):
    rel = request.param
    assert rel is not None, f"{HTA_TESTS}: no trace folders (tests/data is part of the repository)"
    folder = HTA_TESTS / rel
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    carried = HTA_TESTS.resolve() == (TRACES / "hta_tests").resolve()
    if size > LARGE_BYTES and not carried and not os.environ.get("HPCPROF_FULL_HTA_TESTS"):
        pytest.skip(f"{rel}: {size / 1e6:.1f} MB of traces; set HPCPROF_FULL_HTA_TESTS=1 to check the large folders too")
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    key = f"hpcprof/hta_tests/{rel}"
    stored = cache.get(key, None) if cache is not None else None
    if stored is None or stored.get("key") != _key(folder):
        stored = {"key": _key(folder), "ref": hta_reference(folder)}
        if cache is not None:
            cache.set(key, stored)
    parse_cache = Path(cache.mkdir("hpcprof_parse_cache")) if cache is not None else tmp_path / "parse-cache"
    return rel, folder, stored["ref"], tmp_path / "out", parse_cache


def _ours(folder: Path, out: Path, parse_cache: Path):
    """(summary, None) or (None, AnalysisError); any other exception fails the test (a traceback)."""
    try:
        return analyze(folder, out=out, workers=1, progress=False, cache_dir=parse_cache), None
    except AnalysisError as exc:
        return None, exc


def test_folder(case):
    rel, folder, ref, out, parse_cache = case
    summary, err = _ours(folder, out, parse_cache)
    if "error" in ref:
        # HTA itself raises here: we must say what is wrong instead (a warning or a clear error)
        if err is not None:
            assert str(folder) in str(err) or "trace" in str(err).lower(), err
        else:
            assert summary["warnings"], f"{rel}: HTA raises ({ref['error']}) but we analysed it without a word"
        pytest.skip(f"HTA itself cannot analyse {rel}: {ref['error']}; we {'raised: ' + str(err) if err else 'warned: ' + summary['warnings'][0]}")
    assert err is None, f"{rel}: HTA analyses it, we raised {err}"
    ours = {r["rank"]: r for r in summary["per_rank"]}
    assert sorted(ours) == ref["ranks"]
    for row in ref["temporal"]:
        mine = ours[int(row["rank"])]
        for k_ours, k_hta in (("idle_pct", "idle_time_pctg"), ("compute_pct", "compute_time_pctg"), ("non_compute_pct", "non_compute_time_pctg")):
            if pd.isna(row[k_hta]):
                assert mine[k_ours] is None, (rel, k_ours)
            else:
                assert mine[k_ours] == pytest.approx(row[k_hta], abs=0.1), (rel, k_ours)
    for r, v in (ref.get("overlap") or {}).items():
        if pd.isna(v):
            assert ours[int(r)]["comm_comp_overlap_pct"] is None
        else:
            assert ours[int(r)]["comm_comp_overlap_pct"] == pytest.approx(v, abs=0.1), rel
    if "kernel_types" in ref:
        mine = {k["kernel_type"]: [k["time_us"], k["pct"]] for k in summary["kernel_breakdown"]}
        assert sorted(mine) == sorted(ref["kernel_types"]), rel
        for k, (s, p) in ref["kernel_types"].items():
            assert mine[k] == pytest.approx([s, p], abs=0.01), (rel, k)
    idle_path = out / "tables" / "idle_breakdown.parquet"
    table = pd.read_parquet(idle_path) if idle_path.exists() else pd.DataFrame(columns=["rank", "stream", "idle_category", "idle_time"])
    for r, hta_rows in ref["idle"].items():
        mine = table[table["rank"] == int(r)]
        if isinstance(hta_rows, str):  # HTA raised on this rank's idle breakdown: we must not invent one
            assert mine.empty or mine["idle_time"].sum() == 0, (rel, r, hta_rows)
            continue
        a = pd.DataFrame(hta_rows, columns=["stream", "idle_category", "idle_time"]).sort_values(["stream", "idle_category"]).reset_index(drop=True)
        b = mine.sort_values(["stream", "idle_category"]).reset_index(drop=True)
        assert list(a["idle_category"]) == list(b["idle_category"]), (rel, r)
        assert list(a["idle_time"]) == pytest.approx(list(b["idle_time"])), (rel, r)
    # device-side fields exist wherever HTA measured device activity (the MTIA traces included)
    for row in ref["temporal"]:
        if not pd.isna(row["idle_time_pctg"]):
            assert summary["device"] != "cpu", rel
    if rel.startswith("mtia_"):  # device activity on MTIA streams, no CUDA categories
        assert summary["device"] == "accelerator", rel
    if rel == "mtia_inference_trace":
        assert summary["device_name"] == "ARTEMIS"  # deviceProperties[0].name
    # a rank without a host name is shown as "unknown", never None or "?"
    for r in summary["per_rank"]:
        line = next(ln for ln in console_summary(summary).splitlines() if ln.lstrip().startswith(f"{r['rank']} "))
        assert "None" not in line and " ? " not in line and (r["node"] or "unknown")[:14] in line, line
