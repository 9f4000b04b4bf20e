"""What a comparison knows about one analysed run: per-step series and per-run figures.

Why per-step series: a change is only "faster" when it beats the step-to-step noise, so every
figure with a confidence interval is computed from a table of job steps that the bootstrap can
resample (stats.py). The series come from the analysis folder's tables, never from the traces:
- with step records (`tables/steps_all`): the steady-state job steps of the throughput module
  (warm-up, epoch-boundary, trace-export and profiled steps excluded, the same definition as the
  analysis): samples/s, the slowest rank's step time (on the GPU's clock on a CUDA run), and the
  data-wait share (data wait / step time summed over ranks);
- without them (a folder of traces): the profiled steps of the trace (`tables/steps_trace`), the
  slowest rank's `ProfilerStep` duration and the main thread's data-loading share. With one rank
  these equal the per-trace analysis (`per_rank.step_time_ms`, `host_data_loading_pct`).
GPU shares (idle, compute, non-compute = communication + memcpy/memset, HTA's temporal breakdown) and overlap are HTA's per-rank totals (one number per rank, so no interval); kernel
time per type is HTA's kernel breakdown divided by the profiled steps (ms per step and rank).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.outputs.summary import read_summary
from ..analysis.reduce.throughput import throughput

BREAKDOWN_JSONL = (("data_wait_s", "data wait"), ("copy_s", "copy"), ("drill_sleep_s", "drill sleep"), ("forward_s", "forward"),
                   ("backward_s", "backward"), ("optimizer_s", "optimizer"))
BREAKDOWN_TRACE = (("data_loading_ms", "data loading"), ("host_gap_ms", "host gap"), ("cpu_work_ms", "CPU operators"))


@dataclass
class RunSeries:
    """One run as the comparison sees it. `steps`: one row per job step used for statistics, with
    `step_ms`, `samples_per_s` (NaN without step records), `data_ms` (numerator of the data share)
    and `busy_ms` (its denominator). `breakdown`: mean ms per step by part, for the stacked chart."""

    label: str
    analysis_dir: Path
    summary: dict
    steps: pd.DataFrame
    step_source: str  # "steps files (steady state)" | "trace ProfilerSteps"
    breakdown: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    throughput: dict | None = None
    manifest: dict = field(default_factory=dict)
    """The run directory's manifest.json ({} for a folder of traces)."""
    has_step_records: bool = False
    """The run has steps/*.jsonl records (steady-state steps), whichever source `steps` came from."""

    @property
    def run_state(self) -> dict | None:
        """summary.json `run_state` (hpcprof.rundir.state): completed, failed, interrupted, ..."""
        return self.summary.get("run_state")

    @property
    def complete(self) -> bool:
        """A finished run, or a folder of traces (state unknown): its steps describe the configuration."""
        return (self.run_state or {}).get("state") in (None, "completed", "unknown")


def _table(analysis_dir: Path, name: str) -> pd.DataFrame:
    p = analysis_dir / "tables" / f"{name}.parquet"
    if p.is_file():
        return pd.read_parquet(p)
    c = analysis_dir / "tables" / f"{name}.csv"
    if c.is_file() and c.stat().st_size > 1:
        return pd.read_csv(c)
    return pd.DataFrame()


def _manifest(summary: dict) -> dict:
    """The analysed run's manifest.json as the analysis read it: its fields of the wrong type left
    out ({} for none, or one that is not a JSON object; the analysis' warnings named them)."""
    from ..rundir import RunDir, RunDirError
    from ..rundir.manifest import checked

    try:
        return checked(RunDir(Path(summary.get("source", ""))).read_manifest())[0]
    except (OSError, RunDirError):
        return {}


