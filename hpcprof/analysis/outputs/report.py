"""Self-contained report.html: images base64-embedded, no external resources, every name escaped."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

from .layout import REPORT_FILE

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.warn{color:#8a4b00}.flag{color:#b00;font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{background:#f6f6f6}"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _table(df: pd.DataFrame, max_rows: int = 60, left: tuple = ()) -> str:
    if df is None or df.empty:
        return "<p>(none)</p>"
    d = df.head(max_rows)
    head = "".join(f'<th class="{"l" if c in left else ""}">{esc(c)}</th>' for c in d.columns)
    rows = []
    for _, r in d.iterrows():
        cells = []
        for c in d.columns:
            v = r[c]
            if isinstance(v, float):
                v = "" if pd.isna(v) else f"{v:.4g}"
            cells.append(f'<td class="{"l" if c in left else ""}">{esc(v)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>({len(df) - max_rows} more rows in the tables/ folder)</p>" if len(df) > max_rows else ""
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def write_report(out: Path, summary: dict, tables: dict[str, pd.DataFrame], plots: dict[str, Path]) -> Path:
    """report.html in folder `out`; `plots` must be drawn already (they are embedded)."""
    s = summary
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hpcprof report: {esc(s.get('run_name'))}</title><style>{CSS}</style></head><body>"]
    parts.append(f"<h1>hpcprof analysis: {esc(s.get('run_name'))}</h1>")
    parts.append(
        f"<p>source <code>{esc(s.get('source'))}</code>; world size {esc(s.get('world_size'))}; ranks analysed "
        f"{esc(', '.join(map(str, s.get('ranks_analyzed', []))))}; device {esc(s.get('device'))}</p>"
    )
    if s.get("warnings"):
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li class='warn'>{esc(w)}</li>" for w in s["warnings"]) + "</ul>")
    parts.append("<h2>Throughput</h2>" + _throughput_html(s))
    parts.append("<h2>Stragglers</h2>")
    if s.get("stragglers"):
        parts.append(
            _table(
                pd.DataFrame(s["stragglers"])[["rank", "node", "cost_ms_per_step", "cause", "cause_detail", "confidence", "late_in_steps_share"]],
                left=("node", "cause", "cause_detail"),
            )
        )
    else:
        parts.append("<p>No straggler: no rank makes the others wait beyond the noise threshold.</p>")
    if "stragglers" in plots:
        parts.append(_img(plots["stragglers"], "straggler chart"))
    parts.append("<h2>Recommendations</h2><ol>")
    for r in s.get("recommendations", []):
        parts.append(f"<li><b>{esc(r['title'])}</b><br>evidence: {esc(r['evidence'])}</li>")
    parts.append("</ol>")
    parts.append("<h2>Per rank</h2>" + _table(tables.get("per_rank"), left=("node",)))
    for key, title in [("idle", "Idle time / time breakdown"), ("step_heatmap", "Step time"), ("overlap", "Communication/computation overlap"), ("kernel_types", "Kernel types")]:
        if key in plots:
            parts.append(f"<h2>{esc(title)}</h2>" + _img(plots[key], title))
    parts.append("<h2>Step statistics (steps/*.jsonl)</h2>" + _table(tables.get("steps_stats")))
    parts.append("<h2>Kernel breakdown</h2>" + _table(tables.get("kernel_breakdown"), left=("kernel_type",)))
    parts.append("<h2>Top kernels across ranks</h2>" + _table(tables.get("kernels_across_ranks"), max_rows=25, left=("name", "kernel_type")))
    parts.append("<h2>Top kernels per rank (HTA)</h2>" + _table(tables.get("kernels_top"), left=("name", "kernel_type")))
    parts.append("<h2>Idle-time breakdown per stream (HTA)</h2>" + _table(tables.get("idle_breakdown"), left=("idle_category",)))
    parts.append("<h2>Collectives (cross-rank)</h2>" + _table(tables.get("collectives"), max_rows=40, left=("key", "group", "kind")))
    parts.append(f"<h2>summary.json</h2><pre>{esc(json.dumps(s, indent=1, default=str)[:20000])}</pre>")
    parts.append("</body></html>")
    path = out / REPORT_FILE
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _throughput_html(s: dict) -> str:
    """The job's samples/s line and one row per rank: median with its 95% interval over steady-state
    steps, the profiled steps apart, the steps left out, and (GPU runs) the share the GPU was busy."""
    from .console import throughput_line

    tp = s.get("throughput")
    head = f"<p>{esc(throughput_line(tp))}</p>"
    if not tp:
        return head
    idle = {r["rank"]: r.get("idle_pct") for r in s.get("per_rank") or []}
    rows = []
    for r in tp["per_rank"]:
        ci = r.get("ci95_samples_per_s") or [None, None]
        n = r["steps"]
        rows.append({"rank": r["rank"], "samples/s (median)": r["median_samples_per_s"], "95% CI low": ci[0], "95% CI high": ci[1],
                     "samples/s (sum/time)": r["rate_samples_per_s"], "profiled steps samples/s": r["profiled_median_samples_per_s"],
                     "GPU busy %": (100 - idle[r["rank"]]) if isinstance(idle.get(r["rank"]), (int, float)) else None,
                     "steady": n["steady"], "warm-up": n["warmup"], "epoch boundary": n["epoch_boundary"],
                     "profiler warm-up": n["profiler_warmup"], "profiled": n["profiled"]})
    return head + _table(pd.DataFrame(rows))
