"""What `compare` writes: compare.json, tables/*.csv, plots/*.png, compare.html, and the console table.

The HTML page reuses the analysis report's escaping and table helpers (one definition of "every
name from a trace is escaped") and embeds its charts, so it opens offline like report.html.

The output folder's tables are this comparison's: `ops_<arm>.csv` and `steps_<run>.csv` files of an
earlier comparison into the same folder (other runs) are removed, nothing else is.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.outputs.htmlparts import esc, table
from ..analysis.outputs.report import CSS, _img
from ..rundir.layout import atomic_write_text
from .charts import charts
from .stats import NOISE_UNKNOWN, NOT_IN_TIME

OWNED_TABLES = re.compile(r"^(ops|steps)_.+\.csv$")
"""Per-arm and per-run tables this module writes; stale ones (an earlier comparison) are removed."""


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


def _pair(v, i):
    return (v or [None, None])[i]


def arms_table(result: dict) -> pd.DataFrame:
    rows = []
    for a in result["arms"]:
        v = a.get("vs_baseline") or {}
        row = {
            "arm": a["label"],
            "runs": len(a["runs"]),
            "runs_used": a["runs_used"],
            "samples_per_s": a["samples_per_s"],
            "samples_per_s_ci_low": _pair(a["samples_per_s_ci95"], 0),
            "samples_per_s_ci_high": _pair(a["samples_per_s_ci95"], 1),
            "step_ms": a["step_ms"],
            "step_ms_ci_low": _pair(a["step_ms_ci95"], 0),
            "step_ms_ci_high": _pair(a["step_ms_ci95"], 1),
            "ci_basis": a.get("samples_per_s_ci_basis") or a.get("step_ms_ci_basis"),
            "data_wait_pct": a["data_wait_pct"],
            "gpu_idle_pct": a["gpu_idle_pct"],
            "gpu_compute_pct": a["gpu_compute_pct"],
            "gpu_non_compute_pct": a["gpu_non_compute_pct"],
            "overlap_pct": a["overlap_pct"],
            "change_pct": v.get("change_pct"),
            "ci_low_pct": _pair(v.get("ci_pct"), 0),
            "ci_high_pct": _pair(v.get("ci_pct"), 1),
            "basis": v.get("basis"),
            "verdict": v.get("verdict", "baseline"),
            "time": v.get("time"),
            "ran": a.get("ran"),
            "detectable_pct": v.get("detectable_pct"),
            "runs_needed": v.get("runs_needed"),
            "steps_used": a["steps_used"],
            "step_source": a["step_source"],
        }
        for k, ms in (a["kernel_ms_per_step"] or {}).items():
            row[f"kernel_ms_per_step:{k}"] = ms
        for p, ms in (a["breakdown_ms"] or {}).items():
            row[f"breakdown_ms:{p}"] = ms
        rows.append(row)
    return pd.DataFrame(rows)


def runs_table(result: dict) -> pd.DataFrame:
    cols = ["label", "arm", "used", "state", "samples_per_s", "step_ms", "data_wait_pct", "gpu_idle_pct", "steps_used", "step_source",
            "device", "ranks", "started", "state_line"]
    df = pd.DataFrame([{c: r[c] for c in cols} for r in result["runs"]])
    df["replicate"] = [(r["replicate"] or {}).get("index") for r in result["runs"]]
    return df.rename(columns={"label": "run"})


HTML_NAMES = {
    "arm": "Arm", "run": "Run", "runs": "Runs", "runs_used": "Runs used", "used": "Used", "state": "Run state",
    "samples_per_s": "Samples/s", "samples_per_s_ci_low": "Samples/s, 95% CI low", "samples_per_s_ci_high": "Samples/s, 95% CI high",
    "step_ms_ci_low": "Step ms, 95% CI low", "step_ms_ci_high": "Step ms, 95% CI high", "ci_basis": "CI basis",
    "gpu_idle_pct": "GPU idle (%)", "gpu_compute_pct": "GPU compute (%)", "gpu_non_compute_pct": "GPU non-compute (%)",
    "change_pct": "Change (%)", "ci_low_pct": "Change, 95% CI low (%)", "ci_high_pct": "Change, 95% CI high (%)",
    "basis": "Interval from", "detectable_pct": "Detectable change (%)", "runs_needed": "Runs per arm needed",
    "within_run_ci_low_pct": "Within-run CI low (%)", "within_run_ci_high_pct": "Within-run CI high (%)", "within_run_verdict": "Within-run verdict",
    "state_line": "Run state, in words", "replicate": "Replicate", "time": "Arms in time", "ran": "Ran", "started": "Started",
}
"""Column names on the page (the CSV files keep the raw names)."""


def _named(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns={c: HTML_NAMES.get(c, c.replace("breakdown_ms:", "ms/step: ").replace("kernel_ms_per_step:", "kernel ms/step: "))
                              for c in df.columns})


def _html(out: Path, result: dict, arms: pd.DataFrame, runs: pd.DataFrame, deltas: pd.DataFrame, op_tables: dict[str, pd.DataFrame],
          plots: dict[str, Path]) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hpcprof compare</title><style>{CSS}</style></head><body>"]
    parts.append(f"<h1>hpcprof comparison: baseline {esc(result['baseline'])}</h1>")
    parts.append(
        "<p>Each arm is one configuration: one run, or replicate runs of one spec (grouped: "
        f"{esc(result['group_by'])}). The change of each arm against the baseline comes with a 95% interval: with "
        "replicates (or a calibration passed with --noise) it holds the run-to-run noise (t interval on the runs' "
        "medians, log scale); with one run each it covers only the steps within each run and gives no faster/slower "
        "verdict. A verdict needs the interval to exclude zero and a change of at least "
        f"{esc(result['min_change_pct'])}%. 'Detectable' is the smallest change the arms see with 80% power. Arms whose "
        "runs did not run interleaved in time ('apart') get no faster/slower verdict unless a calibration measured the "
        "machine's drift between runs launched apart; then the interval holds it.</p>")
    for m, nz in (result.get("noise") or {}).items():
        parts.append(f"<p>Run-to-run noise of {esc(m)}: SD {esc(_f(nz.get('sd_pct')))}% ({esc(nz['source'])}).</p>")
    if result["warnings"]:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li class='warn'>{esc(w)}</li>" for w in result["warnings"]) + "</ul>")
    parts.append("<h2>Arms</h2>" + table(_named(arms)))
    notes = [(a["label"], (a.get("vs_baseline") or {}).get("note")) for a in result["arms"][1:]]
    if any(n for _, n in notes):
        parts.append("<ul>" + "".join(f"<li><b>{esc(lab)}</b>: {esc(n)}</li>" for lab, n in notes if n) + "</ul>")
    for name, p in plots.items():
        parts.append(_img(p, name))
    parts.append("<h2>Runs and their state</h2>" + table(_named(runs), max_rows=500))
    parts.append("<h2>Changes against the baseline</h2>" + table(_named(deltas), max_rows=200))
    for od in result["op_deltas"]:
        parts.append(f"<h2>Operators and kernels: {esc(od['base_run'])} &rarr; {esc(od['run'])} (HTA TraceDiff, per profiled step)</h2>")
        for what in ("increases", "decreases", "added", "removed"):
            df = pd.DataFrame(od[what])
            parts.append(f"<h3>{esc(what)}</h3>" + table(df, max_rows=15))
    parts.append("</body></html>")
    path = out / "compare.html"
    atomic_write_text(path, "".join(parts))
    return path


def _f(v, d=1, sign=False):
    if not isinstance(v, (int, float)) or v is None or not math.isfinite(v):
        return "-"
    return f"{v:+.{d}f}" if sign else f"{v:.{d}f}"


def verdict_text(v: dict) -> str:
    """The verdict column: a within-run verdict is named as such."""
    if not v:
        return "baseline"
    if v.get("verdict") == NOISE_UNKNOWN and v.get("within_run_verdict"):
        return f"{v['within_run_verdict']} within the run; {NOISE_UNKNOWN}"
    if v.get("time") == "apart" and not str(v.get("verdict", "")).startswith(NOT_IN_TIME):
        return f"{v['verdict']} (ran apart in time; the interval holds the drift)"
    return v["verdict"]


def _cells(text: str) -> int:
    """Terminal columns `text` takes (East Asian wide and full-width characters take two)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def _fit(text: str, width: int) -> str:
    """`text` cut and padded to `width` terminal columns, so that the columns after it line up
    (runs named 実験 and 試験 take two columns per character)."""
    out = ""
    for c in text:
        if _cells(out + c) > width:
            break
        out += c
    return out + " " * (width - _cells(out))


