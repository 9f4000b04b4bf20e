"""Analysis at scale: hpcprof analyze (fresh and cached) against HTA on 8, 16 and 32 ranks.

Builds N-rank trace sets by tiling the real DLRM traces (../shared/traces/param_dlrm_8x_v100) in
time, then, in the same run and each in a fresh subprocess, times:

- HTA: ``TraceAnalysis(trace_dir)`` + temporal, idle-time and kernel breakdowns + comm/comp overlap,
- ``python -m hpcprof.analyze DIR --no-cache`` (fresh parse),
- ``python -m hpcprof.analyze DIR`` again into the same --out ("cached": a user's second analyze;
  outputs may be reused whole when nothing changed),
- ``python -m hpcprof.analyze DIR --out NEW --cache-dir <first out>/.cache`` ("cache+reduce": every
  rank from the parse cache, the cross-rank reduce, tables and plots done again),

measuring wall time and the peak RSS of the whole process tree (parent + every child, summed at
each sample, sampled every ~50 ms; also the summed PSS, which counts pages shared between a parent
and its forked workers once instead of once per process), checks that the per-rank numbers (temporal breakdown, overlap,
kernel-type totals) agree, and prints a table with the ratios against HTA and the targets of
issue 5. Nothing is asserted: the numbers are printed.

Tiling: rank r of an N-rank set uses source rank r % 8; its events are repeated K times, copy k
shifted by k x (the source trace's span + a 1 ms gap), with ProfilerStep#s renumbered (#10 -> #10+k)
and correlation / External id / flow ids / Ev Idx / Sequence numbers offset per copy so they stay
unique; distributedInfo.rank/world_size are set to r/N. K is chosen so one rank is about
--mb-per-rank MB of JSON. Metadata ('M') events and the trace-wide instant events are kept once.

    .venv/bin/python benchmarks/analysis_scale.py [--ranks 8,16,32] [--mb-per-rank 20] [--workers N]
        [--scratch DIR] [--keep] [--repeats 1]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = (REPO / ".." / "shared" / "traces" / "param_dlrm_8x_v100").resolve()
SOURCE_RANKS = 8
GAP_US = 1000
ID_KEYS = ("External id", "correlation", "Ev Idx", "Sequence number")

# ------------------------------------------------------------------------------------ trace sets


def _load_sources() -> dict[int, dict]:
    docs = {}
    for f in sorted(SOURCE.glob("*.json*")):
        raw = f.read_bytes()
        doc = json.loads(gzip.decompress(raw) if f.name.endswith(".gz") else raw)
        docs[int(doc["distributedInfo"]["rank"])] = doc
    if sorted(docs) != list(range(SOURCE_RANKS)):
        raise SystemExit(f"{SOURCE}: expected ranks 0..{SOURCE_RANKS - 1}, found {sorted(docs)}")
    return docs


def _tile(doc: dict, copies: int) -> list:
    """The doc's events repeated `copies` times in time, ids and step numbers kept unique."""
    ev = doc["traceEvents"]
    timed = [e for e in ev if isinstance(e.get("ts"), (int, float)) and e.get("ph") not in ("M", "i") and e.get("cat") != "Trace"]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    shift = int(t1 - t0) + GAP_US
    id_span = 1 + max(
        [int(e["args"][k]) for e in ev for k in ID_KEYS if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)]
        + [int(e["id"]) for e in ev if isinstance(e.get("id"), int)]
        + [0]
    )
    tids = {id(e) for e in timed}
    once = [e for e in ev if id(e) not in tids]  # metadata, trace span, instants: kept once
    out = []
    for e in once:
        e = copy.deepcopy(e)
        if e.get("cat") == "Trace" and "dur" in e:
            e["dur"] = int(e["dur"] + shift * (copies - 1))
        elif e.get("ph") == "i" and e.get("name") == "Record Window End":
            e["ts"] = e["ts"] + shift * (copies - 1)
        out.append(e)
    for k in range(copies):
        for e in timed:
            e = dict(e)
            e["ts"] = e["ts"] + k * shift
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * id_span
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k}"
            a = e.get("args")
            if isinstance(a, dict):
                a = dict(a)
                for key in ID_KEYS:
                    if isinstance(a.get(key), int) and a[key] >= 0:
                        a[key] = a[key] + k * id_span
                e["args"] = a
            out.append(e)
    return out


