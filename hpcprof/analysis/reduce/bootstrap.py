"""Change of a metric between the steps of two runs (or two windows of one run), with a block-
bootstrap interval and a verdict: the within-run statistics that ``python -m hpcprof.compare``
(hpcprof.compare.stats, when there is nothing better than one run each) and the analysis of a
triggered run's captures (hpcprof.analysis.captures: each capture against the baseline window)
share. Here, in the analysis, so that both use one definition and the analysis imports nothing of
compare.

Within-run interval, why a bootstrap over steps: step times are skewed (occasional slow steps from
the OS, the data loader, the allocator), so neither a t-interval nor a ratio of medians without an
interval says whether a change is real. Each run's steps are resampled with replacement
(independently for the two runs), the statistic is recomputed, and the 2.5th-97.5th percentiles of
the relative change form the interval. The seed is fixed so the same inputs give the same verdict.
The resampling is by blocks of ceil(sqrt(n)) consecutive steps (circular moving-block bootstrap):
step times drift within a run (a core slowing down for seconds), and single-step resampling treats
that drift as independent noise, giving intervals too narrow by half on such a run
(tests/test_compare.py).

Verdict: the change counts only when its interval excludes zero AND the point estimate is at
least `min_change_pct` away from it: a floor against trivially small "significant" changes (3% by
default), not a noise estimate (the run-to-run interval is).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

N_BOOT = 2000
SEED = 0
LEVEL = 0.95
MIN_CHANGE_PCT = 3.0

# metric -> (statistic, good direction): "median" of column 0, or "ratio" = sum(col 0) / sum(col 1)
METRICS = {
    "samples_per_s": ("median", +1),
    "step_ms": ("median", -1),
    "data_wait_pct": ("ratio", -1),
}
NO_CHANGE = "no significant change"


@dataclass
class Change:
    """A metric's change from a baseline to another run or arm: the figures, the interval and the
    verdict. The fields after ``verdict`` are filled by ``python -m hpcprof.compare``'s run-to-run
    intervals (hpcprof.compare.stats.MetricRuns); a within-run change leaves them at their defaults."""

    metric: str
    base: float | None
    value: float | None
    change_pct: float | None
    ci_pct: list[float] | None
    verdict: str
    basis: str | None = None
    """One of hpcprof.compare.stats.BASES (None: no interval)."""
    runs: list[int] = field(default_factory=lambda: [1, 1])
    """Runs used in the baseline arm and in this arm."""
    noise: dict | None = None
    """The run-to-run spread used (hpcprof.compare.noise.Noise.as_dict()), None for a within-run interval."""
    detectable_pct: float | None = None
    """Smallest change these arms detect with 80% power at 95% (two-sided), in percent."""
    runs_needed: int | None = None
    """Runs per arm whose detectable change would reach this change (set when no verdict was given)."""
    within_run_ci_pct: list[float] | None = None
    """The within-run bootstrap interval (one run each only)."""
    within_run_verdict: str | None = None
    """What the within-run interval alone would say (one run each only)."""
    note: str = ""
    """One sentence: what the interval is made of, what the arms can see, how many runs would do."""
    time: str | None = None
    """How the two arms' runs lie in time (hpcprof.compare.timing.TimeRelation.kind): interleaved, apart (the
    interval holds a measured drift, or there is no verdict) or unknown; None: not checked."""

    def as_dict(self) -> dict:
        return {"metric": self.metric, "base": self.base, "value": self.value, "change_pct": self.change_pct, "ci_pct": self.ci_pct,
                "verdict": self.verdict, "basis": self.basis, "runs": self.runs, "noise": self.noise,
                "detectable_pct": self.detectable_pct, "runs_needed": self.runs_needed,
                "within_run_ci_pct": self.within_run_ci_pct, "within_run_verdict": self.within_run_verdict, "note": self.note,
                "time": self.time}


def point(x: np.ndarray, stat: str) -> float | None:
    """The statistic on all rows of x (shape (n,) for "median", (n, 2) for "ratio")."""
    if len(x) == 0:
        return None
    if stat == "median":
        return float(np.median(x))
    den = x[:, 1].sum()
    return float(100.0 * x[:, 0].sum() / den) if den > 0 else None


def block_length(n: int) -> int:
    """Steps per resampled block: ceil(sqrt(n)) (25 steady steps -> 5), at least 1."""
    return max(1, int(np.ceil(np.sqrt(n))))


def _boot(x: np.ndarray, stat: str, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Circular moving-block bootstrap: blocks of `block_length` consecutive steps, drawn with
    replacement, so that drift within the run (slow and fast stretches) stays in the resamples."""
    n = len(x)
    L = block_length(n)
    starts = rng.integers(0, n, size=(n_boot, -(-n // L)))
    idx = ((starts[:, :, None] + np.arange(L)[None, None, :]) % n).reshape(n_boot, -1)[:, :n]
    if stat == "median":
        return np.median(x[idx], axis=1)
    return 100.0 * x[idx, 0].sum(axis=1) / np.maximum(x[idx, 1].sum(axis=1), 1e-300)


def verdict_word(metric: str, change_pct: float, direction: int) -> str:
    better = change_pct * direction > 0
    if metric in ("samples_per_s", "step_ms"):
        return "faster" if better else "slower"
    return "lower" if change_pct < 0 else "higher"


def compare_metric(metric: str, base: np.ndarray, test: np.ndarray, min_change_pct: float = MIN_CHANGE_PCT, n_boot: int = N_BOOT, seed: int = SEED) -> Change:
    """Relative change of `metric` from base to test, in percent, with its bootstrap interval."""
    stat, direction = METRICS[metric]
    b, t = point(base, stat), point(test, stat)
    if b is None or t is None or b == 0:
        return Change(metric, b, t, None, None, "not comparable (missing in one run)")
    change = 100.0 * (t / b - 1.0)
    if len(base) < 2 or len(test) < 2:
        return Change(metric, b, t, change, None, "not enough steps for an interval")
    rng = np.random.default_rng(seed)
    bb = _boot(base, stat, rng, n_boot)
    tb = _boot(test, stat, rng, n_boot)
    ok = bb != 0
    rel = 100.0 * (tb[ok] / bb[ok] - 1.0)
    lo, hi = (float(v) for v in np.percentile(rel, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2]))
    significant = (lo > 0 or hi < 0) and abs(change) >= min_change_pct
    verdict = verdict_word(metric, change, direction) if significant else NO_CHANGE
    return Change(metric, b, t, change, [lo, hi], verdict, "within-run")


def within_run_var(x: np.ndarray, stat: str, scale: str, n_boot: int = 500, seed: int = SEED) -> float:
    """Variance of one run's statistic (transformed scale) from the block bootstrap of its steps."""
    if len(x) < 2:
        return 0.0
    b = _boot(x, stat, np.random.default_rng(seed), n_boot)
    b = b[np.isfinite(b) & (b > 0)] if scale == "log" else b[np.isfinite(b)]
    if len(b) < 2:
        return 0.0
    return float(np.var(np.log(b) if scale == "log" else b, ddof=1))
