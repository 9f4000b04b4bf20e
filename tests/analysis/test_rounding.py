"""Issue 13 item 6: what a person reads is rounded to what it means and says its unit. summary.json:
ms and percentages to 0.01 (no 499.5155750000322); every float column of tables/*.csv names its
unit (or is a fraction, score or label); the Parquet copy keeps full precision."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from hpcprof.analysis import analyze
from hpcprof.analysis.outputs.htmlparts import json_text
from hpcprof.analysis.outputs.rounding import UNITLESS, decimals_for, round_summary


def _floats(o, key=None):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _floats(v, k if not str(k).isdigit() else key)
    elif isinstance(o, list):
        for v in o:
            yield from _floats(v, key)
    elif isinstance(o, float):
        yield key, o


def test_summary_floats_are_rounded_by_unit(dlrm_copy, tmp_path, parse_cache):
    analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    seen = {"ms": 0, "pct": 0}
    for key, v in _floats(s):
        d = decimals_for(key)
        if d is not None:
            assert round(v, d) == v, (key, v)
            if d == 2:
                seen["ms" if "ms" in key else "pct"] += 1
        else:  # no unit: 6 significant digits at most
            assert len(f"{v:.15g}".replace("-", "").replace(".", "").lstrip("0")) <= 6, (key, v)
    assert seen["ms"] > 5 and seen["pct"] > 5, seen


def test_every_csv_float_column_names_its_unit_and_parquet_stays_exact(dlrm_copy, tmp_path, parse_cache):
    analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    tables = tmp_path / "out" / "tables"
    checked = 0
    for csv in sorted(tables.glob("*.csv")):
        if csv.stat().st_size <= 1:
            continue
        df = pd.read_csv(csv)
        for c in df.columns:
            if pd.api.types.is_float_dtype(df[c]) and df[c].notna().any():
                assert decimals_for(c) is not None or any(w in c for w in UNITLESS), f"{csv.name}: column {c!r} has no unit"
                checked += 1
    assert checked > 20
    kb = pd.read_csv(tables / "kernel_breakdown.csv")
    assert list(kb.columns[:3]) == ["kernel_type", "time_us", "pct"]
    top = pd.read_csv(tables / "kernels_top.csv")
    assert {"sum_us", "max_us", "min_us", "mean_us"} <= set(top.columns)
    # Parquet: HTA's names and every digit (the HTA equality tests read it)
    assert "sum (us)" in pd.read_parquet(tables / "kernels_top.parquet").columns


def test_a_dict_of_categories_inside_a_field_with_a_unit_is_rounded_by_that_unit():
    """A CI run's demo report showed `2.34375e-05`: critical_path.by_category_ms's values are keyed by
    category (host_gap, ...), names without a unit, so they kept 6 significant digits instead of 0.01 ms."""
    s = {"by_category_ms": {"host_gap": 2.34375e-05, "cpu_work": 12.345678},
         "cause_excess_ms_per_step_by_rank": {"1": {"data_loading": 0.0161234, "confidence": 0.123456789}},
         "clock_offsets_us": {"0": 1.23456789}, "throughput": {"level": 0.123456789}}
    assert round_summary(s) == {
        "by_category_ms": {"host_gap": 0.0, "cpu_work": 12.35},
        "cause_excess_ms_per_step_by_rank": {"1": {"data_loading": 0.02, "confidence": 0.123457}},
        "clock_offsets_us": {"0": 1.235}, "throughput": {"level": 0.123457}}


def test_the_reports_raw_summary_has_no_scientific_notation_and_parses_back_to_the_same_values():
    s = {"tiny_share": 2.34375e-05, "huge": 1e20, "neg": -3.5e-9, "missing": float("nan"),
         "list": [1, True, None, 'quote " and <tag>'], "empty": {}, "none": [], "nested": {"x": [0.1, {"y": 5e-7}]}}
    text = json_text(s)
    assert not re.search(r"\d[eE][+-]?\d", text), text
    back = json.loads(text)
    assert back["missing"] != back["missing"] and isinstance(back["huge"], float)
    del back["missing"], s["missing"]
    assert back == s
    assert json_text({"a": [1.5]}) == json.dumps({"a": [1.5]}, indent=1)


def test_the_reports_raw_summary_text_is_json_dumps_where_no_float_has_an_exponent():
    """Every value json_text does not write itself (str, int, bool, None, an IntEnum, other objects by
    str) is json.dumps' text, and its floats too where none needs an exponent, numpy's included."""
    import enum

    import numpy as np

    class Level(enum.IntEnum):
        HIGH = 3

    s = {"text": 'ünï "quoted"\n<tag>', "n": 2**70, "neg": -7, "f": [1.5, -0.0, 123456.789, 0.1], "flags": [True, False, None],
         "tuple": (1, "a"), "keys": {1: 2, "x": {}}, "ints": [5, 0],
         "enum": Level.HIGH, "other": Path("/a/b"), "np": [np.float64(0.25), np.int64(4)]}
    assert json_text(s) == json.dumps(s, indent=1, default=str)
