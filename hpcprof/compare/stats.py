"""Change of a metric between two arms (groups of replicate runs, often one run each), with a
confidence interval, a verdict, and the smallest change the arms could detect.

Two sources of noise (noise.py has the model): between runs of one spec (the node, a neighbour's
job, the machine's state) and between steps of one run. With replicates (or a calibration) the
interval is the run-to-run one of noise.py; with one run each and no calibration only the
within-run interval below exists, and it says nothing about the spread between runs: the change
then gets no faster/slower verdict (NOISE_UNKNOWN), only its within-run figure, labelled as such.

The within-run interval and the verdict rule (a change counts only when its interval excludes zero
and it is at least `min_change_pct`) are :mod:`hpcprof.analysis.reduce.bootstrap`, which the
analysis of a triggered run's captures uses too (one definition for both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis.reduce.bootstrap import (LEVEL, METRICS, MIN_CHANGE_PCT, NO_CHANGE, Change, compare_metric, point,
                                         verdict_word, within_run_var)
from . import noise as rtr
from .student import t_ppf
from .timing import TimeRelation, welch_df

NOISE_UNKNOWN = "one run each: run-to-run noise unknown"
"""The verdict of a change between single runs without a calibration: its within-run figure only."""
NOT_IN_TIME = "not comparable in time"
"""The verdict of arms run apart in time without a measured drift (timing.py): no faster/slower."""
BASES = ("replicates", "calibration", "within-run")
"""What an interval is made of: run-to-run noise measured on the arms' replicates, taken from a
calibration (--noise), or the steps of one run each (which cannot see the spread between runs)."""


@dataclass
class MetricRuns:
    """One metric over every arm of a comparison: each run's statistic, the scale, and the noise
    levels its intervals use. A change between two arms uses the run-to-run SD of those two arms
    (pooled, as a two-sample t-test does); when neither has 2 runs, the SD pooled over the other
    arms of the comparison (one machine, one time), else a calibration, else none. An arm's own
    interval uses its own runs' SD. Why not always pool over every arm: one arm with an outlier run
    (this VM: one channels_last replicate at 184 samples/s against 362 and 398) would widen every
    other arm's interval; the two arms compared carry the evidence about their own spread."""

    metric: str
    arrays: list[list[np.ndarray]]
    """Per arm, per usable run: the steps (stats.point input)."""
    labels: list[str]
    """The arms' labels (named in the noise's source)."""
    calibration: dict | None = None
    """--noise: metric -> noise.Noise, used when no arm has replicates."""
    pool: list[int] | None = None
    """The arms whose spread is the machine's run-to-run noise (`noise`); None: every arm. An arm of
    runs of different specs is left out: their spread is not noise."""
    drift: Any = None
    """The drift between blocks of runs launched apart (timing.py), measured in this comparison;
    when None, the calibration's (if it measured one)."""
    values: list[list[float]] = field(init=False)
    """Per arm, each usable run's statistic."""
    scale: str = field(init=False)
    """log (relative changes) or linear (a statistic of 0 in some run)."""
    noise: Any = field(init=False)
    """The run-to-run noise pooled over every arm with replicates (the machine's: noise.json), else
    the calibration's, else None."""

    def __post_init__(self):
        stat = METRICS[self.metric][0]
        self.values = [[v for v in (point(x, stat) for x in runs) if v is not None and math.isfinite(v)] for runs in self.arrays]
        self.scale = rtr.scale_of(self.values)
        pool = range(len(self.values)) if self.pool is None else self.pool
        self.noise = rtr.pooled([self.values[i] if i in pool else [] for i in range(len(self.values))], self.scale, self.labels)
        if self.noise is None and self.calibration and self.scale == "log":
            self.noise = self.calibration.get(self.metric)
        if self.drift is None and self.calibration and self.scale == "log" and self.calibration.get(self.metric) is not None:
            self.drift = self.calibration[self.metric].drift
        if self.scale != "log":
            self.drift = None  # measured on the log scale: relative

    def noise_for(self, arms: list[int]) -> Any:
        """The run-to-run noise for these arms: their own replicates, else the comparison's, else
        the calibration (None: none)."""
        own = rtr.pooled([self.values[i] for i in arms], self.scale, [self.labels[i] for i in arms])
        return own if own is not None else self.noise

    def level(self, i: int) -> float | None:
        """The arm's value: geometric mean of its runs' statistics (arithmetic on the linear scale)."""
        v = self.values[i]
        if not v:
            return None
        y = rtr.transform(v, self.scale).mean()
        return float(math.exp(y) if self.scale == "log" else y)

    def _within_se2(self, i: int) -> float:
        stat = METRICS[self.metric][0]
        runs = [x for x in self.arrays[i] if point(x, stat) is not None]
        return sum(within_run_var(x, stat, self.scale) for x in runs) / max(len(runs), 1) ** 2

    def level_ci(self, i: int) -> tuple[list[float] | None, str | None]:
        """The arm level's 95% interval with run-to-run noise, and its basis; (None, None) without a
        noise level (the caller shows a single run's within-run interval instead)."""
        v, n = self.values[i], len(self.values[i])
        nz = self.noise_for([i]) if v else None
        if nz is None:
            return None, None
        y = rtr.transform(v, self.scale).mean()
        se = math.sqrt(max(nz.sd ** 2 / n, self._within_se2(i)))
        h = t_ppf(0.5 + LEVEL / 2, nz.df) * se
        lo, hi = y - h, y + h
        if self.scale == "log":
            lo, hi = math.exp(lo), math.exp(hi)
        return [float(lo), float(hi)], nz.origin

    def change(self, i: int, base: int = 0, min_change_pct: float = MIN_CHANGE_PCT, time: TimeRelation | None = None) -> Change:
        """Arm i against the baseline arm. `time`: how their runs lie in time (timing.relation); arms
        run apart get no verdict unless a drift is known, which their interval then holds."""
        stat, direction = METRICS[self.metric]
        vb, vt = self.values[base], self.values[i]
        b, t = self.level(base), self.level(i)
        runs = [len(vb), len(vt)]
        if b is None or t is None or b == 0:
            return Change(self.metric, b, t, None, None, "not comparable (missing in one run)", runs=runs)
        yb, yt = rtr.transform(vb, self.scale).mean(), rtr.transform(vt, self.scale).mean()
        d = float(yt - yb)
        change = rtr.to_pct(d, self.scale, yb)
        one_each = runs == [1, 1]
        within = None
        if one_each:
            xb = next(x for x in self.arrays[base] if point(x, stat) is not None)
            xt = next(x for x in self.arrays[i] if point(x, stat) is not None)
            within = compare_metric(self.metric, xb, xt, min_change_pct)
        nz = self.noise_for([base, i])
        kind = time.kind if time is not None else None
        if nz is None:
            if within is None:  # cannot happen: a run with 2+ runs always gives a noise level
                return Change(self.metric, b, t, change, None, "not enough runs for an interval", runs=runs)
            note = ("one run each: run-to-run noise unknown, so the interval covers the steps of each run only; "
                    "repeat the runs (--repeat 3) or pass --noise from a calibration for a verdict")
            return Change(self.metric, b, t, within.change_pct, within.ci_pct, NOISE_UNKNOWN if within.ci_pct else within.verdict,
                          "within-run", runs, None, None, None, within.ci_pct, within.verdict, note, kind)
        drift = self.drift if kind == "apart" else None
        var = max(nz.sd ** 2 * (1 / runs[0] + 1 / runs[1]), self._within_se2(base) + self._within_se2(i))
        df = nz.df
        if drift is not None:  # arms run apart: each arm's level also moved with the machine
            df = welch_df([(var, nz.df), (2 * drift.sd ** 2, drift.df)])
            var += 2 * drift.sd ** 2
        se = math.sqrt(var)
        h = t_ppf(0.5 + LEVEL / 2, df) * se
        lo, hi = rtr.to_pct(d - h, self.scale, yb), rtr.to_pct(d + h, self.scale, yb)
        if kind == "apart" and drift is None:
            return Change(self.metric, b, t, change, [lo, hi], f"{NOT_IN_TIME}: {time.words}", nz.origin, runs, nz.as_dict(),
                          None, None, within.ci_pct if within else None, within.verdict if within else None, time.note, kind)
        significant = (lo > 0 or hi < 0) and abs(change) >= min_change_pct
        verdict = verdict_word(self.metric, change, direction) if significant else NO_CHANGE
        mde = abs(rtr.to_pct(rtr.detectable(se, df), self.scale, yb))
        df_rest = nz.df - (runs[0] - 1) - (runs[1] - 1) if nz.origin == "replicates" else nz.df
        needed = None
        if not significant and abs(change) >= min_change_pct and drift is None:  # more runs do not shrink a drift
            needed = rtr.runs_needed(nz.sd, max(df_rest, 0.0), change, self.scale, yb)
        sd_pct = nz.sd_pct(yb)
        each = f"{runs[0]} runs per arm" if runs[0] == runs[1] else f"{runs[0]} and {runs[1]} runs"
        note = (f"{each} {'(one run each) ' if one_each else ''}can see {mde:.1f}% (95%, 80% power), "
                f"with a run-to-run SD of {sd_pct:.1f}% from {nz.source}")
        if not significant:
            if abs(change) < min_change_pct:
                note += f"; this change ({change:+.1f}%) is below --min-change-pct {min_change_pct:g}%"
            elif needed:
                note += f"; this change is {abs(change):.1f}%: run {needed} per arm to see it"
            elif drift is None:
                note += f"; this change is {abs(change):.1f}%: more than {rtr.MAX_RUNS_NEEDED} runs per arm would be needed"
        if drift is not None:
            note += (f"; the arms ran apart in time ({time.words}), so the interval holds the drift between them: SD "
                     f"{drift.sd_pct(yb):.1f}% from {drift.source}")
        elif kind == "unknown":
            note += f"; {time.note}"
        return Change(self.metric, b, t, change, [lo, hi], verdict, nz.origin, runs, nz.as_dict(), mde, needed,
                      within.ci_pct if within else None, within.verdict if within else None, note, kind)


def simple_change(metric: str, base: float | None, value: float | None) -> Change:
    """A figure with one value per run (HTA's GPU shares): the change, no interval, no verdict."""
    if base is None or value is None:
        return Change(metric, base, value, None, None, "not comparable (missing in one run)")
    change = 100.0 * (value / base - 1.0) if base else None
    return Change(metric, base, value, change, None, "no interval (one value per run)", note="mean over each arm's runs")
