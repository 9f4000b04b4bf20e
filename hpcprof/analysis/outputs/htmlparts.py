"""HTML building blocks of the report: escaping, number formats, human column names, tables.

Why a module of its own: the report's layout (report.py) should read as the report reads, while
the rules every table obeys live once here: every value from a trace or a user is escaped; numbers
never use scientific notation; columns get human names with units; long kernel names are shortened
with the full name on hover; wide tables scroll inside their box.
"""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pandas as pd

# raw column name -> human name (units in parentheses); others are derived by `human`
NAMES = {
    "rank": "Rank", "node": "Node", "file": "Trace file", "step": "Step", "name": "Name",
    "step_time_ms": "Step time, median (ms)", "trace_step_time_ms": "Profiled step time, median (ms)",
    "profiled_steps": "Profiled steps", "idle_pct": "GPU idle, HTA (%)", "compute_pct": "GPU compute, HTA (%)",
    "non_compute_pct": "GPU non-compute, HTA (%)", "comm_comp_overlap_pct": "Communication hidden by compute, HTA (%)",
    "compute_pct_hpcprof": "GPU compute, hpcprof (%)", "non_compute_pct_hpcprof": "GPU non-compute, hpcprof (%)",
    "comm_comp_overlap_pct_hpcprof": "Communication hidden by compute, hpcprof (%)",
    "comm_kernel_pct_hta": "Communication, HTA (% of kernel time)", "comm_kernel_pct": "Communication, hpcprof (% of kernel time)",
    "comm_wait_ms_per_step": "In collectives: waiting (ms/step)", "comm_transfer_ms_per_step": "In collectives: transfer (ms/step)",
    "in_collectives_ms_per_step": "In collectives (ms/step)", "waited_ms": "Others waited, total (ms)",
    "waited_ms_per_step": "Others waited for it (ms/step)", "last_at": "Last to arrive at (collectives)",
    "msg_bytes": "Message (bytes)", "comm_reason": "Why communication", "collective_kind": "Collective",
    "host_data_loading_pct": "Host: data loading (%)", "host_gap_pct": "Host: un-annotated gap (%)",
    "kernel_time_us": "GPU span (µs)", "cost_ms_per_step": "Cost (ms/step)",
    "cost_ms_per_step_median": "Cost, median (ms/step)", "others_cost_ms_per_step": "Others' cost, jitter (ms/step)",
    "others_wait_ms_per_step": "Others waited (ms/step)", "blocked_wait_ms_per_step": "Others blocked (ms/step)",
    "blocked_wait_ms_per_step_median": "Others blocked, median (ms/step)", "cause": "Cause",
    "cause_detail": "What the cause means", "confidence": "Confidence (0-1)", "late_in_steps_share": "Late in (share of steps)",
    "threshold_ms": "Threshold (ms)", "kernel_type": "Kernel type", "count": "Calls", "calls": "Calls",
    "sum": "Total (µs)", "mean": "Mean (µs)", "max": "Max (µs)", "min": "Min (µs)", "std": "Std. dev. (µs)",
    "sum (us)": "Total (µs)", "mean (us)": "Mean (µs)", "max (us)": "Max (µs)", "min (us)": "Min (µs)",
    "stddev": "Std. dev. (µs)", "percentage": "Share (%)", "pct_of_type": "Share of its type (%)", "ranks": "Ranks",
    "key": "Collective", "group": "Process group", "kind": "Kind", "n_ranks": "Ranks", "last_rank": "Last to arrive (rank)",
    "inflicted_ms": "Others waited, median (ms)", "blocked_inflicted_ms": "Others blocked, median (ms)",
    "skew_ms": "Arrival spread (ms)", "first_arrival_ms": "First arrival (ms from trace start)",
    "last_arrival_ms": "Last arrival (ms from trace start)", "end_ms": "End (ms from trace start)",
    "wait_inflicted_ms": "Waiting inflicted (ms)", "wait_suffered_ms": "Waiting suffered (ms)",
    "idle_category": "Idle category", "idle_time": "Idle time (µs)", "idle_time_ratio": "Idle share of stream",
    "stream": "GPU stream", "n_steps": "Steps", "host_total_us": "Host total (µs)", "host_self_us": "Host self (µs)",
    "device_total_us": "Device total (µs)", "device_self_us": "Device self (µs)", "launches": "Launches",
    "short_kernel_share": "Kernels shorter than their launch (share)", "cpu_launch_median_us": "Launch call, median (µs)",
    "gpu_median_us": "GPU event, median (µs)", "launch_delay_median_us": "Launch delay, median (µs)",
    "launch_delay_p95_us": "Launch delay, p95 (µs)", "runtime_outliers": "Slow launch calls (>50 µs)",
    "launch_delay_outliers": "Launch delays >100 µs", "gpu_time_us": "GPU time (µs)", "cpu_launch_time_us": "Launch calls, total (µs)",
}
_SUFFIX = (("_pct", " (%)"), ("_ms", " (ms)"), ("_us", " (µs)"), ("_s", " (s)"), ("_bytes", " (bytes)"))
TEXT_MAX = 60


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def human(col: str) -> str:
    if col in NAMES:
        return NAMES[col]
    base, unit = col, ""
    for suf, u in _SUFFIX:
        if col.endswith(suf):
            base, unit = col[: -len(suf)], u
            break
    text = base.replace("_", " ").strip()
    return (text[:1].upper() + text[1:] + unit) if text else col