def build_set(root: Path, n: int, mb_per_rank: float, sources: dict[int, dict]) -> tuple[Path, float]:
    """Write an n-rank trace folder under root (reused when already built with the same parameters)."""
    d = root / f"ranks{n}-mb{mb_per_rank:g}"
    stamp = d / ".built"
    if stamp.is_file():
        return d, json.loads(stamp.read_text())["mb_per_rank"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    one = len(json.dumps(sources[0]).encode())
    copies = max(1, round(mb_per_rank * 1e6 / one))
    tiled = {s: _tile(sources[s], copies) for s in sorted({r % SOURCE_RANKS for r in range(n)})}
    sizes = []
    for r in range(n):
        src = sources[r % SOURCE_RANKS]
        doc = {k: v for k, v in src.items() if k != "traceEvents"}
        doc["distributedInfo"] = dict(src["distributedInfo"], rank=r, world_size=n)
        doc["traceEvents"] = tiled[r % SOURCE_RANKS]
        p = d / f"rank{r:03d}.pt.trace.json"
        tmp = p.with_name("." + p.name)
        tmp.write_text(json.dumps(doc))  # one dumps is much faster than json.dump's chunked writes
        tmp.replace(p)
        sizes.append(p.stat().st_size)
    mb = statistics.mean(sizes) / 1e6
    stamp.write_text(json.dumps({"ranks": n, "copies": copies, "mb_per_rank": mb}))
    return d, mb


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


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree_rss(proc) -> tuple[int, int]:
    """(summed RSS, summed PSS) of proc and all its descendants, in bytes."""
    import psutil

    rss = pss = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            pss += _pss(p.pid)
        except psutil.Error:
            pass
    return rss, pss


def _tree_rss_proc(pid: int) -> tuple[int, int]:
    """The same without psutil: walk /proc for descendants of pid and sum VmRSS."""
    parents = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as fh:
                    parents[int(e)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    rss = pss = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/statm") as fh:
                rss += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            pss += _pss(p)
        except (OSError, IndexError, ValueError):
            pass
    return rss, pss


def measure(cmd: list[str], log: Path, interval: float = 0.05) -> dict:
    """Run cmd in a fresh subprocess; wall time and peak summed RSS of its process tree."""
    try:
        import psutil
    except ImportError:
        psutil = None
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
        peak = peak_pss = 0
        stop = threading.Event()

        def sample():
            nonlocal peak, peak_pss
            proc = psutil.Process(p.pid) if psutil else None
            while not stop.is_set():
                rss, pss = _tree_rss(proc) if proc is not None else _tree_rss_proc(p.pid)
                peak, peak_pss = max(peak, rss), max(peak_pss, pss)
                stop.wait(interval)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        rc = p.wait()
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
    if rc != 0:
        raise SystemExit(f"command failed (exit {rc}): {' '.join(cmd)}\n--- {log}:\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "peak_rss_mb": peak / 2**20, "peak_pss_mb": peak_pss / 2**20, "load1": load}


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


# ------------------------------------------------------------------------------------ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--ranks", default="8,16,32", help="comma-separated rank counts (default 8,16,32)")
    ap.add_argument("--mb-per-rank", type=float, default=20.0, help="about this many MB of JSON per rank (default 20)")
    ap.add_argument("--workers", type=int, default=None, help="hpcprof analyze --workers (default: its own default)")
    ap.add_argument("--scratch", default=None, help="folder for the trace sets and outputs (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (trace sets are reused by the next run with --scratch)")
    ap.add_argument("--repeats", type=int, default=1, help="measure each command this many times, report the median (default 1)")
    a = ap.parse_args(argv)
    ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
    scratch = Path(a.scratch) if a.scratch else Path(tempfile.mkdtemp(prefix="hpcprof-analysis-scale-", dir="/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    try:
        import psutil  # noqa: F401

        sampler = "psutil"
    except ImportError:
        sampler = "/proc"
    print(f"scratch {scratch}; RSS sampled every 50 ms with {sampler}; {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.2f} at start", flush=True)

    t = time.perf_counter()
    sources = _load_sources()
    sets = {}
    for n in ranks:
        sets[n] = build_set(scratch / "traces", n, a.mb_per_rank, sources)
        print(f"built {n}-rank set: {sets[n][1]:.1f} MB/rank in {sets[n][0]}", flush=True)
    print(f"trace sets ready in {time.perf_counter() - t:.0f} s", flush=True)
    del sources

    rows = []
    for n in ranks:
        d, mb = sets[n]
        out = scratch / f"out{n}"
        res: dict[str, list[dict]] = {"hta": [], "fresh": [], "cached": [], "reduce": []}
        all_equal = True
        for rep in range(a.repeats):
            hta_json = scratch / f"hta{n}.json"
            res["hta"].append(measure([py, "-c", HTA_SCRIPT, str(d), str(hta_json)], scratch / f"hta{n}.log"))
            if out.exists():
                shutil.rmtree(out)
            cmd = [py, "-m", "hpcprof.analyze", str(d), "--out", str(out), "--quiet"]
            if a.workers:
                cmd += ["--workers", str(a.workers)]
            res["fresh"].append(measure(cmd + ["--no-cache"], scratch / f"fresh{n}.log"))
            fresh_summary = json.loads((out / "summary.json").read_text())
            mtime = (out / "summary.json").stat().st_mtime_ns
            res["cached"].append(measure(cmd, scratch / f"cached{n}.log"))
            cached_summary = json.loads((out / "summary.json").read_text())
            reused = (out / "summary.json").stat().st_mtime_ns == mtime
            out_r = scratch / f"out{n}-reduce"
            if out_r.exists():
                shutil.rmtree(out_r)
            cmd_r = [py, "-m", "hpcprof.analyze", str(d), "--out", str(out_r), "--cache-dir", str(out / ".cache"), "--quiet"]
            res["reduce"].append(measure(cmd_r, scratch / f"reduce{n}.log"))
            reduce_summary = json.loads((out_r / "summary.json").read_text())
            hta = json.loads(hta_json.read_text())
            eq_f, diff_f = compare(hta, fresh_summary)
            eq_c, diff_c = compare(hta, cached_summary)
            eq_r, diff_r = compare(hta, reduce_summary)
            all_equal = all_equal and eq_f and eq_c and eq_r
            served = reduce_summary.get("cache", {}).get("cached_ranks", [])
            print(f"{n} ranks, run {rep + 1}: HTA {res['hta'][-1]['wall_s']:.1f} s / {res['hta'][-1]['peak_rss_mb']:.0f} MB, "
                  f"fresh {res['fresh'][-1]['wall_s']:.1f} s / {res['fresh'][-1]['peak_rss_mb']:.0f} MB, "
                  f"cached {res['cached'][-1]['wall_s']:.1f} s / {res['cached'][-1]['peak_rss_mb']:.0f} MB "
                  f"(PSS: HTA {res['hta'][-1]['peak_pss_mb']:.0f}, fresh {res['fresh'][-1]['peak_pss_mb']:.0f} MB) "
                  f"{'(outputs reused whole) ' if reused else ''}"
                  f"cache+reduce {res['reduce'][-1]['wall_s']:.1f} s ({len(served)}/{n} ranks from the parse cache); "
                  f"numbers equal: fresh {eq_f} (max diff {diff_f:.2g}), cached {eq_c}, cache+reduce {eq_r}",
                  flush=True)

        def med(key, field):
            return statistics.median(x[field] for x in res[key])

        rows.append({
            "n": n, "mb": mb,
            "hta_s": med("hta", "wall_s"), "hta_mb": med("hta", "peak_rss_mb"),
            "fresh_s": med("fresh", "wall_s"), "fresh_mb": med("fresh", "peak_rss_mb"),
            "cached_s": med("cached", "wall_s"), "cached_mb": med("cached", "peak_rss_mb"),
            "reduce_s": med("reduce", "wall_s"),
            "hta_pss": med("hta", "peak_pss_mb"), "fresh_pss": med("fresh", "peak_pss_mb"),
            "load": max(x["load1"] for k in res for x in res[k]),
            "equal": all_equal, "workers": fresh_summary.get("cache", {}).get("workers"),
        })

    # ------------------------------------------------------------------ table
    print()
    print(f"| ranks | MB/rank | HTA s | HTA peak MB | fresh s | cached s | fresh peak MB | cached peak MB | "
          f"fresh/HTA | cached/HTA | RSS fresh/HTA | numbers equal | workers | load1 | cache+reduce s | cache+reduce/HTA |")
    print("|" + "---|" * 16)
    for r in rows:
        print(f"| {r['n']} | {r['mb']:.1f} | {r['hta_s']:.1f} | {r['hta_mb']:.0f} | {r['fresh_s']:.1f} | {r['cached_s']:.2f} | "
              f"{r['fresh_mb']:.0f} | {r['cached_mb']:.0f} | {r['fresh_s'] / r['hta_s']:.3f} | {r['cached_s'] / r['hta_s']:.3f} | "
              f"{r['fresh_mb'] / r['hta_mb']:.3f} | {'yes' if r['equal'] else 'NO'} | {r['workers']} | {r['load']:.1f} | "
              f"{r['reduce_s']:.2f} | {r['reduce_s'] / r['hta_s']:.3f} |")
    print()
    print("| ranks | HTA peak PSS MB | fresh peak PSS MB | PSS fresh/HTA |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['hta_pss']:.0f} | {r['fresh_pss']:.0f} | {r['fresh_pss'] / r['hta_pss']:.3f} |")
    by = {r["n"]: r for r in rows}
    print()
    lo, hi = min(by), max(by)
    flat = by[hi]["fresh_mb"] / by[lo]["fresh_mb"]
    print(f"RSS flatness {lo}->{hi} ranks: hpcprof fresh x{flat:.2f}, cached x{by[hi]['cached_mb'] / by[lo]['cached_mb']:.2f}, "
          f"HTA x{by[hi]['hta_mb'] / by[lo]['hta_mb']:.2f}; PSS: hpcprof fresh x{by[hi]['fresh_pss'] / by[lo]['fresh_pss']:.2f}, "
          f"HTA x{by[hi]['hta_pss'] / by[lo]['hta_pss']:.2f}")
    ref = 16 if 16 in by else sorted(by)[len(by) // 2]
    r = by[ref]

    def verdict(ok):
        return "MET" if ok else "NOT MET"

    print(f"targets (at {ref} ranks unless said):")
    print(f"  first analysis <= 1/4 of HTA wall time, equal numbers: {r['fresh_s'] / r['hta_s']:.3f} "
          f"(equal: {'yes' if r['equal'] else 'NO'}) -> {verdict(r['fresh_s'] / r['hta_s'] <= 0.25 and r['equal'])}")
    print(f"  cached re-analysis <= 1/20 of HTA wall time: {r['cached_s'] / r['hta_s']:.3f} -> {verdict(r['cached_s'] / r['hta_s'] <= 0.05)}")
    print(f"  peak RSS <= 1/4 of HTA's: {r['fresh_mb'] / r['hta_mb']:.3f} -> {verdict(r['fresh_mb'] / r['hta_mb'] <= 0.25)}")
    print(f"  peak RSS flat within 20% from {lo} to {hi} ranks: x{flat:.2f} -> {verdict(abs(flat - 1) <= 0.20)}")
    if not a.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
