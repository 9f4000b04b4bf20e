"""Analysis at scale: hpcprof analyze (fresh and cached) against HTA, from 8 to 256 ranks and on one 1 GB rank.

Builds N-rank trace sets by tiling the real DLRM traces (tests/data/param_dlrm_8x_v100; trace_sets.py) in
time, then, in the same run and each in a fresh subprocess (benchmarks/measure.py: wall time, peak
RSS of the process tree, of its parent process and of its largest child), measures:

1. 8, 16, 32 ranks (`--ranks`, about `--mb-per-rank` MB of JSON each; the `--repeat-ranks` sets
   `--repeats` times, medians reported): HTA (``TraceAnalysis(trace_dir)`` + temporal, idle-time and
   kernel breakdowns + comm/comp overlap), ``python -m hpcprof.analyze DIR --no-cache`` (fresh, with
   the merged timeline), the same again into the same --out (cached: outputs reused), and into a new
   --out with a parse cache that a run of its own filled before (cache+reduce: the per-rank map read
   from the cache, the reduce, timeline and outputs made again); checks that the per-rank numbers
   (temporal breakdown, overlap, kernel-type totals) are equal;
2. one rank of `--big-mb` MB of JSON: hpcprof fresh, and HTA under its limits;
3. `--scale-ranks` (64, 256) ranks: hpcprof fresh, and HTA under its limits; with
   `--slurm-partition P` (a SLURM cluster reachable: SLURM_CONF set, e.g. the local one of
   tools/localslurm.py) also ``--executor slurm``: the per-rank map as a job array of
   `--array-chunk` ranks per task, at most `--array-parallelism` tasks at once; its wall, the
   submitting command's tree, the array tasks (they run under slurmd, not under the command: every
   process whose command line runs submitit's task entry point is sampled, every 0.25 s) and both
   together, and whether its summary equals the local run's (SLURM_SAME_KEYS).

Walls come from timing runs with nothing sampled (measure.time_only: HTA where its sampled run
finished under the memory limit, fresh and cached, one after the other in each repeat); memory,
the numbers' equality and cache+reduce from the same commands run under the sampler
(measure.measure), whose own CPU on 2 cores lengthened a sampled hpcprof run by about 9%: both
walls are printed.

HTA runs under `--hta-timeout` seconds and `--hta-max-rss-gb` of tree RSS (the machine is shared):
where it stops, the table says at which limit, after how long and at what memory. Every figure is
printed with load1 (the 1-minute load average when its command started). Nothing is asserted.

Tiling: rank r of an N-rank set uses source rank r % 8; its events are repeated K times, copy k
shifted by k x (the source trace's span + a 1 ms gap), with ProfilerStep#s renumbered (#10 -> #10+k)
and correlation / External id / flow ids / Ev Idx / Sequence numbers offset per copy so they stay
unique; distributedInfo.rank/world_size are set to r/N. K is chosen so one rank is about
--mb-per-rank MB of JSON. Metadata ('M') events and the trace-wide instant events are kept once.

    .venv/bin/python benchmarks/analysis_scale.py [--ranks 8,16,32] [--repeats 3] [--repeat-ranks 16]
        [--big-mb 1000] [--scale-ranks 64,256] [--hta-timeout 900] [--hta-max-rss-gb 14]
        [--mb-per-rank 20] [--workers N] [--scratch DIR] [--keep]
        [--slurm-partition P [--array-chunk 16] [--array-parallelism N]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import measure, time_only  # noqa: E402
from trace_sets import build_set, load_sources  # noqa: E402

# ------------------------------------------------------------------------------------ measuring

HTA_SCRIPT = r"""
import json, logging, sys
logging.getLogger("hta").setLevel(logging.ERROR)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
tb = ta.get_temporal_breakdown(visualize=False)
idle, _ = ta.get_idle_time_breakdown(visualize=False)
kt, kall = ta.get_gpu_kernel_breakdown(visualize=False)
ov = ta.get_comm_comp_overlap(visualize=False)
per_rank = {}
for _, row in tb.iterrows():
    per_rank[int(row["rank"])] = {"idle_pct": float(row["idle_time_pctg"]), "compute_pct": float(row["compute_time_pctg"]),
                                  "non_compute_pct": float(row["non_compute_time_pctg"])}
