"""Run-to-run noise: the spread between runs of one spec, the interval it gives a change between two
arms (groups of replicate runs), and the smallest change the arms can detect.

The model (two levels): a step's value varies around its run's level (step-to-step noise, drift
within the run), and a run's level varies around its arm's level (run-to-run noise: another node, a
neighbour's job, the machine's thermal state). The statistic of a run is its median samples/s (or
step time; the data-wait ratio for the data share), on the log scale, so that changes are relative
and noise is a percentage. The arm's level is the mean of its runs' logs (the geometric mean of
their medians). The error of a difference between arms is then the run-to-run error of those means:
the spread of run statistics within an arm already carries the step-to-step noise of each run's
median (a nested ANOVA / random-effects model's error term for the arm effect is the run-within-arm
mean square). So:

- SD of a run's log statistic, pooled over the two arms compared (a two-sample t-test), on
  `df` = n_base + n_arm - 2 degrees of freedom; when neither has 2 runs, pooled over the other arms
  of the comparison that have (one machine, one time); that all-arm figure is also the machine's
  noise written to noise.json (stats.MetricRuns says why a comparison uses its own two arms);
- interval of a change: d +/- t(0.975, df) * SE, SE^2 = SD^2 (1/n_base + 1/n_test), never below the
  within-run error of the two arm means (block bootstrap of each run's steps, stats.py);
- smallest detectable change (95% two-sided, 80% power): (t(0.975, df) + t(0.80, df)) * SE;
- runs needed per arm for an observed change: the smallest n whose detectable change, with the same
  SD and 2(n - 1) more degrees of freedom, is at most the change.

Why not a bootstrap over runs then steps: with 3 runs per arm a resample of runs takes one of 10
distinct sets, too alike, and its 95% percentile interval covered a true zero change in 87% of
simulated pairs (80% with 2 runs, 92% with 5) against 96% for the t interval
(tests/test_compare_stats.py simulates runs with known run-to-run and step-to-step noise): two to
three times the false verdicts. The t interval is exact for normal run levels and is what
pyperf's compare_to does (a two-sample t-test on the values of separate processes).

One run per arm has no spread to measure: the level then comes from a calibration (`--noise`: a
noise.json that a comparison of replicates wrote, or a percentage), named in the output; with none,
the change keeps only its within-run interval and no faster/slower verdict (NOISE_UNKNOWN).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .student import t_ppf

LEVEL = 0.95
POWER = 0.80
MAX_RUNS_NEEDED = 50
"""Beyond this many runs per arm, 'runs needed' is reported as more than this."""
NOISE_FILE = "noise.json"
CALIBRATED_METRICS = ("samples_per_s", "step_ms")
"""Metrics a calibration carries (relative spreads; the data-wait share can be 0, it is not one)."""


class NoiseError(ValueError):
    """A --noise value that is neither a positive percentage nor a readable noise.json."""


@dataclass
class Noise:
    """Run-to-run spread of one metric: the SD of a run's statistic (log scale: relative; linear
    scale: in the metric's unit), on `df` degrees of freedom (inf: given as a number), and where it
    came from, in words."""

    sd: float
    df: float
    source: str
    scale: str = "log"
    origin: str = "replicates"
    """replicates (measured in this comparison) or calibration (--noise)."""

    def sd_pct(self, mean: float | None = None) -> float | None:
        """The SD in percent of the level (log scale), or of `mean` (linear scale)."""
        if self.scale == "log":
            return 100.0 * math.expm1(self.sd)
        return 100.0 * self.sd / mean if mean else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["df"] = None if math.isinf(self.df) else self.df
        d["sd_pct"] = self.sd_pct() if self.scale == "log" else None
        return d


def transform(values: list[float], scale: str) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.log(v) if scale == "log" else v


def scale_of(arms: list[list[float]]) -> str:
    """log when every run statistic is positive (relative changes), else linear (a data share of 0)."""
    return "log" if all(v > 0 for vals in arms for v in vals) else "linear"


def pooled(arms: list[list[float]], scale: str, labels: list[str] | None = None) -> Noise | None:
    """The run-to-run SD pooled over the arms with 2+ runs; None when no arm has 2 runs."""
    ss, df, used = 0.0, 0, []
    for i, vals in enumerate(arms):
        if len(vals) >= 2:
            y = transform(vals, scale)
            ss += float(((y - y.mean()) ** 2).sum())
            df += len(vals) - 1
            used.append((labels[i] if labels else str(i), len(vals)))
    if df == 0:
        return None
    what = ", ".join(f"{lab} ({n} runs)" for lab, n in used)
    return Noise(math.sqrt(ss / df), float(df), f"replicates in this comparison: {what}; pooled, df {df}", scale, "replicates")


def to_pct(x: float, scale: str, base_level: float) -> float:
    """A difference on the transformed scale as a percent change of the base level."""
    return 100.0 * math.expm1(x) if scale == "log" else 100.0 * x / base_level


def detectable(se: float, df: float) -> float:
    """Smallest difference (transformed scale) detected with 80% power by a 95% two-sided test."""
    return (t_ppf(0.5 + LEVEL / 2, df) + t_ppf(POWER, df)) * se


def runs_needed(sd: float, df_rest: float, change: float, scale: str, base_level: float) -> int | None:
    """Smallest n runs per arm whose detectable change reaches |change| (percent); None: more than
    MAX_RUNS_NEEDED. `df_rest`: degrees of freedom the noise estimate keeps besides these two arms."""
    for n in range(2, MAX_RUNS_NEEDED + 1):
        d = detectable(sd * math.sqrt(2.0 / n), df_rest + 2 * (n - 1))
        if abs(to_pct(d, scale, base_level)) <= abs(change):
            return n
    return None


# ------------------------------------------------------------------------------ calibration files
def write_noise(out: Path, noise: dict[str, Noise], arms: list[dict], context: dict[str, Any]) -> Path:
    """noise.json: the measured run-to-run spread per metric, for later `--noise` use."""
    from ..rundir.layout import atomic_write_text

    doc = {
        "hpcprof_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "what": "run-to-run spread of a run's median, measured on replicate runs; pass this file or its folder to "
                "python -m hpcprof.compare --noise when comparing single runs on the same machine",
        "metrics": {m: n.as_dict() for m, n in noise.items()},
        "arms": arms,
        **context,
    }
    path = out / NOISE_FILE
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return path


def load_noise(value: str) -> dict[str, Noise]:
    """--noise: a percentage (the run-to-run SD of samples/s and step time, e.g. 4 or 4%), or a
    noise.json (or a folder holding one, or a ladder folder holding compare/noise.json)."""
    text = str(value).strip()
    try:
        pct = float(text[:-1] if text.endswith("%") else text)
    except ValueError:
        pct = None
    if pct is not None:
        if not math.isfinite(pct) or pct <= 0 or pct >= 100:
            raise NoiseError(f"--noise {value}: a run-to-run spread must be a percentage above 0 and below 100")
        sd = math.log1p(pct / 100.0)
        return {m: Noise(sd, math.inf, f"--noise {text} (given, not measured)", "log", "calibration") for m in CALIBRATED_METRICS}
    p = Path(text)
    candidates = [p] if p.is_file() else [p / NOISE_FILE, p / "compare" / NOISE_FILE]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise NoiseError(f"--noise {value}: neither a percentage nor a noise.json (nor a folder holding one); "
                         "compare replicate runs first (python -m hpcprof.submit ... --repeat 3, then compare them) to write one")
    try:
        doc = json.loads(path.read_text())
        metrics = doc["metrics"]
        out = {}
        for m in CALIBRATED_METRICS:
            if m in metrics and metrics[m] and metrics[m].get("scale", "log") == "log":
                e = metrics[m]
                sd, df = float(e["sd"]), e.get("df")
                df = math.inf if df is None else float(df)
                if not (math.isfinite(sd) and sd >= 0 and df > 0):
                    raise ValueError(f"metrics.{m}: sd {sd}, df {df}")
                when = doc.get("created", "?")
                out[m] = Noise(sd, df, f"calibration {path} ({e.get('source', 'replicates')}; written {when})", "log", "calibration")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NoiseError(f"--noise {path}: not a readable noise.json ({type(exc).__name__}: {exc})") from None
    if not out:
        raise NoiseError(f"--noise {path}: holds no run-to-run spread of samples/s or step time")
    return out