def _from_steps_files(recs: pd.DataFrame, manifest: dict) -> tuple[pd.DataFrame, dict, dict | None]:
    prof_warmup = int(((manifest.get("spec") or {}).get("profiler") or {}).get("warmup") or 0)
    starts = [a.get("resumed_from_step") for a in manifest.get("attempts") or [] if isinstance(a, dict)]
    tp, per_step, job = throughput(recs, prof_warmup, starts)
    if tp is None:
        return pd.DataFrame(), {}, None
    steady = per_step[per_step["phase"] == "steady"]
    # step_time_s: the run's step time (on a GPU the GPU clock's; the host's step_s is a launch time there)
    agg = steady.groupby("step").agg(data_s=("data_wait_s", "sum"), busy_s=("step_time_s", "sum"))
    j = job[job["phase"] == "steady"].set_index("step").join(agg, how="inner")
    out = pd.DataFrame(
        {
            "step": j.index.to_numpy(),
            "step_ms": j["step_s"].to_numpy() * 1e3,
            "samples_per_s": j["samples_per_s"].to_numpy(),
            "data_ms": j["data_s"].to_numpy() * 1e3,
            "busy_ms": j["busy_s"].to_numpy() * 1e3,
        }
    )
    parts = {}
    for col, name in BREAKDOWN_JSONL:
        if col in steady and steady[col].notna().any():
            parts[name] = float(steady[col].astype(float).mean() * 1e3)
    total = float(steady["step_time_s"].mean() * 1e3) if len(steady) else 0.0
    parts["other"] = max(0.0, total - sum(parts.values()))
    return out, parts, tp


def _from_trace(st: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    if st.empty:
        return pd.DataFrame(columns=["step", "step_ms", "samples_per_s", "data_ms", "busy_ms"]), {}
    g = st.groupby("step")
    out = pd.DataFrame(
        {
            "step_ms": g["dur_ms"].max(),
            "samples_per_s": np.nan,
            "data_ms": g["data_loading_ms"].sum(),
            "busy_ms": g["dur_ms"].sum(),
        }
    ).reset_index()
    parts = {name: float(st[col].mean()) for col, name in BREAKDOWN_TRACE if col in st}
    parts["other"] = max(0.0, float(st["dur_ms"].mean()) - sum(parts.values()))
    return out, parts


def _mean(rows: list[dict], key: str) -> float | None:
    v = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
    return float(np.mean(v)) if v else None


def load_series(label: str, analysis_dir: Path, source: str = "auto") -> RunSeries:
    """Read one analysis folder (summary.json and tables/) into a RunSeries. `source`: "auto" (the
    steady-state steps of the step records when the run has them, else the trace's profiled steps)
    or "trace" (the trace's profiled steps always: to compare like with like against a folder of
    traces)."""
    try:
        summary = read_summary(analysis_dir / "summary.json")
    except ValueError as exc:
        raise ValueError(f"{exc}; run python -m hpcprof.analyze on it first") from None
    recs = _table(analysis_dir, "steps_all")
    manifest = _manifest(summary)
    tp = None
    steps = pd.DataFrame()
    has_records = False
    if not recs.empty:
        steps, parts, tp = _from_steps_files(recs, manifest)
        has_records = not steps.empty
        used = "steps files (steady state)"
    if steps.empty or source == "trace":
        steps, parts = _from_trace(_table(analysis_dir, "steps_trace"))
        used = "trace ProfilerSteps"
    per_rank = summary.get("per_rank") or []
    pr = _table(analysis_dir, "per_rank")
    prof_steps = int(pr["profiled_steps"].sum()) if "profiled_steps" in pr else 0
    kernels = {}
    for k in summary.get("kernel_breakdown") or []:
        if prof_steps:
            kernels[str(k["kernel_type"])] = float(k["time_us"]) / prof_steps / 1e3
    figures = {
        "gpu_idle_pct": _mean(per_rank, "idle_pct"),
        "gpu_compute_pct": _mean(per_rank, "compute_pct"),
        "gpu_non_compute_pct": _mean(per_rank, "non_compute_pct"),
        "overlap_pct": _mean(per_rank, "comm_comp_overlap_pct"),
        "kernel_ms_per_step": kernels,
        "ranks": len(summary.get("ranks_analyzed") or []),
        "device": summary.get("device"),
        "steps_used": int(len(steps)),
    }
    return RunSeries(label, analysis_dir, summary, steps, used, parts, figures, tp, manifest, has_records)
