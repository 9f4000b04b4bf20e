"""python -m hpcprof.analyze RUN_DIR|TRACE_FOLDER [--out DIR] [--workers N] [--no-cache] [--ranks R ...]

Analyse every rank's trace (HTA breakdowns per rank, stragglers across ranks) and write
summary.json, tables/, plots/ and report.html into RUN_DIR/analysis (or --out).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

if __name__ == "__main__":  # before the imports below (pandas...: seconds), Ctrl-C is one line
    from hpcprof.cliparser import quiet_until_main

    quiet_until_main("hpcprof.analyze")

from hpcprof.analysis import AnalysisError, analyze, console_summary  # noqa: E402
from hpcprof.analysis.executors import EXECUTORS  # noqa: E402
from hpcprof.cliparser import ArgumentParser, main_handles_interrupts, run_guarded  # noqa: E402
from hpcprof.launch.analysis_array import add_slurm_arguments, slurm_options_from_args  # noqa: E402

__all__ = ["analyze", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m hpcprof.analyze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="run directory (runs/<name>) or a folder of Kineto traces (*.json, *.json.gz)")
    ap.add_argument("--out", default=None, help="output folder (default: <path>/analysis)")
    ap.add_argument("--workers", type=int, default=None, help="processes for the per-rank map, this one and N-1 forked workers (default: min(cores, ranks, 8))")
    ap.add_argument("--no-cache", action="store_true", help="parse every trace again and write nothing into the parse cache")
    ap.add_argument("--cache-dir", default=None, help="parse cache folder (default: <out>/.cache)")
    ap.add_argument("--ranks", type=int, nargs="+", default=None, help="analyse only these ranks")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--timeline-steps", type=int, nargs="+", default=None, metavar="STEP",
                    help="profiled steps of the merged timeline analysis/timeline.pt.trace.json.gz (default: every profiled step)")
    ap.add_argument("--timeline-max-events", type=int, default=None, metavar="N",
                    help="size budget of the merged timeline; low-value events are dropped first and counted (default: 1000000)")
    ap.add_argument("--executor", choices=EXECUTORS, default="local", help="run the per-rank map in worker processes here (local) or as a SLURM job array (slurm)")
    add_slurm_arguments(ap)
    a = ap.parse_args(argv)
    try:
        slurm = slurm_options_from_args(a)
    except ValueError as exc:
        ap.error(str(exc))
    main_handles_interrupts()
    summary, rc = run_guarded("hpcprof.analyze", lambda: analyze(
        a.path, out=a.out, workers=a.workers, use_cache=not a.no_cache, ranks=a.ranks, cache_dir=a.cache_dir,
        progress=not a.quiet, executor=a.executor, slurm=slurm, timeline_steps=a.timeline_steps,
        timeline_max_events=a.timeline_max_events), (AnalysisError,), "analysis")
    if rc is not None:
        return rc
    print(console_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
