"""python -m hpcprof.compare RUN_OR_TRACES ... [--out DIR]

Compare runs: the first argument is the baseline. Each argument is a run directory (runs/<name>),
an analysis folder (runs/<name>/analysis) or a folder of Kineto traces; what is not analysed yet is
analysed first. Writes compare.json, tables/*.csv, plots/*.png and compare.html into --out
(default: compare-<baseline>-vs-<last>) and prints a table: samples/s, step time, data-wait share,
GPU idle share, and per run the change against the baseline with its 95% bootstrap interval and a
verdict (faster / slower / no significant change).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from ..cliparser import ArgumentParser, run_guarded
from .stats import MIN_CHANGE_PCT


def default_out(paths: Sequence[str]) -> Path:
    def name(p: str) -> str:
        q = Path(p).resolve()
        return (q.parent.name if q.name in ("analysis", "traces") else q.name) or "run"

    return Path(f"compare-{name(paths[0])}-vs-{name(paths[-1])}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m hpcprof.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", metavar="RUN_OR_TRACES", help="run directories, analysis folders or trace folders; the first is the baseline")
    ap.add_argument("--out", default=None, help="output folder (default: compare-<first>-vs-<last> in the current folder)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes when a run must be analysed first")
    ap.add_argument("--no-cache", action="store_true", help="analyse again even when the analysis is current")
    ap.add_argument("--min-change-pct", type=float, default=MIN_CHANGE_PCT,
                    help=f"smallest change that can be called faster/slower (default {MIN_CHANGE_PCT}%%: the spread between identical runs)")
    ap.add_argument("--no-op-deltas", action="store_true", help="skip the operator/kernel deltas (HTA TraceDiff)")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    a = ap.parse_args(argv)
    if len(a.paths) < 2:
        ap.error("give at least two runs: the baseline first, then the runs to compare with it")
    from . import CompareError, compare, console_table

    out = Path(a.out) if a.out else default_out(a.paths)
    result, rc = run_guarded("hpcprof.compare", lambda: compare(
        a.paths, out, workers=a.workers, use_cache=not a.no_cache, min_change_pct=a.min_change_pct,
        progress=not a.quiet, op_deltas=not a.no_op_deltas), (CompareError,), "comparison")
    if rc is not None:
        return rc
    print(console_table(result))
    return 0
