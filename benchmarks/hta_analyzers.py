"""HTA's per-rank analyzers against hpcprof's replay of them (analysis/hta/breakdown.py), on one trace.

Both run on the same HTA `Trace` (loaded once by HTA's own parser), interleaved, `--repeats` times
each; prints each one's CPU seconds (median), the ratio, and whether the results are equal (the
tests check equality on every trace of tests/data: tests/analysis/test_gpu_breakdown.py,
test_fast_loader.py). Why it exists: issue 34 asked to call HTA's analyzers instead of the replay;
this is the figure behind keeping the replay (benchmarks/README.md).

    .venv/bin/python benchmarks/hta_analyzers.py TRACE [--rank R] [--repeats 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics

import pandas as pd


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _same(a: dict, b: dict) -> bool:
    for key in ("temporal", "idle", "kernel_type", "kernels_top"):
        try:
            pd.testing.assert_frame_equal(a[key].reset_index(drop=True), b[key].reset_index(drop=True),
                                          check_dtype=False)
        except AssertionError:
            return False
    return a["overlap_pct"] == b["overlap_pct"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from hpcprof.analysis.hta import analyzers as hta_rank

    trace, _ = hta_rank.load_hta_trace(args.trace, args.rank)
    runs = {"replay": lambda: hta_rank.classified_analyses(trace, args.rank),
            "hta": lambda: hta_rank.hta_analyses(trace, args.rank)}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    out: dict[str, dict] = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            c0 = _cpu()
            out[name] = fn()
            cpu[name].append(_cpu() - c0)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"HTA's analyzers: {med['hta']:.3f} CPU-s, replay: {med['replay']:.3f} CPU-s "
          f"(x{med['hta'] / med['replay']:.1f}; {args.repeats} each, interleaved); "
          f"results equal: {'yes' if _same(out['hta'], out['replay']) else 'NO'}")


if __name__ == "__main__":
    main()