def num(v, col: str = "") -> str:
    """A number as people read it: thousands separators, decimals by magnitude, never 1e+12."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    v = float(v)
    if math.isinf(v):
        return "∞"
    if col.endswith(("_pct", "percentage", "pct_of_type")):
        return f"{v:,.1f}"
    if col.endswith(("share", "confidence", "ratio")):
        return f"{v:.2f}"
    a = abs(v)
    if a >= 100 or v == int(v):
        return f"{v:,.0f}" if a >= 1000 or v == int(v) else f"{v:,.1f}"
    return f"{v:.2f}" if a >= 1 else f"{v:.3f}"


def _json_float(v: float) -> str:
    """A float as JSON without an exponent: float.__repr__'s digits, as json.dumps takes them (the
    shortest that parse back to the same float; numpy's own repr of a np.float64 is not JSON), in
    positional notation; NaN and infinities as json.dumps writes them."""
    if math.isnan(v) or math.isinf(v):
        return json.dumps(v)
    r = float.__repr__(v)
    return np.format_float_positional(v, trim="0") if "e" in r else r


def json_text(o, indent: int = 1, _depth: int = 0) -> str:
    """`json.dumps(o, indent=indent, default=str)` with every float in positional notation
    (0.0000234375, not 2.34375e-05): the report shows summary.json to people; it still parses as
    the same JSON (`json.loads` gives back the same values). Floats, dicts, lists and tuples are
    written here; every other value is json.dumps' own text of it."""
    if isinstance(o, float):
        return _json_float(o)
    pad, inner = " " * indent * _depth, " " * indent * (_depth + 1)
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = (f"{inner}{json.dumps(str(k) if not isinstance(k, str) else k)}: {json_text(v, indent, _depth + 1)}"
                 for k, v in o.items())
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        return "[\n" + ",\n".join(inner + json_text(v, indent, _depth + 1) for v in o) + "\n" + pad + "]"
    return json.dumps(o, default=str)


_TEMPLATE = re.compile(r"<[^<>]*>")


def short_name(name: str, limit: int = TEXT_MAX) -> str:
    """`void at::native::foo<float, 4>(int, float*)` -> `at::native::foo<…>`, cut to `limit`."""
    s = str(name)
    if len(s) <= limit:
        return s
    s = re.sub(r"^void ", "", s)
    prev = None
    while prev != s:  # innermost template argument lists first
        prev, s = s, _TEMPLATE.sub("<…>", s)
    s = re.sub(r"(<…>)+", "<…>", s)
    s = re.sub(r"\(.*\)$", "(…)", s)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def cell(v, col: str) -> tuple[str, bool]:
    """(html, is_text) of one table cell."""
    if isinstance(v, (int, float, np.integer, np.floating, bool, np.bool_)) or v is None:
        return esc(num(v, col)), False
    if isinstance(v, (list, tuple, dict)):
        v = ", ".join(map(str, v)) if not isinstance(v, dict) else ", ".join(f"{k}: {x}" for k, x in v.items())
    s = str(v)
    if len(s) > TEXT_MAX:
        return f'<span title="{esc(s)}">{esc(short_name(s))}</span>', True
    return esc(s), True


def table(df: pd.DataFrame | None, max_rows: int = 40, note: str = "", columns: list[str] | None = None, empty: str = "(none)") -> str:
    """A scrolling table with human column names; `note` says where the full table lies, `empty`
    what to show without rows ("" for nothing)."""
    if df is None or df.empty:
        return f"<p class='none'>{esc(empty)}</p>" if empty else ""
    d = df[[c for c in (columns or list(df.columns)) if c in df.columns]].head(max_rows)
    head = []
    rows = []
    text_cols = set()
    body = []
    for rec in d.itertuples(index=False, name=None):
        cells = []
        for c, v in zip(d.columns, rec):
            h, is_text = cell(v, c)
            if is_text:
                text_cols.add(c)
            cells.append((c, h))
        body.append(cells)
    for c in d.columns:
        head.append(f'<th class="{"l" if c in text_cols else ""}">{esc(human(str(c)))}</th>')
    for cells in body:
        rows.append("<tr>" + "".join(f'<td class="{"l" if c in text_cols else ""}">{h}</td>' for c, h in cells) + "</tr>")
    more = f"<p class='more'>{len(df) - max_rows:,} more rows{': ' + esc(note) if note else ''}</p>" if len(df) > max_rows else ""
    return f"<div class='scroll'><table><thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{more}"


_RANK_PREFIX = re.compile(r"^(?:[\w.\-]+ )?\(rank (\d+)\):\s*")
_RANK_ANY = re.compile(r"\brank (\d+)\b")


def group_warnings(warnings: list[str]) -> list[str]:
    """One line per kind of warning: 'rank-3.pt.trace.json.gz (rank 3): no GPU kernels...' for
    every rank becomes one line naming the ranks."""
    kinds: dict[str, list] = {}
    order: list[str] = []
    for w in warnings:
        m = _RANK_PREFIX.match(w)
        if m:
            key, rank = w[m.end():], int(m.group(1))
        else:
            key, rank = w, None
        if key not in kinds:
            kinds[key] = []
            order.append(key)
        if rank is not None:
            kinds[key].append(rank)
    out = []
    for k in order:
        ranks = sorted(set(kinds[k]))
        if ranks:
            who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranges(ranks)}"
            out.append(f"{who}: {k}")
        else:
            out.append(k)
    return out


def _ranges(ranks: list[int]) -> str:
    parts, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)
