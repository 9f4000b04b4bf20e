"""python -m hpcprof.compare RUN_OR_TRACES ... [--out DIR]

Compare runs: the first argument (or the first arm) is the baseline. Each argument is a run
directory (runs/<name>), an analysis folder (runs/<name>/analysis) or a folder of Kineto traces;
what is not analysed yet is analysed first. Replicate runs (submit/ladder --repeat N) are grouped
into one arm, and their spread between runs goes into every interval. Writes compare.json,
noise.json (with replicates), tables/*.csv, plots/*.png and compare.html into --out (default:
compare-<baseline>-vs-<last>) and prints a table: samples/s, step time, data-wait share, GPU idle
share, and per arm the change against the baseline with its 95% interval, what the interval is made
of (replicates, a calibration, or within-run only), a verdict (faster / slower / no significant
change) and the smallest change the runs could detect. Arms whose runs did not run interleaved in
time get "not comparable in time" unless a calibration measured the machine's drift between runs
launched apart (docs/compare.md, "Arms run apart in time"). One run given twice counts once.

    python -m hpcprof.compare runs/before-r1 runs/before-r2 runs/before-r3 runs/after-r1 runs/after-r2 runs/after-r3
    python -m hpcprof.compare --group old=runs/a,runs/b --group new=runs/c,runs/d
    python -m hpcprof.compare runs/x runs/y --noise compare-calibration     # one run each, noise from replicates run earlier
    python -m hpcprof.compare runs/h1-r* runs/h2-r* --group-by spec --out calib   # healthy sets launched apart: noise and drift
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Sequence

from ..analysis.reduce.bootstrap import MIN_CHANGE_PCT
from ..cliparser import ArgumentParser, run_guarded
from .arms import GROUP_BY


def default_out(paths: Sequence[str]) -> Path:
    def name(p: str) -> str:
        q = Path(p).resolve()
        return (q.parent.name if q.name in ("analysis", "traces") else q.name) or "run"

    return Path(f"compare-{name(paths[0])}-vs-{name(paths[-1])}")


def percentage(text: str) -> float:
    """argparse type: a finite percentage of 0 or more."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage (a number of 0 or more), got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite percentage of 0 or more, got {text}")
    return v


def group_arg(text: str) -> tuple[str, list[str]]:
    """argparse type of --group: LABEL=RUN[,RUN...]."""
    label, eq, rest = text.partition("=")
    paths = [p for p in rest.split(",") if p]
    if not eq or not label.strip() or not paths:
        raise argparse.ArgumentTypeError(f"expected LABEL=RUN[,RUN...] (e.g. before=runs/a,runs/b), got {text!r}")
    return label.strip(), paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m hpcprof.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", metavar="RUN_OR_TRACES", help="run directories, analysis folders or trace folders; the first is the baseline")
    ap.add_argument("--out", default=None, help="output folder (default: compare-<first>-vs-<last> in the current folder)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes when a run must be analysed first")
    ap.add_argument("--no-cache", action="store_true", help="analyse again even when the analysis is current")
    ap.add_argument("--min-change-pct", type=percentage, default=MIN_CHANGE_PCT,
                    help=f"smallest change that can be called faster/slower, a floor under the interval (default {MIN_CHANGE_PCT}%%)")
    ap.add_argument("--group-by", choices=GROUP_BY, default="replicate",
                    help="how runs form arms: replicate = the runs of one --repeat set (manifest.json replicate; default), "
                         "spec = every run of one spec, none = each argument alone")
    ap.add_argument("--group", type=group_arg, action="append", default=None, metavar="LABEL=RUN[,RUN...]",
                    help="an arm given explicitly (repeat the flag for each arm; the first is the baseline); replaces the positional runs")
    ap.add_argument("--noise", default=None, metavar="PCT|NOISE_JSON",
                    help="run-to-run noise for arms of one run each: a noise.json written by an earlier comparison of replicates "
                         "(or its folder; with a drift, it also allows a verdict on arms run apart in time), or the SD between "
                         "runs in percent (e.g. 4)")
    ap.add_argument("--no-op-deltas", action="store_true", help="skip the operator/kernel deltas (HTA TraceDiff)")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    a = ap.parse_args(argv)
    if a.group and a.paths:
        ap.error("give the runs either as arguments or with --group LABEL=RUN,RUN..., not both")
    paths = [p for _, ps in a.group for p in ps] if a.group else a.paths
    if len(paths) < 2:
        ap.error("give at least two runs: the baseline first, then the runs to compare with it (or 2+ replicates of one arm)")
    from . import CompareError, compare, console_table

    out = Path(a.out) if a.out else default_out(paths)
    result, rc = run_guarded("hpcprof.compare", lambda: compare(
        [] if a.group else a.paths, out, workers=a.workers, use_cache=not a.no_cache, min_change_pct=a.min_change_pct,
        progress=not a.quiet, op_deltas=not a.no_op_deltas, group_by=a.group_by, groups=a.group, noise=a.noise),
        (CompareError,), "comparison")
    if rc is not None:
        return rc
    print(console_table(result))
    return 0
