"""The report's GPU summary section: the PyTorch profiler TensorBoard plugin's figures (GPU
utilization, Est. SM Efficiency, Est. Achieved Occupancy, Tensor Core share, step-time breakdown)
per rank and across ranks, from summary.json `gpu_summary`; a figure no rank has is named with the
reason, in one line. Everything from the trace is escaped (htmlparts.esc and table)."""

from __future__ import annotations

import pandas as pd

from .htmlparts import esc, num, table

LABELS = {
    "gpu_utilization_pct": "GPU Utilization", "sm_efficiency_pct": "Est. SM Efficiency",
    "achieved_occupancy_pct": "Est. Achieved Occupancy", "tensor_cores_pct": "Kernel time using Tensor Cores",
    "kernel_pct": "Kernel", "memcpy_pct": "Memcpy", "memset_pct": "Memset", "communication_pct": "Communication",
    "runtime_pct": "Runtime", "dataloader_pct": "DataLoader", "cpu_exec_pct": "CPU Exec", "other_pct": "Other",
    "step_time_ms": "Step time (ms)",
}
"""summary.json field -> the plugin's name for it."""


def gpu_summary_section(s: dict) -> str:
    g = s.get("gpu_summary") or {}
    across = g.get("across_ranks") or {}
    if not across:
        return "<p class='none'>(no GPU summary: no rank was analysed)</p>"
    body = ("<p>The figures of the PyTorch profiler's TensorBoard plugin (torch-tb-profiler 0.4.3), computed as it "
            "defines them: over the profiled steps (moved to the device side where runtime calls say so), the step "
            "time shared among Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec and Other in that "
            "order of precedence (docs/summary-json.md, GpuSummary).</p>")
    rows, missing = [], []
    for f, label in LABELS.items():
        a = across.get(f) or {}
        if not a.get("ranks"):
            if a.get("null_reason"):
                missing.append(f"<li>{esc(label)}: {esc(a['null_reason'])}</li>")
            continue
        pct = f.endswith("_pct")
        fmt = (lambda v: f"{num(v, 'x_pct')}%") if pct else (lambda v: num(v))
        rows.append({"figure": label, "lowest": f"{fmt(a['min'])} (rank {a['min_rank']})", "median": fmt(a["median"]),
                     "highest": f"{fmt(a['max'])} (rank {a['max_rank']})", "ranks": a["ranks"]})
    if rows:
        body += "<h3>Across ranks</h3>" + table(pd.DataFrame(rows))
    if missing:
        body += "<p>Not available:</p><ul>" + "".join(missing) + "</ul>"
    per = g.get("per_rank") or []
    if rows and per:
        cols = ["rank", "gpu_name", "profiled_steps", *LABELS]
        df = pd.DataFrame([{c: r.get(c) for c in cols} for r in per]).rename(columns={"step_time_ms": "plugin_step_ms"})
        body += "<h3>Per rank</h3>" + table(df, max_rows=64, note="tables/gpu_summary.csv")
    return body
