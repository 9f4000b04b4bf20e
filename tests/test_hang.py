"""Issue 36: a hung job ends within the hang timeout plus seconds (never the process-group timeout),
leaves no process running, and names the rank the others waited for: the hang drill
(``--inject-hang RANK:STEP``: that rank sleeps forever inside the step, before its collectives) is
the answer known in advance. Scripts are written as users write them: the step-loop API, and a
plain script that never imports hpcprof (zero-change mode). 2 local ranks on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from hpcprof.rundir import RunDir
from hpcprof.rundir.hangs import read_hangs, verdict
from hpcprof.rundir.state import run_state
from hpcprof.spec import SpecError, load_spec

API_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import hpcprof

    with hpcprof.run(batch_size=16) as run:
        model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(run.device))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in run.steps():
            x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
''')

PLAIN_SCRIPT = textwrap.dedent('''
    import os, torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(int(os.environ.get("STEPS", "20"))):
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
''')

DEADLINE_S = 120
"""A behaviour bound, not a benchmark: the hang timeout (10 s) plus start-up and the dumps end far
below it; the process group's timeout (300 s by default) is far above it."""


def _submit(tmp: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir",
                           str(tmp / "runs"), *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, time.monotonic() - t


def _rank_pids(run: RunDir) -> list[int]:
    return [e["pid"] for e in run.read_manifest().get("ranks", [])]


def _no_rank_alive(pids: list[int]) -> bool:
    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    deadline = time.time() + 10  # the processes may take a moment to be reaped
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return not any(alive(p) for p in pids)


# ------------------------------------------------------------------ the drill's spec
@pytest.mark.parametrize("value, message", [
    ("one:5", "drills.hang must look like RANK:STEP"),
    ("1:99", "drills.hang: step 99 is never reached (train.steps = 20)"),
    ("7:3", "drills.hang: rank 7 does not exist (world size 2)"),
])
def test_an_impossible_hang_drill_is_refused_in_one_line(value, message):
    with pytest.raises(SpecError) as err:
        load_spec(overrides={"drills.hang": value}).validate(world_size=2)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_hang_timeout_that_is_not_a_number_of_seconds_is_refused(value):
    with pytest.raises(SpecError, match="train.hang_timeout_s must be a"):
        load_spec(overrides={"train.hang_timeout_s": value})


def test_a_hang_timeout_not_below_the_process_group_timeout_is_warned_about():
    spec = load_spec(overrides={"train.hang_timeout_s": "400", "train.pg_timeout_s": "300"})
    assert any("train.hang_timeout_s 400 is not below train.pg_timeout_s 300" in w for w in spec.warnings())


# ------------------------------------------------------------------ the verdict from notes
def _note(rank, step, done, coll, where):
    return {"rank": rank, "step": step, "last_completed_step": done, "in_collective": coll is not None,
            "collective": coll, "where": where, "caller": None}


def test_the_rank_outside_any_collective_is_named_not_the_ones_waiting_for_it():
    v = verdict({0: _note(0, 5, 4, "all_reduce", "all_reduce (torch/distributed_c10d.py:1)"),
                 1: _note(1, 5, 4, None, "read (data/loader.py:12)"),
                 2: _note(2, 5, 4, "all_reduce", "all_reduce (torch/distributed_c10d.py:1)")}, world_size=4)
    assert v["culprit"] == 1 and v["step"] == 5
    assert v["text"].startswith("rank 1 hung at step 5 outside any collective; it was in read (data/loader.py:12)")
    assert "ranks 0, 2 waited for it in all_reduce" in v["text"] and "rank(s) 3 left no hang note" in v["text"]


def test_a_rank_behind_the_others_is_named_when_every_rank_is_in_a_collective():
    v = verdict({0: _note(0, 8, 7, "all_reduce", "a"), 1: _note(1, 7, 6, "broadcast", "b")})
    assert v["culprit"] == 1 and "rank 1 hung at step 7 in broadcast" in v["text"]


def test_no_rank_is_blamed_when_the_stacks_cannot_tell():
    v = verdict({0: _note(0, 8, 7, "all_reduce", "a"), 1: _note(1, 8, 7, "all_reduce", "b")})
    assert v["culprit"] is None and "do not tell" in v["text"]


def test_a_rank_in_another_collective_than_the_others_is_named_with_both_collectives():
    v = verdict({0: _note(0, 8, 7, "all_reduce", "a"), 1: _note(1, 8, 7, "all_gather", "all_gather (x/y.py:3)"),
                 2: _note(2, 8, 7, "all_reduce", "c")})
    assert v["culprit"] == 1 and v["step"] == 8 and v["mismatch"] == [{"rank": 0, "collective": "all_reduce"},
                                                      {"rank": 1, "collective": "all_gather"},
                                                      {"rank": 2, "collective": "all_reduce"}]
    assert v["text"].startswith("collective mismatch at step 8: rank 1 called all_gather where ranks 0, 2 called "
                                "all_reduce; rank 1 was in all_gather (x/y.py:3)"), v["text"]


def test_two_ranks_in_two_collectives_are_a_mismatch_that_blames_neither():
    v = verdict({0: _note(0, 8, 7, "all_reduce", "a"), 1: _note(1, 8, 7, "broadcast", "b")})
    assert v["culprit"] is None and [m["collective"] for m in v["mismatch"]] == ["all_reduce", "broadcast"]
    assert "collective mismatch at step 8" in v["text"] and "rank 0 in all_reduce; rank 1 in broadcast" in v["text"]


# ------------------------------------------------------------------ the drill, end to end
@pytest.fixture(scope="module")
def hung_api_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hang")
    (tmp / "s.py").write_text(API_SCRIPT)
    proc, took = _submit(tmp, "--script", "s.py", "--name", "h", "--inject-hang", "1:5",
                         "--train-hang-timeout-s", "10")
    return tmp, RunDir(tmp / "runs" / "h"), proc, took


def test_a_hung_rank_ends_the_job_within_the_hang_timeout_and_is_named(hung_api_run):
    tmp, run, proc, took = hung_api_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and took < DEADLINE_S, (took, out)
    assert "hung: rank 1 hung at step 5 outside any collective; it was in hang_forever (rank/drills.py:" in out, out
    assert "rank 0 waited for it in backward (DDP's gradient all-reduce)" in out, out
    assert "stopped after it (peer failure)" not in out and "rank 0 on node" not in out, out
    assert _no_rank_alive(_rank_pids(run)), "a process of the hung job is still running"


def test_every_rank_leaves_its_stack_and_the_hung_one_shows_the_drills_sleep(hung_api_run):
    tmp, run, proc, took = hung_api_run
    notes = read_hangs(run)
    assert sorted(notes) == [0, 1], notes
    assert notes[1]["in_collective"] is False and notes[1]["step"] == 5 and notes[1]["last_completed_step"] == 4
    assert notes[0]["in_collective"] is True and notes[0]["step"] == 5
    stack = (run.root / notes[1]["stack_file"]).read_text()
    assert "in hang_forever" in stack and "drills.py" in stack and "s.py" in stack
    assert "in backward" in (run.root / notes[0]["stack_file"]).read_text()


def test_the_run_state_and_the_manifest_say_hung_and_name_the_rank(hung_api_run):
    tmp, run, proc, took = hung_api_run
    st = run_state(run.root)
    assert st.state == "hung" and st.failed_rank == 1 and st.failed_step == 5 and st.hang["culprit"] == 1
    assert st.describe().startswith("run state: job ") and "hung: rank 1 hung at step 5" in st.describe()
    outcome = run.read_manifest()["outcome"]
    assert outcome["state"] == "hung" and outcome["first_failure"]["rank"] == 1
    assert run.read_manifest()["drills"]["hang"] == {"rank": 1, "step": 5}


def test_analyze_of_a_hung_run_puts_the_verdict_first(hung_api_run):
    tmp, run, proc, took = hung_api_run
    p = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(run.root)], capture_output=True, text=True,
                       timeout=300, cwd=tmp)
    assert p.returncode == 0, p.stdout + p.stderr
    first = p.stdout.strip().splitlines()[0]
    assert "hung: rank 1 hung at step 5 outside any collective" in first, p.stdout
    summary = json.loads((run.analysis_dir / "summary.json").read_text())
    assert summary["hang"]["culprit"] == 1 and summary["hang"]["step"] == 5
    assert "hang_forever" in summary["hang"]["where"] and summary["run_state"]["state"] == "hung"
    report = (run.analysis_dir / "report.html").read_text()
    assert report.index("rank 1 hung at step 5") < report.index("Run configuration")


