"""Everything HTA (Holistic Trace Analysis): the one place hpcprof imports the `hta` module.

- frame.py: HTA's per-rank frame and `Trace` built from hpcprof's one decode of a trace (equal to
  HTA's own parser's, checked against the installed release; HTA's loader where they differ);
- analyzers.py: HTA's temporal, idle-time, overlap and kernel breakdowns on one rank;
- breakdown.py: those breakdowns replayed on numpy with HTA's exact numbers (calling HTA's
  analyzers would break the 256-rank time floor: benchmarks/README.md, "HTA's per-rank analyzers or
  hpcprof's replay"), checked against HTA's own functions on every trace of tests/data, and handing
  every case it cannot replay exactly to HTA's functions;
- launches.py: HTA's kernel-launch statistics of one rank and their summary;
- diff.py: HTA's `TraceDiff` between one rank of each of two runs (``python -m hpcprof.compare``).

Works with HolisticTraceAnalysis 0.5 and traceinsight 0.6 (the same `hta` module); which release
ran is read by hpcprof/hta_release.py. Nothing here imports hpcprof's per-rank map or reduce: they
call into this package.
"""