def console_table(result: dict) -> str:
    arms = result["arms"]
    w = min(40, max([_cells(a["label"]) for a in arms] + [3]))
    lines = [f"{'arm':<{w}} {'runs':>4} {'samples/s':>10} {'step ms':>9} {'data %':>7} {'GPU idle %':>10} {'change %':>9} "
             f"{'95% CI %':>17} {'basis':>11}  verdict"]
    for a in arms:
        v = a.get("vs_baseline") or {}
        ci = v.get("ci_pct")
        cis = f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "-"
        n = f"{a['runs_used']}" if a["runs_used"] == len(a["runs"]) else f"{a['runs_used']}/{len(a['runs'])}"
        lines.append(
            f"{_fit(a['label'], w)} {n:>4} {_f(a['samples_per_s']):>10} {_f(a['step_ms']):>9} {_f(a['data_wait_pct']):>7} "
            f"{_f(a['gpu_idle_pct']):>10} {_f(v.get('change_pct'), sign=True) if v else '-':>9} {cis:>17} {v.get('basis') or '-':>11}  "
            f"{verdict_text(v)}")
    for a in arms:
        if len(a["runs"]) > 1:
            key = "samples_per_s" if a["samples_per_s"] is not None else "step_ms"
            unit = "samples/s" if key == "samples_per_s" else "ms"
            ci = a.get(f"{key}_ci95")
            cis = f" (95% CI [{ci[0]:.1f}, {ci[1]:.1f}], {a.get(f'{key}_ci_basis')})" if ci else ""
            pts = ", ".join(f"{_f(x)}" for x in a[f"{key}_runs"])
            lines.append(f"  {a['label']}: {_f(a[key])} {unit}{cis}; runs: {pts}")
    for a in arms[1:]:
        note = (a.get("vs_baseline") or {}).get("note")
        if note:
            lines.append(f"  {a['label']}: {note}")
    parts = list(dict.fromkeys(p for a in arms for p in a["breakdown_ms"]))
    if parts and any(len(a["runs"]) > 1 for a in arms):
        lines.append("step breakdown, ms per step (mean per rank and run):")
        lines.append(f"  {'arm':<{w}} " + " ".join(f"{p[:12]:>12}" for p in parts))
        for a in arms:
            lines.append(f"  {_fit(a['label'], w)} " + " ".join(f"{_f(a['breakdown_ms'].get(p)):>12}" for p in parts))
    for m, nz in (result.get("noise") or {}).items():
        if m == "samples_per_s" or (m == "step_ms" and "samples_per_s" not in result["noise"]):
            lines.append(f"run-to-run noise ({m}): SD {_f(nz.get('sd_pct'))}% from {nz['source']}")
            if nz.get("drift"):
                lines.append(f"drift between runs launched apart ({m}): SD {_f(nz['drift'].get('sd_pct'))}% from {nz['drift']['source']}")
    if result.get("noise_file"):
        lines.append(f"noise level written to {result['noise_file']} (pass --noise {Path(result['noise_file']).parent} when comparing single runs)")
    for warn in result["warnings"]:
        lines.append(f"warning: {warn}")
    lines.append(f"comparison: {result['outputs']['html']}")
    return "\n".join(lines)


