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
    drift: "Noise | None" = None
    """The drift of the machine between runs launched at different times (timing.py): the SD of
    the level of a block of runs run together (a replicate set, a round of interleaved sets) between
    blocks; None: not measured. Arms that did not run interleaved need it for a verdict."""

    def sd_pct(self, mean: float | None = None) -> float | None:
        """The SD in percent of the level (log scale), or of `mean` (linear scale)."""
        if self.scale == "log":
            return 100.0 * math.expm1(self.sd)
        return 100.0 * self.sd / mean if mean else None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "drift"}
        d["df"] = None if math.isinf(self.df) else self.df
        d["sd_pct"] = self.sd_pct() if self.scale == "log" else None
        if self.drift is not None:
            d["drift"] = self.drift.as_dict()
            d["drift"].pop("drift")
        else:
            d["drift"] = None
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
    """noise.json: the measured run-to-run spread per metric (with the drift between blocks of runs
    launched apart, when measured), for later `--noise` use; `arms`: the arms and runs it measured."""
    from ..rundir.layout import atomic_write_text

    doc = {
        "hpcprof_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "what": "run-to-run spread of a run's median, measured on replicate runs (and, as drift, the spread of the level "
                "of sets of runs launched apart); pass this file or its folder to python -m hpcprof.compare --noise when "
                "comparing single runs, or arms that did not run interleaved, on the same machine",
        "metrics": {m: n.as_dict() for m, n in noise.items()},
        "arms": arms,
        **context,
    }
    path = out / NOISE_FILE
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return path



def load_noise(value: str) -> dict[str, Noise]:
    """--noise: a percentage (the run-to-run SD of samples/s and step time, e.g. 4 or 4%; no drift),
    or a noise.json (or a folder holding one, or a ladder folder holding compare/noise.json).
    NoiseError, in one line naming the file and the field, for anything else: the file is the
    user's to edit, so every field is checked for its type (a bool is not a number) and range."""
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
        out = _read_calibration(path)
    except _Bad as exc:
        raise NoiseError(f"--noise {path}: not a readable noise.json: {exc}") from None
    if not out:
        raise NoiseError(f"--noise {path}: holds no run-to-run spread of samples/s or step time")
    return out


class _Bad(ValueError):
    """What is wrong with a calibration file, naming the field."""


def _kind(x: Any) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, str):
        return f"the text {x[:20]!r}"
    return {type(None): "null", list: "a list", dict: "an object"}.get(type(x), type(x).__name__)


def _number(x: Any, where: str) -> float:
    """A JSON number as a finite float; a bool, a text or a number too large for a float is not one."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _Bad(f"{where} is {_kind(x)}, not a number")
    try:
        v = float(x)
    except OverflowError:
        raise _Bad(f"{where} is a number too large for a float") from None
    if not math.isfinite(v):
        raise _Bad(f"{where} is {v}, not a finite number")
    return v


def _spread(e: Any, where: str) -> tuple[float, float]:
    """(sd, df) of a metric entry or its drift: sd on the log scale, 0 or more, whose percentage is
    a finite number; df above 0, or null (known exactly: a given spread)."""
    if not isinstance(e, dict):
        raise _Bad(f"{where} is {_kind(e)}, not an object")
    if "sd" not in e:
        raise _Bad(f"{where}.sd is missing")
    sd = _number(e["sd"], f"{where}.sd")
    if sd < 0:
        raise _Bad(f"{where}.sd is {sd:g}: a spread is 0 or more")
    try:
        math.expm1(sd)
    except OverflowError:
        raise _Bad(f"{where}.sd is {sd:g}: too large for a spread on the log scale (its percentage overflows)") from None
    df = e.get("df")
    df = math.inf if df is None else _number(df, f"{where}.df")
    if df <= 0:
        raise _Bad(f"{where}.df is {df:g}: degrees of freedom are above 0")
    return sd, df


def _read_calibration(path: Path) -> dict[str, Noise]:
    try:
        doc = json.loads(path.read_text())
    except RecursionError:
        raise _Bad("nested too deeply to read (RecursionError)") from None
    except OSError as exc:
        raise _Bad(f"cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise _Bad(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _Bad(f"the file holds {_kind(doc)}, not an object")
    if "metrics" not in doc:
        raise _Bad("no field metrics")
    metrics = doc["metrics"]
    if not isinstance(metrics, dict):
        raise _Bad(f"metrics is {_kind(metrics)}, not an object")
    created = doc.get("created") if isinstance(doc.get("created"), str) else "?"
    out = {}
    for m in CALIBRATED_METRICS:
        e = metrics.get(m)
        if e is None:
            continue
        where = f"metrics.{m}"
        if not isinstance(e, dict):
            raise _Bad(f"{where} is {_kind(e)}, not an object")
        scale = e.get("scale", "log")
        if not isinstance(scale, str):
            raise _Bad(f"{where}.scale is {_kind(scale)}, not \"log\" or \"linear\"")
        if scale != "log":
            continue  # a linear spread is in the unit of its comparison: not one for another comparison
        sd, df = _spread(e, where)
        source = e["source"] if isinstance(e.get("source"), str) else "replicates"
        drift = None
        if e.get("drift") is not None:
            dsd, ddf = _spread(e["drift"], f"{where}.drift")
            dsource = e["drift"]["source"] if isinstance(e["drift"].get("source"), str) else "sets launched apart"
            drift = Noise(dsd, ddf, f"calibration {path} ({dsource}; written {created})", "log", "calibration")
        out[m] = Noise(sd, df, f"calibration {path} ({source}; written {created})", "log", "calibration", drift)
    return out
