"""Issue 33, the step-loop API beside what scripts already do: their own process group (made before
``hpcprof.run()``, or after it: one line says what to do), their ``destroy_process_group()`` at the
end, their ``sampler.set_epoch``, their loop length (never cut, never waited for: under submit and
under plain torchrun alike), their own torch.profiler (hpcprof's trace steps aside: no crash), and a
module-level loop with ``hpcprof.start()``. Each script is written as a user instruments theirs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcprof.rundir import RunDir
from hpcprof.rundir.state import run_state

EPOCHS = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    import hpcprof

    dist.init_process_group("gloo")  # the script's own group, made first
    with hpcprof.run(batch_size=8) as run:
        model = DDP(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = TensorDataset(torch.randn(512, 4), torch.randn(512, 1))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)  # 32 batches per rank and epoch
        seen = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            seen.append(list(iter(sampler)))
            for x, y in run.steps(loader):
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            print(f"Epoch {epoch} done", flush=True)
        json.dump(seen, open(f"seen-{dist.get_rank()}.json", "w"))
        dist.destroy_process_group()  # the script's own clean-up, inside the block
''')

INIT_AFTER = textwrap.dedent('''
    import torch
    import torch.distributed as dist
    import hpcprof

    with hpcprof.run(batch_size=8) as run:
        dist.init_process_group("gloo")  # after hpcprof.run(), which made the group already
''')

OWN_PROFILER = textwrap.dedent('''
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    import hpcprof

    with hpcprof.run(batch_size=16, steps=12) as run:
        model = DDP(torch.nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
                                    on_trace_ready=torch.profiler.tensorboard_trace_handler("mylog")) as prof:
            for step in run.steps():
                loss = model(torch.randn(16, 32)).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step()
''')

MODULE_LEVEL = textwrap.dedent('''
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    import hpcprof

    run = hpcprof.start(batch_size=4)
    model = DDP(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(12):
        with run.step():
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    print("trained", flush=True)
''')

STEPS_10 = textwrap.dedent('''
    import hpcprof

    with hpcprof.run(batch_size=4, steps=10) as run:
        for step in run.steps():
            sum(range(1000))
''')


def _run(tmp: Path, script: str, launcher: str, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp / "train.py").write_text(script)
    if launcher == "submit":
        cmd = [sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", "runs", "--name", name,
               "--script", "train.py"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py"]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900)
    runs = sorted((tmp / "runs").iterdir()) if (tmp / "runs").is_dir() else []
    return proc, (runs[0] if runs else tmp / "runs" / name)


@pytest.mark.parametrize("launcher", ["submit", "torchrun"])
def test_the_scripts_epochs_group_and_set_epoch_stay_its_own_and_every_step_is_recorded(tmp_path, launcher):
    from torch.utils.data.distributed import DistributedSampler

    proc, run_dir = _run(tmp_path, EPOCHS, launcher, "epochs")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):  # 2 epochs of 32 steps: not cut at train.steps (20), nothing waited for
        assert [r["step"] for r in RunDir(run_dir).read_steps(rank)] == list(range(64))
        assert [r["epoch"] for r in RunDir(run_dir).read_steps(rank)] == [0] * 32 + [1] * 32
    state = run_state(run_dir)
    assert state.state == "completed" and state.steps_done == state.steps_planned == 64, state
    sampler = DistributedSampler(range(512), num_replicas=2, rank=0)
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert json.loads((tmp_path / "seen-0.json").read_text()) == expected  # the script's set_epoch, not overwritten
    assert RunDir(run_dir).read_manifest()["attempts"][-1]["process_group"] == "script"


def test_a_script_that_makes_its_group_after_hpcprof_run_is_told_in_one_line_what_to_do(tmp_path):
    proc, run_dir = _run(tmp_path, INIT_AFTER, "submit", "late")
    assert proc.returncode != 0
    notes = RunDir(run_dir).read_failures()
    assert notes and all("call init_process_group() before hpcprof.run()" in n["error"] for n in notes), notes
    assert "call init_process_group() before hpcprof.run()" in proc.stdout


def test_a_script_with_its_own_profiler_under_the_api_runs_to_the_end(tmp_path):
    proc, run_dir = _run(tmp_path, OWN_PROFILER, "submit", "prof")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["step"] for r in RunDir(run_dir).read_steps(1)] == list(range(12))
    assert len(list((tmp_path / "mylog").glob("*.pt.trace.json"))) == 2  # the script's own traces
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.err"))
    assert "hpcprof's trace steps aside" in logs


def test_a_module_level_loop_uses_hpcprof_start_and_is_closed_at_exit(tmp_path):
    proc, run_dir = _run(tmp_path, MODULE_LEVEL, "torchrun", "module")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        assert [r["step"] for r in RunDir(run_dir).read_steps(rank)] == list(range(12))
    assert run_state(run_dir).state == "completed"


def test_the_scripts_own_step_count_is_honoured_under_submit(tmp_path):
    proc, run_dir = _run(tmp_path, STEPS_10, "submit", "ten")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["step"] for r in RunDir(run_dir).read_steps(0)] == list(range(10))
    state = run_state(run_dir)
    assert state.state == "completed" and state.steps_planned == 10, state
    assert "ignored hpcprof.run() argument" not in proc.stdout + proc.stderr
