"""Issue 36 on the real local 2-node SLURM cluster: the hang drill across nodes. Rank 1, on node
n2, sleeps forever inside step 5; rank 0, on n1, waits in DDP's all-reduce. The job must end within
the hang timeout plus seconds (not the process group's timeout), leave no step running on either
node, and name rank 1 with the drill's sleep in its stack, in the console, the run state and the
analysis, as on one machine (tests/test_hang.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from test_hang import API_SCRIPT, DEADLINE_S

from hpcprof.rundir import RunDir
from hpcprof.rundir.hangs import read_hangs
from hpcprof.rundir.state import run_state


def test_a_rank_hung_on_node_n2_ends_the_job_and_is_named(slurm_cluster, tmp_path):
    (tmp_path / "s.py").write_text(API_SCRIPT)
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.submit", "--cluster", "slurm", "--nodes", "2", "--tasks-per-node", "1",
         "--partition", slurm_cluster.partition, "--runs-dir", str(tmp_path / "runs"), "--name", "h", "--poll-s", "0.5",
         "--wait", "--script", "s.py", "--cpus-per-task", "1", "--time-min", "10", "--inject-hang", "1:5",
         "--train-hang-timeout-s", "10"],
        env=slurm_cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and took < DEADLINE_S, (took, out)
    assert "hung: rank 1 hung at step 5 outside any collective; it was in hang_forever (rank/drills.py:" in out, out
    assert "rank 0 waited for it in backward (DDP's gradient all-reduce)" in out, out
    run = RunDir(tmp_path / "runs" / "h")
    m = run.read_manifest()
    assert sorted((e["rank"], e["node"]) for e in m["ranks"]) == [(0, "n1"), (1, "n2")]
    state = slurm_cluster.wait_job(m["job_id"], timeout=60)
    assert state not in ("RUNNING", "PENDING"), state  # nothing left holding the allocation
    notes = read_hangs(run)
    assert sorted(notes) == [0, 1] and notes[1]["in_collective"] is False, notes
    assert "in hang_forever" in (run.root / notes[1]["stack_file"]).read_text()
    st = run_state(run.root)
    assert st.state == "hung" and st.failed_rank == 1 and st.failed_step == 5
    p = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(run.root)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "hung: rank 1 hung at step 5 outside any collective" in p.stdout.strip().splitlines()[0], p.stdout
    assert json.loads((run.analysis_dir / "summary.json").read_text())["hang"]["culprit"] == 1