def _remove_stale(tables_dir: Path, keep: set[str]) -> None:
    for p in tables_dir.iterdir():
        if OWNED_TABLES.match(p.name) and p.name not in keep and p.is_file():
            p.unlink()


def write_outputs(out: Path, result: dict[str, Any], series, op_tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    (out / "tables").mkdir(exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    arms = arms_table(result)
    runs = runs_table(result)
    deltas = pd.DataFrame(result["deltas"])
    if not deltas.empty:
        for key in ("ci_pct", "within_run_ci_pct"):
            stem = key[:-4]
            deltas[f"{stem}_low_pct"] = deltas[key].map(lambda c: c[0] if c else None)
            deltas[f"{stem}_high_pct"] = deltas[key].map(lambda c: c[1] if c else None)
        deltas["runs"] = deltas["runs"].map(lambda r: f"{r[0]} vs {r[1]}" if r else None)
        deltas = deltas[["arm", "baseline", "metric", "base", "value", "change_pct", "ci_low_pct", "ci_high_pct", "basis", "runs", "verdict",
                         "time", "detectable_pct", "runs_needed", "within_run_ci_low_pct", "within_run_ci_high_pct", "within_run_verdict",
                         "note"]]
    tables = {}
    for name, df in (("arms", arms), ("runs", runs), ("deltas", deltas)):
        df.to_csv(out / "tables" / f"{name}.csv", index=False)
        tables[name] = str(out / "tables" / f"{name}.csv")
    for label, df in op_tables.items():
        p = out / "tables" / f"ops_{label}.csv"
        df.to_csv(p, index=False)
        tables[f"ops_{label}"] = str(p)
    for s in series:
        p = out / "tables" / f"steps_{s.label}.csv"
        s.steps.to_csv(p, index=False)
        tables[f"steps_{s.label}"] = str(p)
    _remove_stale(out / "tables", {Path(p).name for p in tables.values()})
    plots = charts(out, result)
    html_path = _html(out, result, arms, runs, deltas, op_tables, plots)
    result["outputs"] = {"json": str(out / "compare.json"), "html": str(html_path), "tables": tables, "plots": {k: str(v) for k, v in plots.items()}}
    result = _clean(result)
    atomic_write_text(out / "compare.json", json.dumps(result, indent=2))
    return result
