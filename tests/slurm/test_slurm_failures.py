"""Issue 13 on the real local SLURM cluster: a partition that does not exist is one line and leaves no
run directory; `scancel` during `submit --wait` is reported as a cancellation (what sacct says), not
as rank failures, and the manifest records it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from helpers import left_running

REPO = Path(__file__).resolve().parents[2]
FAST = ["--job", str(REPO / "jobs" / "demo-local.toml"), "--model-image-size", "32", "--data-batch-size", "8"]


def test_bad_partition_is_one_line_and_no_run_is_left(slurm_cluster, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.submit", *FAST, "--cluster", "slurm", "--partition", "nope",
         "--name", "bad", "--runs-dir", str(tmp_path)],
        cwd=REPO, env=slurm_cluster.env, capture_output=True, text=True, timeout=300)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1, proc.stdout + proc.stderr
    assert "invalid partition" in err[0].lower() and "--partition" in err[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "bad").exists()


def test_scancel_during_wait_is_reported_as_cancelled(slurm_cluster, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcprof.submit", *FAST, "--cluster", "slurm", "--partition", slurm_cluster.partition,
         "--nodes", "1", "--tasks-per-node", "2", "--train-steps", "400", "--profiler-wait", "300", "--wait",
         "--name", "cx", "--runs-dir", str(tmp_path)],
        cwd=REPO, env=slurm_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "cx"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        steps = run / "steps" / "rank-0.jsonl"
        if steps.is_file() and steps.read_text().count("\n") >= 2:
            break
        time.sleep(0.5)
    job_id = json.loads((run / "manifest.json").read_text())["job_id"]
    subprocess.run(["scancel", job_id], env=slurm_cluster.env, check=True)
    out, err = proc.communicate(timeout=240)
    text = out + err
    assert proc.returncode == 1, text
    assert "CANCELLED" in text and "failed at step" not in text and "peer failure" not in text, text
    m = json.loads((run / "manifest.json").read_text())
    assert m["outcome"]["state"] == "cancelled"
    # SLURM ends the ranks (SIGTERM, which submitit's ranks bypass, then SIGKILL after KillWait):
    # none is left in the process table (issue 23: nothing left running)
    left = left_running(tmp_path, timeout=30)
    assert not left, f"still running after scancel: {left}"