for _, row in ov.iterrows():
    per_rank[int(row["rank"])]["comm_comp_overlap_pct"] = float(row["comp_comm_overlap_pctg"])
json.dump({"per_rank": per_rank, "kernel_types": dict(zip(kt["kernel_type"], map(float, kt["sum"]))),
           "idle_rows": int(len(idle))}, open(sys.argv[2], "w"))
"""


def compare(hta: dict, summary: dict) -> tuple[bool, float]:
    """Whether per-rank temporal/overlap and kernel-type totals agree; the largest difference."""
    ours = {r["rank"]: r for r in summary["per_rank"]}
    worst = 0.0
    if sorted(ours) != sorted(int(k) for k in hta["per_rank"]):
        return False, math.inf
    for k, row in hta["per_rank"].items():
        for key, v in row.items():
            o = ours[int(k)][key]
            if o is None or v is None or (isinstance(v, float) and math.isnan(v)):
                if not (o is None and (v is None or math.isnan(v))):
                    return False, math.inf
                continue
            worst = max(worst, abs(o - v))
    kb = {k["kernel_type"]: k["time_us"] for k in summary["kernel_breakdown"] or []}
    if set(kb) != set(hta["kernel_types"]):
        return False, math.inf
    for k, v in hta["kernel_types"].items():
        worst = max(worst, abs(kb[k] - v) / max(1.0, abs(v)))
    return worst <= 1e-6, worst


# summary.json keys that must be equal whichever executor ran the map (tests/slurm/test_analysis_array.py)
SLURM_SAME_KEYS = ("world_size", "ranks_analyzed", "device", "warnings", "per_rank", "kernel_breakdown",
                   "stragglers", "recommendations", "step_time", "clock_offsets_us", "collectives_matched")
SLURM_TASK = "submitit.core._submit"  # what every submitit array task runs


def _slurm(py: str, d: Path, out: Path, local: dict, a) -> dict:
    """The map of set `d` as a SLURM job array; the measure() figures plus `equal` (against `local`)."""
    shutil.rmtree(out, ignore_errors=True)
    extra = ["--no-cache", "--executor", "slurm", "--slurm-partition", a.slurm_partition, "--array-chunk", str(a.array_chunk),
             "--array-parallelism", str(a.array_parallelism or os.cpu_count() or 1)]
    f = measure(_ours(py, d, out, None, extra), out.with_name(out.name + ".log"), interval=0.25, check=False, extra=SLURM_TASK)
    summ = json.loads((out / "summary.json").read_text()) if f["outcome"] == "ok" else {}
    f["equal"] = bool(summ) and bool(local) and all(summ.get(k) == local.get(k) for k in SLURM_SAME_KEYS)
    f["events"] = (summ.get("timeline") or {}).get("events")
    return f


# ------------------------------------------------------------------------------------ main


def _ours(py: str, d: Path, out: Path, workers: int | None, extra: list[str] = ()) -> list[str]:
    cmd = [py, "-m", "hpcprof.analyze", str(d), "--out", str(out), "--quiet", *extra]
    return cmd + (["--workers", str(workers)] if workers else [])


def _hta_outcome(h: dict) -> str:
    if h["outcome"].startswith("not run"):
        return h["outcome"]
    if h["outcome"] == "ok":
        return f"finished: {h['wall_s']:.1f} s, {h['peak_rss_mb']:.0f} MB"
    return f"{h['outcome']} after {h['wall_s']:.0f} s at {h['peak_rss_mb']:.0f} MB"


def _hta(py: str, d: Path, scratch: Path, tag: str, a) -> tuple[dict, dict | None]:
    """HTA on d under the limits: (measurement, its numbers or None when it did not finish)."""
    if a.no_hta and tag in ("-big",) + tuple(str(n) for n in a.scale):
        return {"wall_s": 0.0, "peak_rss_mb": 0.0, "load1": 0.0, "outcome": "not run (--no-hta)"}, None
    out = scratch / f"hta{tag}.json"
    out.unlink(missing_ok=True)
    m = measure([py, "-c", HTA_SCRIPT, str(d), str(out)], scratch / f"hta{tag}.log", timeout_s=a.hta_timeout,
                max_rss_mb=a.hta_max_rss_gb * 1024, check=False)
    return m, (json.loads(out.read_text()) if m["outcome"] == "ok" and out.is_file() else None)


def _row_sizes(n: int, d: Path, mb: float, a, py: str, scratch: Path, repeats: int) -> dict:
    """Table 1: HTA, fresh, cached and cache+reduce on one set, `repeats` times (medians)."""
    out, out_t = scratch / f"out{n}", scratch / f"out{n}-timing"
    res: dict[str, list[dict]] = {"hta": [], "fresh": [], "cached": [], "reduce": [], "hta_t": [], "fresh_t": [], "cached_t": []}
    all_equal = True
    for rep in range(repeats):
        # the memory (and the numbers): HTA under its limits, sampled (measure) ...
        h, hta = _hta(py, d, scratch, str(n), a)
        res["hta"].append(h)
        # ... then the walls: HTA (only where it finished under its memory limit: a timing run has
        # none), fresh and cached with nothing sampled (measure.time_only), one after the other
        res["hta_t"].append(time_only([py, "-c", HTA_SCRIPT, str(d), str(scratch / f"hta{n}-timing.json")],
                                      scratch / f"hta{n}-timing.log", timeout_s=a.hta_timeout, check=False)
                            if h["outcome"] == "ok" else {"wall_s": math.nan, "load1": 0.0, "outcome": "not run (HTA stopped)"})
        shutil.rmtree(out_t, ignore_errors=True)
        res["fresh_t"].append(time_only(_ours(py, d, out_t, a.workers, ["--no-cache"]), scratch / f"fresh{n}-timing.log"))
        res["cached_t"].append(time_only(_ours(py, d, out_t, a.workers), scratch / f"cached{n}-timing.log"))
        # ... and hpcprof sampled
        shutil.rmtree(out, ignore_errors=True)
        res["fresh"].append(measure(_ours(py, d, out, a.workers, ["--no-cache"]), scratch / f"fresh{n}.log"))
        fresh = json.loads((out / "summary.json").read_text())
        res["cached"].append(measure(_ours(py, d, out, a.workers), scratch / f"cached{n}.log"))
        # cache+reduce: a parse cache filled by a run of its own (the fresh runs above write none:
        # --no-cache), then an analysis into a new --out that finds every rank in it
        out_r, out_fill, cache = scratch / f"out{n}-reduce", scratch / f"out{n}-fill", scratch / f"cache{n}"
        for stale in (out_r, out_fill, cache):
            shutil.rmtree(stale, ignore_errors=True)
        time_only(_ours(py, d, out_fill, a.workers, ["--cache-dir", str(cache)]), scratch / f"fill{n}.log")
        res["reduce"].append(measure(_ours(py, d, out_r, a.workers, ["--cache-dir", str(cache)]), scratch / f"reduce{n}.log"))
        eq = [compare(hta, json.loads((o / "summary.json").read_text())) if hta else (False, math.inf) for o in (out, out, out_r)]
        all_equal = all_equal and all(e for e, _ in eq)
        f, c, r = res["fresh"][-1], res["cached"][-1], res["reduce"][-1]
        ht, ft, ct = res["hta_t"][-1], res["fresh_t"][-1], res["cached_t"][-1]
        print(f"{n} ranks, run {rep + 1}: timing runs: HTA {ht['outcome']} {ht['wall_s']:.1f} s (load1 {ht['load1']:.1f}), fresh {ft['wall_s']:.1f} s, "
              f"cached {ct['wall_s']:.2f} s, fresh/HTA {ft['wall_s'] / ht['wall_s']:.3f}; sampled runs: HTA {_hta_outcome(h)} (load1 {h['load1']:.1f}); "
              f"fresh {f['wall_s']:.1f} s, tree {f['peak_rss_mb']:.0f} MB, "
              f"parent {f['parent_mb']:.0f} MB, largest worker {f['worker_mb']:.0f} MB (load1 {f['load1']:.1f}); cached {c['wall_s']:.2f} s "
              f"(load1 {c['load1']:.1f}); cache+reduce {r['wall_s']:.1f} s (load1 {r['load1']:.1f}); sampled fresh/HTA {f['wall_s'] / h['wall_s']:.3f}; "
              f"numbers equal: {all(e for e, _ in eq)} (max diff {max(x for _, x in eq):.2g}); timeline events "
              f"{(fresh.get('timeline') or {}).get('events')}", flush=True)

    def med(key, field):
        return statistics.median(x[field] for x in res[key])

    row = {"n": n, "mb": mb, "equal": all_equal, "repeats": repeats, "load": max(x["load1"] for k in res for x in res[k]),
           **{f"{k}_{f}": med(k, f) for k in ("hta", "fresh", "cached", "reduce")
              for f in ("wall_s", "peak_rss_mb", "peak_pss_mb", "parent_mb", "worker_mb")}}
    # walls (and their ratios) from the timing runs; the sampled runs' walls kept beside them
    timed = all(x["outcome"] == "ok" for x in res["hta_t"])
    for k in ("hta", "fresh", "cached"):
        row[f"{k}_sampled_wall_s"] = row[f"{k}_wall_s"]
        if timed:
            row[f"{k}_wall_s"] = med(f"{k}_t", "wall_s")
    pairs = zip(res["fresh_t"], res["hta_t"]) if timed else zip(res["fresh"], res["hta"])
    row["fresh_ratios"] = [f["wall_s"] / h["wall_s"] for f, h in pairs]
    row["walls_from"] = "timing runs (nothing sampled)" if timed else "sampled runs (an HTA timing run did not finish)"
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--ranks", default="8,16,32", help="rank counts of table 1, comma-separated (default 8,16,32)")
    ap.add_argument("--repeats", type=int, default=3, help="measure the --repeat-ranks sets this many times, report medians (default 3)")
    ap.add_argument("--repeat-ranks", default="16", help="which rank counts of table 1 are repeated (default 16: the acceptance set)")
    ap.add_argument("--big-mb", type=float, default=1000.0, help="MB of JSON of the one-rank set (default 1000; 0 skips it)")
    ap.add_argument("--scale-ranks", default="64,256", help="rank counts of the scale table, hpcprof fresh and HTA under its limits (default 64,256; '' skips)")
    ap.add_argument("--hta-timeout", type=float, default=900.0, help="stop HTA after this many seconds (default 900)")
    ap.add_argument("--hta-max-rss-gb", type=float, default=14.0, help="stop HTA when its tree RSS passes this (default 14 GB of the 24)")
    ap.add_argument("--mb-per-rank", type=float, default=20.0, help="about this many MB of JSON per rank (default 20)")
    ap.add_argument("--scale-mb", type=float, default=None,
                    help="MB of JSON per rank of the --scale-ranks sets (default: --mb-per-rank; e.g. 1024 ranks at 2.5 MB fit the disk)")
    ap.add_argument("--workers", type=int, default=None, help="hpcprof analyze --workers (default: its own default)")
    ap.add_argument("--scratch", default=None, help="folder for the trace sets and outputs (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (trace sets are reused by the next run with --scratch)")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA on the 1 GB rank and the --scale-ranks sets (hpcprof only)")
    ap.add_argument("--slurm-partition", default=None, help="also analyse the --scale-ranks sets with --executor slurm on this partition")
    ap.add_argument("--array-chunk", type=int, default=16, help="with --slurm-partition: ranks per array task (default 16)")
    ap.add_argument("--array-parallelism", type=int, default=None, help="with --slurm-partition: tasks at once (default: this machine's cores)")
    a = ap.parse_args(argv)
    ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
    rep_ranks = {int(x) for x in a.repeat_ranks.split(",") if x.strip()}
    scale = [int(x) for x in a.scale_ranks.split(",") if x.strip()]
    a.scale = scale
    scratch = Path(a.scratch) if a.scratch else Path(tempfile.mkdtemp(prefix="hpcprof-analysis-scale-", dir="/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    print(f"scratch {scratch}; RSS sampled every 50 ms (psutil); {os.cpu_count()} cores; load1 {os.getloadavg()[0]:.2f} at start", flush=True)

    t = time.perf_counter()
    sources = load_sources()
    scale_mb = a.scale_mb if a.scale_mb is not None else a.mb_per_rank
    sets = {n: build_set(scratch / "traces", n, a.mb_per_rank, sources) for n in sorted(ranks)}
    scale_sets = {n: build_set(scratch / "traces", n, scale_mb, sources) for n in sorted(scale)}
    big = build_set(scratch / "traces", 1, a.big_mb, sources) if a.big_mb > 0 else None
    del sources
    print(f"trace sets ready in {time.perf_counter() - t:.0f} s: "
          + ", ".join(f"{n} ranks x {mb:.1f} MB" for n, (_, mb) in [*sets.items(), *scale_sets.items()])
          + (f", 1 rank x {big[1]:.0f} MB" if big else ""), flush=True)

    rows = [_row_sizes(n, *sets[n], a, py, scratch, a.repeats if n in rep_ranks else 1) for n in ranks]

    big_row = None
    if big:
        d, mb = big
        out = scratch / "out-big"
        shutil.rmtree(out, ignore_errors=True)
        f = measure(_ours(py, d, out, a.workers, ["--no-cache"]), scratch / "fresh-big.log", check=False)
        h, hta = _hta(py, d, scratch, "-big", a)
        eq = compare(hta, json.loads((out / "summary.json").read_text())) if hta and f["outcome"] == "ok" else None
        big_row = {"mb": mb, "fresh": f, "hta": h, "equal": eq}
        print(f"1 rank x {mb:.0f} MB: hpcprof fresh ({f['outcome']}) {f['wall_s']:.1f} s, tree {f['peak_rss_mb']:.0f} MB (x{f['peak_rss_mb'] / mb:.2f} the JSON), "
              f"parent {f['parent_mb']:.0f} MB, largest worker {f['worker_mb']:.0f} MB (load1 {f['load1']:.1f}); HTA {_hta_outcome(h)} "
              f"(load1 {h['load1']:.1f}); numbers equal: {eq[0] if eq else ('HTA not run' if a.no_hta else 'HTA did not finish')}", flush=True)

    scale_rows = []
    for n in scale:
        d, mb = scale_sets[n]
        out = scratch / f"out{n}"
        shutil.rmtree(out, ignore_errors=True)
        f = measure(_ours(py, d, out, a.workers, ["--no-cache"]), scratch / f"fresh{n}.log", check=False)
        summ = json.loads((out / "summary.json").read_text()) if f["outcome"] == "ok" else {}
        h, hta = _hta(py, d, scratch, str(n), a)
        eq = compare(hta, summ) if hta else None
        sl = _slurm(py, d, scratch / f"out{n}-slurm", summ, a) if a.slurm_partition else None
        scale_rows.append({"n": n, "mb": mb, "fresh": f, "hta": h, "equal": eq, "events": (summ.get("timeline") or {}).get("events"),
                           "slurm": sl})
        print(f"{n} ranks x {mb:.1f} MB ({n * mb / 1e3:.1f} GB of JSON): hpcprof fresh ({f['outcome']}) {f['wall_s']:.1f} s, tree {f['peak_rss_mb']:.0f} MB, "
              f"parent {f['parent_mb']:.0f} MB, largest worker {f['worker_mb']:.0f} MB (load1 {f['load1']:.1f}); HTA {_hta_outcome(h)} "
              f"(load1 {h['load1']:.1f}); numbers equal: {eq[0] if eq else ('HTA not run' if a.no_hta else 'HTA did not finish')}", flush=True)
        if sl:
            print(f"{n} ranks, SLURM array ({a.array_chunk} ranks per task, partition {a.slurm_partition}): {sl['outcome']} {sl['wall_s']:.1f} s, "
                  f"submitting tree {sl['peak_rss_mb']:.0f} MB (parent {sl['parent_mb']:.0f} MB), array tasks {sl['extra_mb']:.0f} MB at once "
                  f"(largest {sl['extra_max_mb']:.0f} MB), all together {sl['all_mb']:.0f} MB; summary equal to the local run's: "
                  f"{'yes' if sl['equal'] else 'NO'} (load1 {sl['load1']:.1f})", flush=True)

    # ------------------------------------------------------------------ tables
    print("\n| ranks | MB/rank | runs | HTA s | hpcprof fresh s | cached s | cache+reduce s | fresh/HTA | cached/HTA | tree RSS HTA MB | "
          "tree RSS fresh MB | tree fresh/HTA | parent MB | largest worker MB | parent/HTA | worker/HTA | numbers equal | load1 |")
    print("|" + "---|" * 18)
    for r in rows:
        print(f"| {r['n']} | {r['mb']:.1f} | {r['repeats']} | {r['hta_wall_s']:.1f} | {r['fresh_wall_s']:.1f} | {r['cached_wall_s']:.2f} | "
              f"{r['reduce_wall_s']:.1f} | {r['fresh_wall_s'] / r['hta_wall_s']:.3f} | {r['cached_wall_s'] / r['hta_wall_s']:.3f} | "
              f"{r['hta_peak_rss_mb']:.0f} | {r['fresh_peak_rss_mb']:.0f} | {r['fresh_peak_rss_mb'] / r['hta_peak_rss_mb']:.3f} | "
              f"{r['fresh_parent_mb']:.0f} | {r['fresh_worker_mb']:.0f} | {r['fresh_parent_mb'] / r['hta_peak_rss_mb']:.3f} | "
              f"{r['fresh_worker_mb'] / r['hta_peak_rss_mb']:.3f} | {'yes' if r['equal'] else 'NO'} | {r['load']:.1f} |")
    for r in rows:
        print(f"({r['n']} ranks: walls from {r['walls_from']}; fresh/HTA per run: {', '.join(f'{x:.3f}' for x in r['fresh_ratios'])}; "
              f"the sampled runs' medians: HTA {r['hta_sampled_wall_s']:.1f} s, fresh {r['fresh_sampled_wall_s']:.1f} s "
              f"({r['fresh_sampled_wall_s'] / r['hta_sampled_wall_s']:.3f}), cached {r['cached_sampled_wall_s']:.2f} s)")
    if big_row:
        f, h = big_row["fresh"], big_row["hta"]
        print(f"\n| one rank, MB of JSON | hpcprof fresh s | tree peak MB | peak / JSON size | HTA | load1 |\n|---|---|---|---|---|---|\n"
              f"| {big_row['mb']:.0f} | {f['wall_s']:.1f} | {f['peak_rss_mb']:.0f} | {f['peak_rss_mb'] / big_row['mb']:.2f} | {_hta_outcome(h)} | "
              f"{max(f['load1'], h['load1']):.1f} |")
    if scale_rows:
        print("\n| ranks | GB of JSON | hpcprof fresh s | tree peak MB | parent MB | largest worker MB | timeline events | HTA | numbers equal | load1 |")
        print("|" + "---|" * 10)
        for r in scale_rows:
            f, h = r["fresh"], r["hta"]
            print(f"| {r['n']} | {r['n'] * r['mb'] / 1e3:.1f} | {f['wall_s']:.1f} | {f['peak_rss_mb']:.0f} | {f['parent_mb']:.0f} | "
                  f"{f['worker_mb']:.0f} | {r['events']} | {_hta_outcome(h)} | {('yes' if r['equal'][0] else 'NO') if r['equal'] else '-'} | "
                  f"{max(f['load1'], h['load1']):.1f} |")
    slurm_rows = [r for r in scale_rows if r["slurm"]]
    if slurm_rows:
        print("\n| ranks | SLURM array: wall s | ranks per task | submitting tree MB | parent MB | array tasks at once MB | "
              "largest task MB | all together MB | summary = local | load1 |")
        print("|" + "---|" * 10)
        for r in slurm_rows:
            sl = r["slurm"]
            print(f"| {r['n']} | {sl['wall_s']:.1f} | {a.array_chunk} | {sl['peak_rss_mb']:.0f} | {sl['parent_mb']:.0f} | {sl['extra_mb']:.0f} | "
                  f"{sl['extra_max_mb']:.0f} | {sl['all_mb']:.0f} | {'yes' if sl['equal'] else 'NO'} | {sl['load1']:.1f} |")
    parents = [(r["n"], r["fresh_parent_mb"]) for r in rows] + [(r["n"], r["fresh"]["parent_mb"]) for r in scale_rows]
    print("\nparent peak RSS by ranks: " + ", ".join(f"{n}: {mb:.0f} MB" for n, mb in sorted(parents)))

    def verdict(ok):
        return "MET" if ok else "NOT MET"

    by = {r["n"]: r for r in rows}
    print("\ntargets (issue 21):")
    if 16 in by:
        r = by[16]
        print(f"  16 ranks fresh <= 1/8 of HTA: {r['fresh_wall_s'] / r['hta_wall_s']:.3f} (median of {r['repeats']}) -> "
              f"{verdict(r['fresh_wall_s'] / r['hta_wall_s'] <= 1 / 8)}")
        print(f"  16 ranks cached <= 1/20 of HTA: {r['cached_wall_s'] / r['hta_wall_s']:.3f} -> {verdict(r['cached_wall_s'] / r['hta_wall_s'] <= 1 / 20)}")
        print(f"  16 ranks tree RSS <= 1/4 of HTA: {r['fresh_peak_rss_mb'] / r['hta_peak_rss_mb']:.3f} -> "
              f"{verdict(r['fresh_peak_rss_mb'] / r['hta_peak_rss_mb'] <= 1 / 4)}; numbers equal: {'yes' if r['equal'] else 'NO'}")
    if big_row:
        x = big_row["fresh"]["peak_rss_mb"] / big_row["mb"]
        print(f"  1 GB rank: peak at most 4x its JSON: x{x:.2f} -> {verdict(x <= 4)}")
    for r in scale_rows:
        if r["n"] == 256 and a.scale_mb is None:  # the set: 256 ranks of --mb-per-rank (20 MB: 5.3 GB)
            f = r["fresh"]
            print(f"  256 ranks within 5 min and under 1.5 GB: {f['wall_s']:.0f} s, {f['peak_rss_mb']:.0f} MB -> "
                  f"{verdict(f['wall_s'] <= 300 and f['peak_rss_mb'] < 1536)}; HTA: {_hta_outcome(r['hta'])}")
            if r["slurm"]:
                sl = r["slurm"]
                print(f"  256 ranks through the SLURM array: {sl['wall_s']:.0f} s, {sl['all_mb']:.0f} MB with the array tasks, "
                      f"summary equal to the local run's: {'yes' if sl['equal'] else 'NO'} -> "
                      f"{verdict(sl['outcome'] == 'ok' and sl['equal'] and sl['wall_s'] <= 300 and sl['all_mb'] < 1536)}")
    if not a.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
