"""Statistical acceptance of hpcprof.compare (issue 11): N pairs of healthy runs and N straggler drills.

    python benchmarks/compare_acceptance.py [N] [OUT_DIR]

Per pair: healthy A, healthy B, straggler (--inject-straggler 1:100), each submitted locally and
analysed; prints one RESULT line per comparison (samples/s change, 95% CI, verdict). Measured
figures: benchmarks/README.md, "Run comparison". Run it on dedicated cores."""
import json, subprocess, sys, time
from pathlib import Path
REPO = Path(__file__).resolve().parents[1]; PY = sys.executable
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/hpcprof-compare-acceptance") / "runs"; OUT.mkdir(parents=True, exist_ok=True)
BASE = ["--job", "jobs/demo-local.toml", "--cluster", "local", "--model-image-size", "32", "--data-batch-size", "8",
        "--train-steps", "30", "--profiler-wait", "10", "--profiler-warmup", "1", "--profiler-active", "3", "--runs-dir", str(OUT)]
def submit(name, extra=()):
    if (OUT / name / "analysis" / "summary.json").is_file():
        return
    p = subprocess.run([PY, "-m", "hpcprof.submit", *BASE, "--name", name, *extra, "--analyze"], cwd=REPO, capture_output=True, text=True)
    print(name, p.returncode, time.strftime("%H:%M:%S"), flush=True)
    if p.returncode: print(p.stdout[-2000:], p.stderr[-2000:], flush=True)
def cmp(a, b, tag):
    p = subprocess.run([PY, "-m", "hpcprof.compare", str(OUT / a), str(OUT / b), "--out", str(OUT.parent / f"cmp-{tag}"), "--no-op-deltas", "--quiet"], cwd=REPO, capture_output=True, text=True)
    if p.returncode: print("compare failed", tag, p.stderr[-1500:], flush=True); return None
    r = json.loads((OUT.parent / f"cmp-{tag}" / "compare.json").read_text())
    d = {x["metric"]: x for x in r["deltas"]}["samples_per_s"]
    print("RESULT", tag, round(d["change_pct"], 2), [round(c, 2) for c in d["ci_pct"]], d["verdict"], flush=True)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for i in range(n):
    submit(f"h{i}a"); submit(f"h{i}b"); submit(f"s{i}", ["--inject-straggler", "1:100"])
    cmp(f"h{i}a", f"h{i}b", f"healthy{i}")
    cmp(f"h{i}b", f"s{i}", f"straggler{i}")
