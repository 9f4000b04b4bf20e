"""Numbers as a person reads them: rounded to what they mean, with the unit in every column name.

Why: summary.json showed 499.5155750000322 ms and the CSV tables had columns such as `sum` and
`max` (microseconds? milliseconds?). The analysis keeps full precision internally; what people read
(summary.json, tables/*.csv) is rounded here, once, by the unit the name carries:

    *_ms, ms                      0.01 ms (10 us: below the noise of any step or wait we report)
    *_pct, pct, percentage, *_pctg 0.01 percentage points
    *_us, us, (us)                0.001 us (Kineto's own resolution: exact)
    *_s (seconds)                 1 us (0.000001 s); unix times t_start/t_end stay exact to 1 us
    *_bytes, bytes                whole bytes
    *_flops, flops                whole floating-point operations (a count, exact)
    *_mib, *_gib                  0.01 MiB or GiB
    *_tflops, *_tbps              0.001 TFLOP/s, 0.001 TB/s (1 GFLOP/s, 1 GB/s)
    anything else (confidence, shares, ratios, samples/s)  6 significant digits

Parquet tables are not touched: they are the exact machine-readable copy (pandas, the notebook,
`hpcprof.compare`, HTA's own column names for the HTA tables).
"""

from __future__ import annotations

import math
import re

import pandas as pd

CSV_COLUMNS: dict[str, dict[str, str]] = {
    "kernel_breakdown": {"sum": "time_us", "percentage": "pct"},
    "kernels_across_ranks": {"sum": "sum_us", "max": "max_us", "min": "min_us", "mean": "mean_us"},
    "kernels_all": {"sum": "sum_us", "max": "max_us", "min": "min_us", "mean": "mean_us", "std": "std_us"},
    "kernels_top": {"sum (us)": "sum_us", "max (us)": "max_us", "min (us)": "min_us", "mean (us)": "mean_us",
                    "stddev": "stddev_us"},
    "idle_breakdown": {"idle_time": "idle_time_us"},
    "steps_all": {"t_start": "t_start_unix_s", "t_end": "t_end_unix_s"},
    "kernel_launches": {"cpu_duration": "cpu_duration_us", "gpu_duration": "gpu_duration_us",
                        "launch_delay": "launch_delay_us"},
}
UNITLESS = ("ratio", "share", "confidence", "score", "slowdown", "node", "name", "count", "rank", "step")
"""Column-name words of quantities without a unit (fractions, scores, labels, counts)."""
"""Per table, CSV column renames that put the unit in the name (the other columns have one already)."""

_RULES = (
    (re.compile(r"(^|_)ms($|_)|ms_per_step$"), 2),
    (re.compile(r"(^|_)(pct|pctg|percentage|percent)($|_)|_pct_"), 2),
    (re.compile(r"(^|_)us($|_)|\(us\)"), 3),
    (re.compile(r"(^|_)s$"), 6),
    (re.compile(r"(^|_)bytes($|_)"), 0),
    (re.compile(r"(^|_)(tflops|tbps)($|_)"), 3),
    (re.compile(r"(^|_)flops($|_)"), 0),
    (re.compile(r"(^|_)(mib|gib)($|_)"), 2),
)


def decimals_for(name: str) -> int | None:
    """Decimal places for a value named `name`, None when the name carries no unit."""
    low = str(name).lower()
    for pattern, d in _RULES:
        if pattern.search(low):
            return d
    return None


def round_value(v: float, name: str | None) -> float:
    if not isinstance(v, float) or math.isnan(v) or math.isinf(v):
        return v
    d = decimals_for(name) if name is not None else None
    if d is not None:
        r = round(v, d)
        return float(int(r)) if d == 0 else r
    if v == 0:
        return v
    return round(v, max(0, 5 - int(math.floor(math.log10(abs(v))))))  # 6 significant digits


def field_name(key, parent: str | None) -> str | None:
    """The name that gives the unit of the value at `key` inside a dict named `parent`: a dict keyed
    by rank takes its parent's name (clock_offsets_us: {"0": ...}), and so does a dict keyed by
    unit-less words inside a field that has a unit (by_category_ms: {"host_gap": ...} is in ms;
    rounded as a unit-less number it kept 6 significant digits, 2.34375e-05 ms)."""
    k = str(key)
    if k.lstrip("-").isdigit():
        return parent
    if (parent is not None and decimals_for(k) is None and decimals_for(parent) is not None
            and not any(w in k.lower() for w in UNITLESS)):
        return parent
    return key


def round_summary(o, key: str | None = None):
    """Round every float in a clean() summary by the name of the field holding it (a list takes the
    name of its field; see `field_name` for dicts keyed by rank or by category)."""
    if isinstance(o, dict):
        return {k: round_summary(v, field_name(k, key)) for k, v in o.items()}
    if isinstance(o, list):
        return [round_summary(v, key) for v in o]
    if isinstance(o, float):
        return round_value(o, key)
    return o


def csv_frame(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """The CSV version of table `name`: unit in every column name, floats rounded by that unit."""
    d = df.rename(columns=CSV_COLUMNS.get(name, {}))
    for c in d.columns:
        if pd.api.types.is_float_dtype(d[c]):
            places = decimals_for(c)
            if places is not None:
                d[c] = d[c].round(places)
            else:
                d[c] = d[c].map(lambda v: round_value(v, None))
    return d
