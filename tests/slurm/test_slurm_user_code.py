"""Issue 19 on the real local 2-node SLURM cluster: the same user script as tests/test_user_code.py
(written as a user would, only ``import hpcprof``), launched through submitit on 2 emulated nodes and
through a rendered sbatch script submitted with plain ``sbatch``; ``analyze`` reads both runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import USER_SCRIPT

from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir

ARGS = ["--train-steps", "8", "--profiler-wait", "1", "--profiler-warmup", "1", "--profiler-active", "2",
        "--cpus-per-task", "1", "--time-min", "10"]


def _check(run_dir: Path, out: Path) -> None:
    run = RunDir(run_dir)
    m = run.read_manifest()
    assert m["world_size"] == 4 and sorted({e["node"] for e in m["ranks"]}) == ["n1", "n2"]
    for rank in range(4):
        recs = run.read_steps(rank)
        assert [r["step"] for r in recs] == list(range(8)) and all(r["regions"].get("my_metric") for r in recs)
    s = analyze(run_dir, out=out, progress=False)
    assert s["ranks_analyzed"] == [0, 1, 2, 3] and s["throughput"]["job"]["median_samples_per_s"] > 0
    assert s["collectives_matched"] > 0


def test_a_user_script_through_submitit_on_two_nodes(slurm_cluster, tmp_path):
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.submit", "--cluster", "slurm", "--nodes", "2", "--tasks-per-node", "2",
         "--partition", slurm_cluster.partition, "--runs-dir", str(tmp_path / "runs"), "--name", "u", "--poll-s", "0.5",
         "--wait", "--script", "train.py", *ARGS, "--", "--lr", "0.02"],
        env=slurm_cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check(tmp_path / "runs" / "u", tmp_path / "a")


def test_a_user_script_through_a_rendered_sbatch_script(slurm_cluster, tmp_path):
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    script = tmp_path / "job.slurm"
    render = subprocess.run(
        [sys.executable, "-m", "hpcprof.sbatch", "--template", "generic", "--output", str(script),
         "--partition", slurm_cluster.partition, "--nodes", "2", "--tasks-per-node", "2",
         "--venv", str(Path(sys.executable).parent.parent), "--runs-dir", "runs", "--script", "train.py", *ARGS,
         "--", "--lr", "0.02"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert render.returncode == 0, render.stderr
    text = script.read_text()
    assert str(tmp_path / "train.py") in text  # an absolute path: the ranks may start elsewhere
    sub = subprocess.run(["sbatch", "--parsable", str(script)], env=slurm_cluster.env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    state = slurm_cluster.wait_job(job, timeout=240)
    run_dir = tmp_path / "runs" / f"train-job{job}"
    out = tmp_path / f"hpcprof-{job}.out"
    assert state == "COMPLETED", (out.read_text() if out.exists() else "no batch output") + "".join(
        p.read_text()[-2000:] for p in sorted((run_dir / "logs").glob("*.out")))
    assert RunDir(run_dir).read_manifest()["spec"]["workload"]["args"] == ["--lr", "0.02"]
    _check(run_dir, tmp_path / "a")