def test_a_plain_script_that_hangs_is_named_too(tmp_path):
    """Zero-change mode: the drill sleeps at the step's first forward pass, before DDP's collectives."""
    (tmp_path / "plain.py").write_text(PLAIN_SCRIPT)
    proc, took = _submit(tmp_path, "--script", "plain.py", "--name", "p", "--inject-hang", "1:6",
                         "--train-hang-timeout-s", "10")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and took < DEADLINE_S, (took, out)
    assert "rank 1 hung at step 6 outside any collective; it was in hang_forever" in out, out
    run = RunDir(tmp_path / "runs" / "p")
    assert run_state(run.root).failed_rank == 1
    assert _no_rank_alive(_rank_pids(run))


def test_one_hung_rank_of_four_is_named_and_the_three_waiting_for_it_are_not(tmp_path):
    """4 local ranks (2 per core): rank 2 sleeps forever at step 5; 0, 1 and 3 wait in DDP's
    all-reduce. The verdict names rank 2 alone, lists all three waiting, and nothing is left running."""
    (tmp_path / "s.py").write_text(API_SCRIPT)
    proc, took = _submit(tmp_path, "--script", "s.py", "--name", "h4", "--tasks-per-node", "4", "--inject-hang", "2:5",
                         "--train-hang-timeout-s", "10")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and took < DEADLINE_S, (took, out)
    assert "hung: rank 2 hung at step 5 outside any collective; it was in hang_forever (rank/drills.py:" in out, out
    assert "ranks 0, 1, 3 waited for it in backward (DDP's gradient all-reduce)" in out, out
    run = RunDir(tmp_path / "runs" / "h4")
    notes = read_hangs(run)
    assert sorted(notes) == [0, 1, 2, 3], notes
    assert [r for r, n in sorted(notes.items()) if not n["in_collective"]] == [2]
    st = run_state(run.root)
    assert st.state == "hung" and st.failed_rank == 2 and st.failed_step == 5
    assert _no_rank_alive(_rank_pids(run)), "a process of the hung job is still running"


