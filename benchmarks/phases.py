"""Where one analysis' wall time goes: the start of each step of `pipeline.analyze` and its length.

Runs `hpcprof.analysis.pipeline.analyze` once in this process (no parse cache unless --cache), with
each step it calls (the map, the reduce, the merged timeline, the tables, the report, the wait for
the chart process) timed, and the map's idle core-seconds (cores x its wall minus the CPU time of
this process and its worker processes). `--cold` empties the page cache first (root only, Linux),
as on a first analysis of traces a job has just written on other nodes.

    .venv/bin/python benchmarks/phases.py TRACE_DIR --out /tmp/phases-out [--cold] [--cache]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import time

from hpcprof.analysis import pipeline
from hpcprof.analysis.outputs.charts import Charts

STEPS = ("run_map", "select_ranks", "reduce_ranks", "merged_timeline", "write_tables", "build_summary",
         "write_report", "write_summary")


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces")
    ap.add_argument("--out", required=True, help="output folder (emptied first)")
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (sync; echo 3 > /proc/sys/vm/drop_caches)")
    ap.add_argument("--cache", action="store_true", help="use the parse cache in OUT/.cache (default: --no-cache)")
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    if args.cold:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    t0 = time.perf_counter()
    log: list[tuple[str, float, float]] = []
    idle: list[float] = []

    def timed(name, fn):
        def call(*a, **k):
            start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
            try:
                return fn(*a, **k)
            finally:
                end = time.perf_counter()
                log.append((name, start - t0, end - start))
                if name == "run_map":  # the map's workers are reaped when it ends: their CPU is counted
                    used = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu
                    idle.append((os.cpu_count() or 1) * (end - start) - used)
        return call

    for name in STEPS:
        setattr(pipeline, name, timed(name, getattr(pipeline, name)))
    Charts.wait = timed("charts.wait", Charts.wait)
    pipeline.analyze(args.traces, out=args.out, use_cache=args.cache, progress=False)
    for name, start, length in log:
        print(f"{name:16s} starts {start:8.2f} s  lasts {length:8.2f} s")
    print(f"{'whole analysis':16s} {time.perf_counter() - t0:8.2f} s; the map's idle core-seconds: {idle[0]:.2f}")


if __name__ == "__main__":
    main()
