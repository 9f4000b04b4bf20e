"""Throughput (samples/s) per rank and for the job, from the step records of every step.

Why here and why this way:
- Step time alone misleads when a change alters the batch (the ladder's larger-batch rung makes
  every step slower while the job gets faster), so the speed figure users compare is samples/s,
  computed per step as ``batch_size / step time`` from ``steps/rank-<r>.jsonl`` (``batch_size`` is
  recorded on every step). The step time is the GPU's clock on a CUDA run (``gpu_ms``: the host's
  ``step_s`` is only how long the host took to issue the step, and the host runs ahead of the GPU),
  else the host's; the summary names it (``step_time_source``).
- Only *steady-state* steps describe the configuration. Each step gets exactly one phase, first
  match wins: ``warmup`` (the first ``WARMUP_STEPS`` steps of every attempt: allocator, cuDNN
  autotuning, compilation, and a resumed job's start; on the GPU's clock ``GPU_WARMUP_STEPS``, since
  step 1 still fills the GPU queue, rebuilds DDP's buckets and grows the allocator), ``epoch_boundary``
  (the step that fetched the first batch of a new epoch: a fresh DataLoader iterator starts its
  workers and refills its prefetch queue, a cost paid once per epoch, not per step), ``trace_export``
  (the step after the profiler wrote a trace: the host stopped for the export, gzip included, and on
  a GPU the queue ran dry), ``profiled`` (an active profiler step),
  ``profiler_warmup`` (the profiler's warm-up steps just before the active ones: traced, then
  discarded, so just as slowed), else ``steady``. Excluded steps are counted, and profiled steps get
  their own median so the profiler's overhead is visible rather than mixed in.
- The confidence interval of the median is the distribution-free order-statistic interval (the
  binomial(n, 1/2) quantiles): exact for any distribution of step times, deterministic (a test can
  know the answer), and honest about small samples (below 6 steps no interval reaches 95%; the
  achieved coverage is reported with it).
- The job's samples/s in a step is the global batch (sum over ranks) over the slowest rank's step
  time: DDP ranks advance together, so the slowest one sets the pace.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .step_stats import GPU_CLOCK, step_seconds, step_time_source

WARMUP_STEPS = 1
"""Steps at the start of every attempt that are never steady state (host clock)."""
GPU_WARMUP_STEPS = 2
"""The same on the GPU's clock (step 1: queue fill, DDP's bucket rebuild, allocator growth)."""
CI_LEVEL = 0.95
PHASES = ("warmup", "epoch_boundary", "trace_export", "profiled", "profiler_warmup", "steady")
"""Every step is in exactly one phase; `steps` counts in the summary use these names."""


def median_ci(values: Iterable[float], level: float = CI_LEVEL) -> tuple[float | None, float | None, float | None, float | None]:
    """(median, low, high, coverage): the order-statistic confidence interval of the median.

    With the values sorted x(1) <= ... <= x(n), [x(l), x(n+1-l)] covers the median with probability
    1 - 2 P(B <= l-1), B ~ Binomial(n, 1/2); l is the largest rank keeping that >= `level`. Too few
    values for `level`: the whole range, with the coverage it does have."""
    x = np.sort(np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float))
    n = len(x)
    if n == 0:
        return None, None, None, None
    med = float(np.median(x))
    alpha = 1.0 - level
    cdf = 0.0
    lo_rank = 1
    for l_ in range(1, n // 2 + 1):
        # P(B <= l_-1) accumulated term by term
        cdf_next = cdf + math.comb(n, l_ - 1) * 0.5**n
        if 2 * cdf_next <= alpha:
            lo_rank, cdf = l_, cdf_next
        else:
            break
    hi_rank = n + 1 - lo_rank
    coverage = 1.0 - 2.0 * sum(math.comb(n, k) * 0.5**n for k in range(lo_rank))
    return med, float(x[lo_rank - 1]), float(x[hi_rank - 1]), float(coverage)


def classify_steps(steps: pd.DataFrame, profiler_warmup: int = 0, attempt_starts: Iterable[int] = (), warmup_steps: int | None = None) -> pd.DataFrame:
    """A copy of the step records (columns rank, step, epoch, step_s, batch_size, profiled; gpu_ms and
    trace_export_s where recorded) sorted by rank and step, with `step_time_s` (the step time from
    the run's source: step_stats.step_time_source), `phase` (see the module docstring) and
    `samples_per_s`.

    `attempt_starts`: first steps of resumed attempts (manifest `attempts[].resumed_from_step`); a
    gap in a rank's step numbers starts an attempt too. `profiler_warmup`: the spec's
    `profiler.warmup`, the steps before each run of profiled steps that were traced and discarded."""
    missing = [c for c in ("rank", "step", "step_s") if c not in steps]
    if missing:
        raise ValueError(f"step records lack {', '.join(missing)}")
    d = steps.sort_values(["rank", "step"]).reset_index(drop=True).copy()
    source = step_time_source(d)
    if warmup_steps is None:
        warmup_steps = GPU_WARMUP_STEPS if source == GPU_CLOCK else WARMUP_STEPS
    d["step_time_s"] = step_seconds(d, source)
    exported = (pd.to_numeric(d["trace_export_s"], errors="coerce").fillna(0) > 0).to_numpy() \
        if "trace_export_s" in d else np.zeros(len(d), dtype=bool)
    starts = set(int(s) for s in attempt_starts if s is not None)
    phase = np.full(len(d), "steady", dtype=object)
    rank = d["rank"].to_numpy()
    step = d["step"].to_numpy()
    epoch = d["epoch"].to_numpy() if "epoch" in d else np.zeros(len(d), dtype=int)
    prof = d["profiled"].fillna(False).astype(bool).to_numpy() if "profiled" in d else np.zeros(len(d), dtype=bool)
    since_start = 0
    for i in range(len(d)):
        new_rank = i == 0 or rank[i] != rank[i - 1]
        if new_rank or step[i] in starts or step[i] != step[i - 1] + 1:
            since_start = 0
        if since_start < warmup_steps:
            phase[i] = "warmup"
        elif epoch[i] != epoch[i - 1]:
            phase[i] = "epoch_boundary"
        elif i > 0 and rank[i - 1] == rank[i] and step[i - 1] == step[i] - 1 and exported[i - 1]:
            phase[i] = "trace_export"
        elif prof[i]:
            phase[i] = "profiled"
        since_start += 1
    if profiler_warmup > 0:
        # the `profiler_warmup` steps right before the first step of each run of profiled steps
        for i in range(len(d)):
            first_active = prof[i] and (i == 0 or rank[i - 1] != rank[i] or not prof[i - 1])
            if not first_active:
                continue
            for j in range(i - 1, max(i - 1 - profiler_warmup, -1), -1):
                if rank[j] != rank[i] or phase[j] != "steady":
                    break
                phase[j] = "profiler_warmup"
    d["phase"] = phase
    bs = d["batch_size"].astype(float) if "batch_size" in d else pd.Series(np.nan, index=d.index)
    d["samples_per_s"] = bs / d["step_time_s"].where(d["step_time_s"] > 0)
    d.attrs["step_time_source"] = source
    return d


def job_steps(classified: pd.DataFrame, world: int | None = None) -> pd.DataFrame:
    """Per global step present on every rank (`world` ranks, default: the ranks of the records):
    global batch, the slowest rank's step time (`step_s`, from the run's step-time source), the
    job's samples/s and the step's phase (the first phase in PHASES that any rank had)."""
    ranks = world if world is not None else classified["rank"].nunique()
    g = classified.groupby("step")
    # a step's global batch is known when every rank's record says its batch (a sum that skipped a
    # rank would be a guess, too small by that rank's samples)
    batch = g["batch_size"].sum().where(g["batch_size"].count() == g["batch_size"].size()) if "batch_size" in classified else np.nan
    out = pd.DataFrame(
        {
            "n_ranks": g["rank"].nunique(),
            "global_batch": batch,
            "step_s": g["step_time_s"].max(),
            "phase": g["phase"].agg(lambda p: min(p, key=PHASES.index)),
        }
    ).reset_index()
    out = out[out["n_ranks"] == ranks].drop(columns="n_ranks")
    out["samples_per_s"] = out["global_batch"].astype(float) / out["step_s"].where(out["step_s"] > 0)
    return out.reset_index(drop=True)


def _stats(d: pd.DataFrame, batch_col: str) -> dict[str, Any]:
    counts = {p: int((d["phase"] == p).sum()) for p in PHASES}
    steady = d[d["phase"] == "steady"]
    med, lo, hi, cov = median_ci(steady["samples_per_s"].dropna())
    col = "step_time_s" if "step_time_s" in steady else "step_s"
    smed, slo, shi, _ = median_ci(steady[col].astype(float) * 1e3)
    prof = d[d["phase"] == "profiled"]["samples_per_s"].dropna()
    tot_t = steady[col].sum()
    # samples over time only where every steady step says its batch (else unknown, not a guess)
    batches = steady[batch_col] if batch_col in steady else pd.Series(dtype=float)
    known = len(batches) > 0 and bool(batches.notna().all())
    return {
        "median_samples_per_s": med,
        "ci95_samples_per_s": [lo, hi] if med is not None else None,
        "ci_coverage": cov,
        "rate_samples_per_s": float(batches.sum() / tot_t) if tot_t > 0 and known else None,
        "median_step_ms": smed,
        "ci95_step_ms": [slo, shi] if smed is not None else None,
        "profiled_median_samples_per_s": float(prof.median()) if len(prof) else None,
        "batch": float(batches.median()) if known else None,
        "steps": {"total": int(len(d)), **counts},
    }


def throughput(steps: pd.DataFrame, profiler_warmup: int = 0, attempt_starts: Iterable[int] = (),
               world_ranks: Iterable[int] | None = None) -> tuple[dict[str, Any] | None, pd.DataFrame, pd.DataFrame]:
    """(summary, per-rank step table, job step table) from the step records of a run.

    The summary is None when there are no step records or none carries `batch_size` (older runs,
    trace folders): samples/s cannot be known from a trace alone. `world_ranks`: every rank of the
    job (default: the ranks of the records); the job's figures cover a step only when all of them
    recorded it, so they are null (`missing_ranks` says why) when a rank has no usable record:
    one rank's samples/s is not the job's."""
    if steps is None or steps.empty or "batch_size" not in steps or steps["batch_size"].isna().all():
        return None, pd.DataFrame(), pd.DataFrame()
    d = classify_steps(steps, profiler_warmup, attempt_starts)
    world = sorted(set(int(r) for r in world_ranks)) if world_ranks is not None else sorted(int(r) for r in d["rank"].unique())
    missing = sorted(set(world) - set(int(r) for r in d["rank"].unique()))
    j = job_steps(d[d["rank"].isin(world)], len(world))
    per_rank = [{"rank": int(r), **_stats(g, "batch_size")} for r, g in d.groupby("rank")]
    job = _stats(j, "global_batch")
    job["ranks"] = world
    job["missing_ranks"] = missing
    job["end_to_end_samples_per_s"] = None
    if "t_start" in d and "t_end" in d and len(d) and not missing and d["batch_size"].notna().all():
        wall = float(d["t_end"].max() - d["t_start"].min())
        job["end_to_end_samples_per_s"] = float(d["batch_size"].sum() / wall) if wall > 0 else None
    source = d.attrs.get("step_time_source", "host_clock")
    summary = {
        "unit": "samples/s",
        "level": CI_LEVEL,
        "step_time_source": source,
        "warmup_steps_per_attempt": GPU_WARMUP_STEPS if source == GPU_CLOCK else WARMUP_STEPS,
        "job": job,
        "per_rank": per_rank,
    }
    return summary, d, j
