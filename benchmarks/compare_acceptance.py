"""Statistical acceptance of hpcprof.compare (issue 24): false verdicts on healthy replicate arms, and
power on a drilled arm, with the run-to-run noise in the interval.

    python benchmarks/compare_acceptance.py [--pairs 10] [--repeat 3] [--steps 20] [--out DIR] [--lock /tmp/hpcprof-heavy.lock]

Per pair, one ladder of three rungs of one spec (jobs/demo-local.toml: 2 gloo ranks, ResNet-18 at
32 px, batch 8): 01-healthy-a, 02-healthy-b (the same spec again) and 03-straggler
(--inject-straggler 1:100: rank 1 sleeps 100 ms before every forward pass), each run --repeat
times, interleaved (A B S A B S A B S), so that the machine's drift falls on every arm. The
ladder's comparison gives B against A (healthy: the right answer is "no significant change") and
S against A (the right answer is "slower"). Each pair's ladder takes the lock (when given) for its
own duration, so that other heavy work on the machine waits between pairs, not inside one.

Printed per pair: each verdict with its change, interval and detectable change, the run-to-run SD
pooled over the three arms, and what the old statistic (the within-run bootstrap of one run each,
first replicates only, with the 3% floor) would have said; then the totals. Figures:
benchmarks/README.md, "Run comparison". A finished pair (its ladder.json with a comparison) is
read again, not rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = (REPO / "jobs" / "demo-local.toml").read_text()
RUNGS = {"01-healthy-a": "", "02-healthy-b": "", "03-straggler": '\n[drills]\nstraggler = "1:100"\n'}
OPTIONS = ["--cluster", "local", "--model-image-size", "32", "--data-batch-size", "8", "--profiler-warmup", "1", "--profiler-active", "1",
           "--analysis-workers", "1"]


@contextlib.contextmanager
def lock(path: str | None):
    if not path:
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_pair(out: Path, repeat: int, lock_path: str | None, steps: int) -> dict:
    rec_path = out / "ladder" / "ladder.json"
    if rec_path.is_file() and json.loads(rec_path.read_text()).get("compare"):
        return json.loads(rec_path.read_text())
    rungs = out / "rungs"
    rungs.mkdir(parents=True, exist_ok=True)
    for name, extra in RUNGS.items():
        (rungs / f"{name}.toml").write_text(SPEC + extra)
    with lock(lock_path):
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--repeat", str(repeat), "--out", str(out / "ladder"), *OPTIONS,
                            "--train-steps", str(steps), "--profiler-wait", str(max(1, steps // 3))],
                           cwd=REPO, capture_output=True, text=True)
        took = time.time() - t0
    if p.returncode:
        print(f"{out.name}: ladder failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}", flush=True)
    rec = json.loads(rec_path.read_text()) if rec_path.is_file() else {}
    rec["took_s"] = took
    return rec


def old_verdict(ladder: Path, a: str, b: str) -> str:
    """The earlier statistic (within-run block bootstrap, one run each, 3% floor) on the first replicates."""
    from hpcprof.compare.core import _arrays
    from hpcprof.compare.series import load_series
    from hpcprof.analysis.reduce.bootstrap import compare_metric

    xa = _arrays(load_series(a, ladder / f"{a}-r1" / "analysis"))["samples_per_s"]
    xb = _arrays(load_series(b, ladder / f"{b}-r1" / "analysis"))["samples_per_s"]
    c = compare_metric("samples_per_s", xa, xb)
    return f"{c.verdict} ({c.change_pct:+.1f}% [{c.ci_pct[0]:+.1f}, {c.ci_pct[1]:+.1f}])"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="/tmp/hpcprof-compare-acceptance")
    ap.add_argument("--steps", type=int, default=20, help="training steps per run (default 20: 17 steady steps)")
    ap.add_argument("--lock", default=None, help="take this lock (flock) around each pair's ladder")
    a = ap.parse_args()
    root = Path(a.out)
    healthy_ok = straggler_ok = 0
    sds, spreads, old_healthy, old_straggler = [], [], 0, 0
    t_all = time.time()
    for i in range(a.pairs):
        out = root / f"pair{i}"
        rec = run_pair(out, a.repeat, a.lock, a.steps)
        cj = out / "ladder" / "compare" / "compare.json"
        if not cj.is_file():
            print(f"pair {i}: no comparison", flush=True)
            continue
        res = json.loads(cj.read_text())
        d = {(x["arm"], x["metric"]): x for x in res["deltas"]}
        h, s = d[("02-healthy-b", "samples_per_s")], d[("03-straggler", "samples_per_s")]
        healthy_ok += h["verdict"] == "no significant change"
        straggler_ok += s["verdict"] == "slower"
        sd = (res.get("noise") or {}).get("samples_per_s", {}).get("sd_pct")
        sds.append(sd)
        for arm in res["arms"][:2]:  # healthy arms: the spread of one spec's runs
            v = [x for x in arm["samples_per_s_runs"] if x]
            spreads.append(100 * (max(v) / min(v) - 1))
        ladder = out / "ladder"
        oh, os_ = old_verdict(ladder, "01-healthy-a", "02-healthy-b"), old_verdict(ladder, "01-healthy-a", "03-straggler")
        old_healthy += oh.startswith("no significant change")
        old_straggler += os_.startswith("slower")
        took = rec.get("took_s")
        print(f"RESULT pair {i}: healthy {h['change_pct']:+.1f}% [{h['ci_pct'][0]:+.1f}, {h['ci_pct'][1]:+.1f}] {h['verdict']} "
              f"(detectable {h['detectable_pct']:.1f}%); straggler {s['change_pct']:+.1f}% [{s['ci_pct'][0]:+.1f}, {s['ci_pct'][1]:+.1f}] "
              f"{s['verdict']}; run-to-run SD {sd:.1f}% (pooled, 3 arms); old statistic: healthy {oh}, straggler {os_}"
              + (f"; {took:.0f} s" if took else ""), flush=True)
    n = len(sds)
    print(f"TOTAL {n} pairs, {a.repeat} replicates per arm: healthy 'no significant change' {healthy_ok}/{n}, straggler 'slower' "
          f"{straggler_ok}/{n}; old within-run statistic on single runs: {old_healthy}/{n} and {old_straggler}/{n}", flush=True)
    if n:
        sds_sorted = sorted(sds)
        print(f"run-to-run SD of a run's median samples/s (pooled over the 3 arms of a pair): median {sds_sorted[n // 2]:.1f}%, "
              f"range {sds_sorted[0]:.1f}-{sds_sorted[-1]:.1f}%; largest/smallest run of one healthy arm: median "
              f"{sorted(spreads)[len(spreads) // 2]:.1f}%, max {max(spreads):.1f}%; wall {time.time() - t_all:.0f} s", flush=True)
    return 0 if n == a.pairs and healthy_ok >= math.ceil(0.9 * n) and straggler_ok == n else 1


if __name__ == "__main__":
    sys.exit(main())
