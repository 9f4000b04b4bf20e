"""Issue 33, items 6 and 7: what hpcprof says about a user's own job, launched as users launch it
(``python -m hpcprof.submit --cluster local --script train.py -- ARGS``, 2 ranks).

- A script whose ranks each train their own model (no DDP: no collective of the script's own). The
  only collectives in its traces are hpcprof's control rounds; the straggler drill makes rank 1 late
  at every round, so an analysis that took them for the job's would name rank 1 a straggler. The
  analysis must leave them out, name no straggler and say the ranks trained alone.
- The report of a user script names the script and its arguments, never the built-in trainer's
  model and batch; a script that does not say its batch size gets "unknown" and no samples/s.
- A script that ends without a single recorded step is not called a success by submit, nor
  "stopped early" by the run state.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcprof.analysis import analyze, console_summary
from hpcprof.rundir import RunDir
from hpcprof.rundir.state import run_state

# Each rank trains its own copy: the model is never wrapped in DDP, the script never calls a
# collective. It does not say its batch size either (hpcprof.run() without batch_size).
ALONE_SCRIPT = textwrap.dedent('''
    import argparse, torch, torch.nn as nn
    import hpcprof

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    with hpcprof.run() as run:
        torch.manual_seed(run.rank)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(run.device)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        batches = [(torch.randn(16, 64), torch.randint(0, 10, (16,))) for _ in range(6)]
        for x, y in run.steps(batches, total=run.total_steps):  # --train-steps steps, several passes
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
''')

# hpcprof.run() wraps the script, but the script trains with its own loop: hpcprof records no step.
NO_STEP_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    import hpcprof

    with hpcprof.run(batch_size=8) as run:
        model = nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            model(torch.randn(8, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
''')

ACTIVE = 6


def _submit(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", str(tmp / "runs"),
                           *args], cwd=tmp, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def alone_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("alone")
    (tmp / "train.py").write_text(ALONE_SCRIPT)
    proc = _submit(tmp, "--script", "train.py", "--name", "alone", "--train-steps", "14", "--profiler-wait", "4",
                   "--profiler-active", str(ACTIVE), "--inject-straggler", "1:30", "--", "--lr", "0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "runs" / "alone", proc


def _control_gloo_events(trace: Path) -> int:
    """The gloo:<op> events of the threads the trace's hpcprof:control ranges name, read from the
    trace itself."""
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    threads = {int(t) for e in events for m in [re.fullmatch(r"hpcprof:control threads=([\d,]+)", str(e.get("name")))]
               if m for t in m.group(1).split(",")}
    return sum(1 for e in events if str(e.get("name")).startswith("gloo:") and e.get("tid") in threads)


def test_ranks_that_trained_alone_get_no_straggler_from_hpcprofs_control_rounds(alone_run, tmp_path):
    run_dir, _ = alone_run
    # the traces do hold hpcprof's control rounds as gloo collectives (the late rank's at least)
    assert sum(_control_gloo_events(p) for p in (run_dir / "traces").glob("rank-*.pt.trace.json.gz")) > 0
    s = analyze(run_dir, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1]
    assert s["stragglers"] == [] and s["collectives_matched"] == 0
    assert s["job_collectives"] == 0
    assert s["control_collectives"] >= 2 * ACTIVE  # one round per traced step on each rank, at least
    assert "no collective of the job's own" in s["trained_alone"] and "trained alone" in s["trained_alone"]
    assert "stragglers: not analysed: the ranks trained alone" in console_summary(s)
    verdict = (tmp_path / "a" / "report.html").read_text().split("<section id='verdict'", 1)[1].split("</section>", 1)[0]
    assert "No cross-rank analysis" in verdict and "No straggler" not in verdict and "Top straggler" not in verdict
    colls = tmp_path / "a" / "tables" / "collectives.csv"
    assert not colls.is_file() or len(colls.read_text().splitlines()) <= 1  # a header at most: no collective


def test_the_report_of_a_user_script_names_it_with_its_arguments_and_an_unknown_batch(alone_run, tmp_path):
    run_dir, proc = alone_run
    assert "succeeded on 2 rank(s)" in proc.stdout  # hpcprof made the process group; the script ran to its end
    m = RunDir(run_dir).read_manifest()
    assert m["attempts"][-1]["process_group"] == "hpcprof"
    assert "model" not in m["spec"] and "data" not in m["spec"] and "lr" not in m["spec"]["train"]
    assert "[model]" not in (run_dir / "spec.toml").read_text()
    s = analyze(run_dir, out=tmp_path / "a", progress=False)
    script = str((run_dir.parents[1] / "train.py").resolve())
    assert s["workload"] == {"kind": "script", "name": script, "args": ["--lr", "0.05"], "batch_per_rank": None}
    assert s["throughput"] is None
    html = (tmp_path / "a" / "report.html").read_text()
    config = html.split("<section id='config'>", 1)[1].split("</section>", 1)[0]
    assert f"<dt>Workload</dt><dd>script {script} --lr 0.05</dd>" in config
    assert "<dt>Batch</dt><dd>unknown (the step records hold no batch size: no samples/s)</dd>" in config
    assert "resnet" not in config and "Model" not in config
    console = console_summary(s)
    assert f"workload: script {script} --lr 0.05; batch unknown" in console
    for text in (html, console):  # no samples/s figure anywhere, not a guess
        assert not re.search(r"\d samples/s", text)


def test_a_script_that_records_no_step_is_said_so_never_succeeded_nor_stopped_early(tmp_path):
    (tmp_path / "train.py").write_text(NO_STEP_SCRIPT)
    proc = _submit(tmp_path, "--script", "train.py", "--name", "nostep")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no optimizer step was recorded on any rank" in proc.stdout and "succeeded" not in proc.stdout
    st = run_state(tmp_path / "runs" / "nostep")
    assert st.state == "no_steps" and "stopped" not in st.describe()
    a = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(tmp_path / "runs" / "nostep")],
                       capture_output=True, text=True, timeout=600)
    assert a.returncode == 2 and "Traceback" not in a.stderr, a.stderr
    assert "no optimizer step was recorded on any rank" in a.stderr and "stopped early" not in a.stderr
