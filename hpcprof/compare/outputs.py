"""What `compare` writes: compare.json, tables/*.csv, plots/*.png, compare.html, and the console table.

The HTML page reuses the analysis report's escaping and table helpers (one definition of "every
name from a trace is escaped") and embeds its charts, so it opens offline like report.html.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.outputs.htmlparts import esc, table
from ..analysis.outputs.report import CSS, _img


def _clean(o):
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return None if not math.isfinite(float(o)) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def runs_table(result: dict) -> pd.DataFrame:
    rows = []
    for r in result["runs"]:
        v = r.get("vs_baseline") or {}
        row = {
            "run": r["label"],
            "samples_per_s": r["samples_per_s"],
            "samples_per_s_ci_low": (r["samples_per_s_ci95"] or [None, None])[0],
            "samples_per_s_ci_high": (r["samples_per_s_ci95"] or [None, None])[1],
            "step_ms": r["step_ms"],
            "data_wait_pct": r["data_wait_pct"],
            "gpu_idle_pct": r["gpu_idle_pct"],
            "gpu_compute_pct": r["gpu_compute_pct"],
            "gpu_non_compute_pct": r["gpu_non_compute_pct"],
            "overlap_pct": r["overlap_pct"],
            "change_pct": v.get("change_pct"),
            "ci_low_pct": (v.get("ci_pct") or [None, None])[0],
            "ci_high_pct": (v.get("ci_pct") or [None, None])[1],
            "verdict": v.get("verdict", "baseline"),
            "steps_used": r["steps_used"],
            "step_source": r["step_source"],
        }
        for k, ms in (r["kernel_ms_per_step"] or {}).items():
            row[f"kernel_ms_per_step:{k}"] = ms
        rows.append(row)
    return pd.DataFrame(rows)


def _charts(out: Path, result: dict) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    labels = [r["label"] for r in runs]
    x = np.arange(len(runs))
    plots: dict[str, Path] = {}
    use_sps = all(r["samples_per_s"] is not None for r in runs)
    key, ci_key, unit = ("samples_per_s", "samples_per_s_ci95", "samples/s (median, 95% CI)") if use_sps else ("step_ms", "step_ms_ci95", "step time ms (median, 95% CI)")
    vals = np.array([r[key] if r[key] is not None else np.nan for r in runs], dtype=float)
    lo = np.array([(r[ci_key] or [np.nan, np.nan])[0] for r in runs], dtype=float)
    hi = np.array([(r[ci_key] or [np.nan, np.nan])[1] for r in runs], dtype=float)
    err = np.vstack([np.nan_to_num(vals - lo), np.nan_to_num(hi - vals)])
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(runs) + 2), 4))
    colors = ["#888"] + ["#2a7" if (r.get("vs_baseline") or {}).get("verdict") == "faster" else "#c33" if (r.get("vs_baseline") or {}).get("verdict") == "slower" else "#48c" for r in runs[1:]]
    ax.bar(x, vals, yerr=err, capsize=5, color=colors)
    ax.set_xticks(x, labels, rotation=20, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(("throughput" if use_sps else "step time") + " per run (grey: baseline; green faster, red slower)")
    fig.tight_layout()
    plots["throughput"] = out / "plots" / "throughput.png"
    fig.savefig(plots["throughput"], dpi=100)
    plt.close(fig)

    parts = []
    for r in runs:
        for p in r["breakdown_ms"]:
            if p not in parts:
                parts.append(p)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(runs) + 4), 4))
    bottom = np.zeros(len(runs))
    for p in parts:
        v = np.array([r["breakdown_ms"].get(p, 0.0) for r in runs])
        ax.bar(x, v, bottom=bottom, label=p)
        bottom += v
    ax.set_xticks(x, labels, rotation=20, ha="right")
    ax.set_ylabel("ms per step (mean per rank)")
    ax.set_title("step breakdown per run")
    if parts:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    plots["step_breakdown"] = out / "plots" / "step_breakdown.png"
    fig.savefig(plots["step_breakdown"], dpi=100)
    plt.close(fig)
    return plots


def _html(out: Path, result: dict, runs: pd.DataFrame, deltas: pd.DataFrame, op_tables: dict[str, pd.DataFrame], plots: dict[str, Path]) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hpcprof compare</title><style>{CSS}</style></head><body>"]
    parts.append(f"<h1>hpcprof comparison: baseline {esc(result['baseline'])}</h1>")
    parts.append(
        "<p>Change in percent against the baseline with a 95% bootstrap interval over steps; a verdict needs the interval to "
        f"exclude zero and a change of at least {esc(result['min_change_pct'])}%.</p>"
    )
    if result["warnings"]:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li class='warn'>{esc(w)}</li>" for w in result["warnings"]) + "</ul>")
    parts.append("<h2>Runs</h2>" + table(runs))
    for name, p in plots.items():
        parts.append(_img(p, name))
    parts.append("<h2>Changes against the baseline</h2>" + table(deltas, max_rows=200))
    for od in result["op_deltas"]:
        label = od["run"]
        parts.append(f"<h2>Operators and kernels: {esc(od['baseline'])} &rarr; {esc(label)} (HTA TraceDiff, per profiled step)</h2>")
        for what in ("increases", "decreases", "added", "removed"):
            df = pd.DataFrame(od[what])
            parts.append(f"<h3>{esc(what)}</h3>" + table(df, max_rows=15))
    parts.append("</body></html>")
    path = out / "compare.html"
    path.write_text("".join(parts), encoding="utf-8")
    return path


def console_table(result: dict) -> str:
    def f(v, w, d=1):
        return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"

    w = min(40, max([len(r["label"]) for r in result["runs"]] + [3]))
    lines = [f"{'run':<{w}} {'samples/s':>10} {'step ms':>9} {'data %':>7} {'GPU idle %':>10} {'change %':>9} {'95% CI %':>17}  verdict"]
    for r in result["runs"]:
        v = r.get("vs_baseline") or {}
        ci = v.get("ci_pct")
        cis = f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "-"
        lines.append(
            f"{r['label'][:w]:<{w}} {f(r['samples_per_s'], 10)} {f(r['step_ms'], 9)} {f(r['data_wait_pct'], 7)} {f(r['gpu_idle_pct'], 10)} "
            f"{f(v.get('change_pct'), 9)} {cis:>17}  {v.get('verdict', 'baseline')}"
        )
    for w in result["warnings"]:
        lines.append(f"warning: {w}")
    lines.append(f"comparison: {result['outputs']['html']}")
    return "\n".join(lines)


def write_outputs(out: Path, result: dict[str, Any], series, op_tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    (out / "tables").mkdir(exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    runs = runs_table(result)
    deltas = pd.DataFrame(result["deltas"])
    if not deltas.empty:
        deltas["ci_low_pct"] = deltas["ci_pct"].map(lambda c: c[0] if c else None)
        deltas["ci_high_pct"] = deltas["ci_pct"].map(lambda c: c[1] if c else None)
        deltas = deltas.drop(columns="ci_pct")[["run", "baseline", "metric", "base", "value", "change_pct", "ci_low_pct", "ci_high_pct", "verdict"]]
    runs.to_csv(out / "tables" / "runs.csv", index=False)
    deltas.to_csv(out / "tables" / "deltas.csv", index=False)
    tables = {"runs": str(out / "tables" / "runs.csv"), "deltas": str(out / "tables" / "deltas.csv")}
    for label, df in op_tables.items():
        p = out / "tables" / f"ops_{label}.csv"
        df.to_csv(p, index=False)
        tables[f"ops_{label}"] = str(p)
    for s in series:
        p = out / "tables" / f"steps_{s.label}.csv"
        s.steps.to_csv(p, index=False)
        tables[f"steps_{s.label}"] = str(p)
    plots = _charts(out, result)
    html_path = _html(out, result, runs, deltas, op_tables, plots)
    result["outputs"] = {"json": str(out / "compare.json"), "html": str(html_path), "tables": tables, "plots": {k: str(v) for k, v in plots.items()}}
    result = _clean(result)
    tmp = out / "compare.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(out / "compare.json")
    return result