def test_a_healthy_run_of_200_quick_steps_never_trips_the_default_watchdog(tmp_path):
    (tmp_path / "s.py").write_text(API_SCRIPT)
    proc, took = _submit(tmp_path, "--script", "s.py", "--name", "ok", "--train-steps", "200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(tmp_path / "runs" / "ok")
    assert not (run.root / "hangs").exists() and run_state(run.root).state == "completed"
    assert [len(run.read_steps(r)) for r in (0, 1)] == [200, 200]



# ------------------------------------------------------------------ the watchdog on its own
def _Loop(step, began):
    """A step loop as the watchdog reads it (StepLoop.liveness): the open step and when it began."""
    from hpcprof.rank.steploop import StepLoop

    loop = StepLoop()
    loop._step, loop._t_wall, loop._t_alive, loop._next_step = step, began, None, step
    return loop


def _watch(tmp_path, loop, floor_s):
    from hpcprof.rank.hang import HangWatch

    fired = []

    class Watch(HangWatch):  # records the firing instead of ending this process
        def fire(self, noticed, step, idle_s):
            fired.append((noticed, step, idle_s))
            self.stop()

    w = Watch(loop, RunDir(tmp_path), 0, "n", 1, floor_s, interval_s=0.05).start()
    return w, fired


def test_the_watchdog_fires_on_a_step_open_longer_than_the_timeout(tmp_path):
    w, fired = _watch(tmp_path, _Loop(7, time.time() - 30), floor_s=20)
    w._thread.join(timeout=30)
    assert fired and fired[0][:2] == ("timeout", 7) and fired[0][2] >= 30


def test_the_watchdog_never_fires_between_steps(tmp_path):
    loop = _Loop(None, time.time() - 300)  # no step open (after the loop, an evaluation outside steps)
    w, fired = _watch(tmp_path, loop, floor_s=1)
    time.sleep(1.5)
    w.stop()
    assert fired == []


def test_a_rank_that_calls_a_collective_the_others_do_not_is_named_with_both_collectives(tmp_path):
    """The mismatch drill (``--inject-mismatch 1:4``): at step 4 rank 1 calls an all_gather that ranks
    0 and 2 never call; they wait in DDP's gradient all-reduce. 3 local ranks, so that the stray
    rank is the minority."""
    (tmp_path / "s.py").write_text(API_SCRIPT)
    proc, took = _submit(tmp_path, "--script", "s.py", "--name", "m", "--tasks-per-node", "3",
                         "--inject-mismatch", "1:4", "--train-hang-timeout-s", "10")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and took < DEADLINE_S, (took, out)
    assert ("collective mismatch at step 4: rank 1 called all_gather where ranks 0, 2 called backward "
            "(DDP's gradient all-reduce)") in out, out
    run = RunDir(tmp_path / "runs" / "m")
    st = run_state(run.root)
    assert st.state == "hung" and st.failed_rank == 1 and st.hang["mismatch"][1] == {"rank": 1, "collective": "all_gather"}, st.hang
    assert run.read_manifest()["drills"]["mismatch"] == {"rank": 1, "step": 4}
    assert "in stray_collective" in (run.root / read_hangs(run)[1]["stack_file"]).read_text()
    assert _no_rank_alive(_rank_pids(run)), "a process of the hung job is still running"
