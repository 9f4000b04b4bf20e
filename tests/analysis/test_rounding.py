"""Issue 13 item 6: what a person reads is rounded to what it means and says its unit. summary.json:
ms and percentages to 0.01 (no 499.5155750000322); every float column of tables/*.csv names its
unit (or is a fraction, score or label); the Parquet copy keeps full precision."""

from __future__ import annotations

import json

import pandas as pd

from hpcprof.analysis import analyze
from hpcprof.analysis.outputs.rounding import UNITLESS, decimals_for


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
