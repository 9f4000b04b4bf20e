"""Triggered profiling (issue 20): how often a healthy job captures more than its baseline, and how
fast a slowdown is caught. Real 2-rank local CPU runs, one after the other:

- `--healthy N` runs of 300 steps, no drill: the captures each took (goal: the baseline only);
- `--drilled M` runs of 200 steps per drill (a straggler from step 120: in every step, and in every
  second step): the step the capture starts at, its delay in steps and in seconds (from the step
  records' wall clock: the time between the drill's first step and the capture's first step).

    .venv/bin/python benchmarks/triggered.py --healthy 10 --drilled 3 [--out /tmp/trig]

The triggered mode's cost per step outside captures is measured by benchmarks/step_overhead.py
(loop "triggered" against "records"). Prints a table; copy it into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--job", str(REPO / "jobs" / "demo-local.toml"), "--cluster", "local", "--tasks-per-node", "2",
         "--model-image-size", "32", "--data-batch-size", "8", "--profiler-mode", "triggered",
         "--profiler-wait", "10", "--profiler-warmup", "1", "--profiler-active", "10"]
DRILL_FROM = 120


def submit(runs: Path, name: str, *extra: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", *FLAGS, "--runs-dir", str(runs), "--name", name, *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return runs / name


def captures(run: Path) -> list[dict]:
    return json.loads((run / "manifest.json").read_text()).get("captures") or []


def wall_of_step(run: Path, step: int) -> float | None:
    for line in (run / "steps" / "rank-0.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["step"] == step:
            return rec["t_start"]
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--healthy", type=int, default=10)
    p.add_argument("--drilled", type=int, default=3)
    p.add_argument("--out", default="")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="triggered-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load1 {os.getloadavg()[0]:.1f}, runs in {out}")
    print()
    print("| run | drill | captures (kind@first step) | capture after the drill started: steps, s | load1 after |")
    print("|---|---|---|---|---|")
    extra = {"rank": 0, "job": 0}
    for i in range(args.healthy):
        run = submit(out, f"healthy-{i}", "--train-steps", "300")
        caps = captures(run)
        for c in caps:
            if c["kind"] != "baseline":
                extra[c["kind"]] = extra.get(c["kind"], 0) + 1
        print(f"| healthy-{i} | none | {', '.join(c['kind'] + '@' + str(c['steps'][0]) for c in caps)} | - "
              f"| {os.getloadavg()[0]:.1f} |", flush=True)
    delays = []
    for drill in ("1:60@120", "1:60:2@120"):
        for i in range(args.drilled):
            name = f"drill-{drill.replace(':', '_').replace('@', '_at_')}-{i}"
            run = submit(out, name, "--train-steps", "200", "--inject-straggler", drill)
            caps = captures(run)
            later = [c for c in caps if c["kind"] != "baseline"]
            cell = "-"
            if later and later[0]["steps"][0] >= DRILL_FROM:
                first = later[0]["steps"][0]
                t0, t1 = wall_of_step(run, DRILL_FROM), wall_of_step(run, first)
                seconds = (t1 - t0) if t0 is not None and t1 is not None else float("nan")
                delays.append((first - DRILL_FROM, seconds))
                cell = f"{first - DRILL_FROM}, {seconds:.1f}"
            print(f"| {name} | {drill} | {', '.join(c['kind'] + '@' + str(c['steps'][0]) for c in caps)} | {cell} "
                  f"| {os.getloadavg()[0]:.1f} |", flush=True)
    print()
    print(f"captures besides the baseline over {args.healthy} healthy runs: {sum(extra.values())} "
          f"(a rank turning slow: {extra['rank']}; the whole job slower: {extra['job']})")
    if delays:
        steps = sorted(d for d, _ in delays)
        secs = sorted(s for _, s in delays)
        print(f"detection delay over {len(delays)} drilled runs: median {steps[len(steps) // 2]} steps "
              f"({secs[len(secs) // 2]:.1f} s), at most {steps[-1]} steps ({secs[-1]:.1f} s)")


if __name__ == "__main__":
    main()
