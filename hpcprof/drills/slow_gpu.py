"""A slow GPU drill: every compute kernel of one rank takes F times as long, in a copy of a real
multi-rank trace set. The known answer: that rank's GPU is (F - 1) x 100% slower on identical work,
which the analysis' slow-GPU comparison (hpcprof.analysis.reduce.slow_gpu) must name.

Usage (also `python -m hpcprof.drills.slow_gpu --help`):

    python -m hpcprof.drills.slow_gpu SRC OUT --rank R --factor F

SRC is a folder of per-rank traces (as for trace_drill.py); OUT receives the drilled set under the
same file names, SRC is never written. It prints the truth as JSON; `slow_gpu()` returns it.

Which kernels: every compute kernel of rank R in the trace (category `kernel`, not a communication
kernel as the analysis finds them: ranks/comm_kernels.py), in every profiled step and outside them
(a slow GPU is slow throughout). Copies, memsets and collectives keep their durations.

How the trace stays valid (trace_drill.drill_set, the model of trace_drill.py's docstring): each
stretched kernel keeps its start (moved by the shift so far) and ends F x its duration later; every
event of the rank that starts at or after the kernel's original end moves later by its extra time,
so the next kernel on a stream starts at or after the stretched one ends (kernels on one stream
never overlap), launches stay before their kernels, host spans around a shift point grow; the
collectives the rank arrives at later end later on every participant. A stretched kernel's new
duration is written exactly (a float, as newer Kineto writes durations: an integer duration of a
3 µs kernel would turn a 10% stretch into none); shifts stay whole µs (each kernel's extra rounded
up), so integer timestamps stay integers.

Truth: factor, kernels_stretched, compute_ms_before / compute_ms_after (the stretched kernels'
total, measured on the written trace), and trace_drill's job-time increase.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..cliparser import ArgumentParser
from .trace_drill import (
    DEFAULT_TOL_US,
    MAX_STRETCH,
    MAX_TOL_US,
    drill_set,
    in_range,
    match_collectives,
)
from .traces import DrillError, job_times, load_for_drill, timed


def slow_gpu(src, out, rank: int, factor: float, tol_us: float = DEFAULT_TOL_US) -> dict:
    """Write the drilled set to `out` and return the truth (module docstring)."""
    in_range("--factor", factor, 1.0, MAX_STRETCH, "x")
    in_range("--match-tol-us", tol_us, 0.0, MAX_TOL_US, "us")
    out = Path(out)
    ranks = load_for_drill(src, out, rank)
    rt = ranks[rank]
    ks = [e for e in rt.events if timed(e) and str(e.get("cat", "")).lower() == "kernel" and id(e) not in rt.comm_ids()
          and isinstance(e.get("dur"), (int, float))]
    if not ks:
        raise DrillError(f"{rt.path}: no compute kernel to stretch (a CPU trace, or one without kernel activity)")
    before_us = sum(float(e["dur"]) for e in ks)
    before = job_times(ranks)
    info = {"drill": "slow_gpu", "rank": rank, "factor": factor, "kernels_stretched": len(ks), "compute_ms_before": before_us / 1e3}
    info.update(drill_set(ranks, out, rank, match_collectives(ranks, tol_us), before, stretched=ks, stretch=factor, whole_us=True))
    info["compute_ms_after"] = sum(float(e["dur"]) for e in ks) / 1e3  # as written (the events were rewritten in place)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m hpcprof.drills.slow_gpu", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="folder of per-rank Kineto traces (*.json, *.json.gz)")
    ap.add_argument("out", type=Path, help="folder to write the drilled set to (same file names)")
    ap.add_argument("--rank", type=int, required=True, help="the rank whose GPU is made slow")
    ap.add_argument("--factor", type=float, required=True, help="every compute kernel of the rank takes this many times as long (> 1)")
    ap.add_argument("--match-tol-us", type=float, default=DEFAULT_TOL_US, help="end-time tolerance for matching a collective across ranks (us)")
    a = ap.parse_args(argv)
    try:
        info = slow_gpu(a.src, a.out, a.rank, a.factor, tol_us=a.match_tol_us)
    except DrillError as e:
        print(f"python -m hpcprof.drills.slow_gpu: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
