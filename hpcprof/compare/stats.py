"""Change of a metric between two runs, with a bootstrap confidence interval and a verdict.

Why a bootstrap over steps: step times are skewed (occasional slow steps from the OS, the data
loader, the allocator), so neither a t-interval nor a ratio of medians without an interval says
whether a change is real. Each run's steps are resampled with replacement (independently for the
two runs), the statistic is recomputed, and the 2.5th-97.5th percentiles of the relative change
form the interval. The seed is fixed so the same inputs give the same verdict. The resampling is
by blocks of ceil(sqrt(n)) consecutive steps (circular moving-block bootstrap): step times drift
within a run (on the 2-core VM: 260 -> 200 ms over one 30-step run, a core slowing down for
seconds), and single-step resampling treats that drift as independent noise, giving intervals
too narrow by half on such a run (tests/test_compare.py).

Verdict: the change counts only when the interval excludes zero AND the point estimate is at
least `min_change_pct` away from it. The second condition is there because steps within one run
are not independent of the run (another job on the node, a slower host, the allocator's state):
two runs of one spec differ even when nothing changed, and the within-run bootstrap cannot see
that between-run spread. The default 3% is a floor against trivially small "significant" changes,
not a measured spread: healthy pairs a minute apart differed by 1-14% on the quiet 2-core VM and
by up to x5 when other work shared it (benchmarks/README.md, "Run comparison").
"""

from __future__ import annotations

from dataclasses import dataclass

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
    metric: str
    base: float | None
    value: float | None
    change_pct: float | None
    ci_pct: list[float] | None
    verdict: str

    def as_dict(self) -> dict:
        return {"metric": self.metric, "base": self.base, "value": self.value, "change_pct": self.change_pct, "ci_pct": self.ci_pct, "verdict": self.verdict}


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
    return Change(metric, b, t, change, [lo, hi], verdict)


def simple_change(metric: str, base: float | None, value: float | None) -> Change:
    """A figure with one value per run (HTA's GPU shares): the change, no interval, no verdict."""
    if base is None or value is None:
        return Change(metric, base, value, None, None, "not comparable (missing in one run)")
    change = 100.0 * (value / base - 1.0) if base else None
    return Change(metric, base, value, change, None, "no interval (one value per run)")
