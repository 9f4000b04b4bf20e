"""Issue 33: the training scripts people already have, run unchanged (tests/scripts/: written in the
styles of nanoGPT's train.py, PyTorch's DDP tutorial series, its FSDP2 example and its profiler
tutorial, on CPU and gloo; none imports hpcprof), under ``python -m hpcprof.submit --script`` and
under the user's own ``torchrun`` through ``-m hpcprof.wrap``. Each gets a step record per
optimizer step on every rank, traces with its own collectives, and an analysis with throughput; the
answers come from the scripts themselves (their loop lengths, their own timer, DistributedSampler's
own order) and from a straggler drill measured in the same run.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_straggler_drill_verdict, drill_truth, require_resolved_truth
from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir
from hpcprof.rundir.state import run_state

SCRIPTS = Path(__file__).parent / "scripts"
# (script, its arguments, the optimizer steps it makes)
CASES = {
    "gpt": ("gpt_train.py", ["--max_iters=15"], 16),                 # iterations 0..15
    "tutorial": ("ddp_tutorial.py", ["2", "1", "--batch_size", "32"], 8),  # 2 epochs x 256/2/32 batches
    "fsdp2": ("fsdp2_example.py", ["--steps", "12"], 12),
    "profiler": ("own_profiler.py", ["--steps", "16", "--logdir", "./log"], 16),
}


def _folder(tmp: Path) -> Path:
    for f in SCRIPTS.glob("*.py"):
        shutil.copy(f, tmp / f.name)
    return tmp


def _submit(cwd: Path, name: str, script: str, args: list[str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", "runs",
                           "--name", name, *flags, "--script", script, "--", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=900)


def _torchrun(cwd: Path, script: str, args: list[str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "hpcprof.wrap", *flags, script, *args],
                          cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def submitted(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    out = {}
    for key, (script, args, _) in CASES.items():
        cwd = _folder(tmp_path_factory.mktemp(f"submit-{key}"))
        proc = _submit(cwd, key, script, args)
        out[key] = (cwd / "runs" / key, proc)
    return out


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    out = {}
    for key, (script, args, _) in CASES.items():
        cwd = _folder(tmp_path_factory.mktemp(f"torchrun-{key}"))
        proc = _torchrun(cwd, script, args)
        m = re.search(r"hpcprof: run directory (\S+)", proc.stdout)
        out[key] = (cwd / m.group(1) if m else cwd / "runs" / "missing", proc)
    return out


def _trace_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as fh:
        return {str(e.get("name")) for e in json.load(fh)["traceEvents"]}


def _check_run(run_dir: Path, proc: subprocess.CompletedProcess, steps: int) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(run_dir)
    for rank in (0, 1):
        recs = run.read_steps(rank)
        assert [r["step"] for r in recs] == list(range(steps)), f"rank {rank}"
        # one optimizer step to the next: each step begins where the previous one ended
        gaps = [b["t_start"] - a["t_end"] for a, b in zip(recs, recs[1:])]
        assert max(map(abs, gaps)) < 1e-6, (rank, gaps)
    attempt = run.read_manifest()["attempts"][-1]
    assert attempt["steps_source"] == "optimizer" and attempt["process_group"] == "script"
    assert attempt["steps_done"] == steps
    state = run_state(run_dir)
    assert state.state == "completed" and state.steps_done == steps == state.steps_planned, state
    return attempt


@pytest.mark.parametrize("launcher", ["submit", "torchrun"])
@pytest.mark.parametrize("key", list(CASES))
def test_an_unchanged_script_gets_one_step_record_per_optimizer_step_on_every_rank(key, launcher, submitted, wrapped):
    run_dir, proc = (submitted if launcher == "submit" else wrapped)[key]
    _check_run(run_dir, proc, CASES[key][2])


@pytest.mark.parametrize("launcher", ["submit", "torchrun"])
@pytest.mark.parametrize("key", ["gpt", "tutorial", "fsdp2"])
def test_an_unchanged_script_is_traced_with_its_own_collectives_and_analysed_with_throughput(
        key, launcher, submitted, wrapped, tmp_path):
    run_dir, proc = (submitted if launcher == "submit" else wrapped)[key]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = _trace_names(RunDir(run_dir).trace_path(0))
    if key == "fsdp2":  # FSDP2's all-gather and reduce-scatter
        assert any("all_gather" in n for n in names) and any("reduce_scatter" in n for n in names), sorted(names)[:50]
    else:  # DDP's all-reduce
        assert any("allreduce" in n.replace("_", "") for n in names), sorted(names)[:50]
    s = analyze(run_dir, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1] and s["run_state"]["state"] == "completed"
    assert s["throughput"]["job"]["median_samples_per_s"] > 0


def test_the_batch_is_counted_per_optimizer_step_with_gradient_accumulation(submitted):
    run_dir, proc = submitted["gpt"]
    assert proc.returncode == 0, proc.stdout[-3000:]
    # gpt_train.py: batch_size 8, gradient_accumulation_steps 2: 16 samples per optimizer step per rank
    assert {r["batch_size"] for r in RunDir(run_dir).read_steps(0)} == {16}


def test_the_scripts_own_set_epoch_gives_each_epoch_its_own_shuffle(submitted):
    from torch.utils.data.distributed import DistributedSampler

    run_dir, proc = submitted["tutorial"]
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = [json.loads(line) for line in (run_dir.parent.parent / "order-0.jsonl").read_text().splitlines()]
    sampler = DistributedSampler(range(256), num_replicas=2, rank=0)  # the tutorial's sampler, its own seed
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert seen == expected and seen[0] != seen[1]


def test_the_scripts_own_snapshot_resume_is_recorded_as_the_steps_it_ran(submitted, tmp_path):
    """The tutorial saved a snapshot at its last epoch (1): started again, it resumes there and runs
    one epoch (4 optimizer steps): the records and the run state say 4, not train.steps."""
    run_dir, proc = submitted["tutorial"]
    assert proc.returncode == 0
    cwd = run_dir.parent.parent
    again = _submit(cwd, "again", *CASES["tutorial"][:2])
    assert "Resuming training from snapshot at Epoch 1" in (cwd / "runs" / "again" / "logs").joinpath(
        next(p.name for p in (cwd / "runs" / "again" / "logs").glob("*_0_log.out"))).read_text()
    _check_run(cwd / "runs" / "again", again, 4)


def test_a_script_with_its_own_profiler_keeps_it_and_hpcprof_steps_aside_in_one_line(submitted, wrapped):
    for run_dir, proc in (submitted["profiler"], wrapped["profiler"]):
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        cwd = run_dir.parent.parent
        assert len(list((cwd / "log").glob("rank*.pt.trace.json"))) == 2  # the script's own traces
        logs = proc.stderr + "".join(p.read_text() for p in (run_dir / "logs").glob("*.err")) \
            if (run_dir / "logs").is_dir() else proc.stderr
        assert "hpcprof's trace steps aside" in logs


def test_submit_says_that_cpu_ranks_are_pinned_and_no_pin_cores_turns_it_off(submitted, tmp_path):
    assert "CPU ranks are pinned to their own cores" in submitted["gpt"][1].stdout
    cwd = _folder(tmp_path)
    proc = _submit(cwd, "free", "fsdp2_example.py", ["--steps", "6"], "--no-pin-cores")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "not pinned" in proc.stdout
    cores = {e["node_cpus"] for e in RunDir(cwd / "runs" / "free").read_manifest()["ranks"]}
    assert len(RunDir(cwd / "runs" / "free").read_steps(0)) == 6 and cores


def test_step_time_agrees_with_the_scripts_own_timer(wrapped):
    """gpt_train.py prints its own ms per iteration (time between the ends of two optimizer steps).
    Over the same run of consecutive steady iterations, the total of hpcprof's step records of
    rank 0 agrees with the total of the script's timer within 2%. Totals, not medians: both timers
    tile the same stretch of time, so their totals differ only by where each places the two end
    boundaries (the script's timer after ``zero_grad``, hpcprof's when ``step()`` returns), whereas
    medians of two noisy series drift apart when the cores change speed."""
    run_dir, proc = wrapped["gpt"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    own = {int(i): float(ms) for i, ms in re.findall(r"iter (\d+): loss [0-9.]+, time ([0-9.]+)ms", proc.stdout)}
    recs = {r["step"]: 1e3 * r["step_s"] for r in RunDir(run_dir).read_steps(0)}
    steady = [i for i in sorted(own) if i >= 3 and i in recs]
    assert len(steady) >= 10 and steady == list(range(steady[0], steady[-1] + 1)), steady
    ours, theirs = sum(recs[i] for i in steady), sum(own[i] for i in steady)
    assert abs(ours - theirs) <= 0.02 * theirs, (ours, theirs)


@pytest.mark.alone  # the drill's cost is checked against a truth timed in the run (tests/conftest.py)
def test_a_straggler_drill_on_an_unchanged_script_names_rank1_with_its_in_run_cost(tmp_path):
    cwd = _folder(tmp_path)
    # batch 32 (about 100 ms a step here): a 50 ms sleep every second step is well inside a step
    proc = _submit(cwd, "drill", "gpt_train.py", ["--max_iters=29", "--eval_interval=1000", "--batch_size=32"],
                   "--inject-straggler", "1:50:2",
                   "--profiler-wait", "3", "--profiler-warmup", "1", "--profiler-active", "10")
    run_dir = cwd / "runs" / "drill"
    _check_run(run_dir, proc, 30)
    truth = drill_truth(run_dir / "steps", profiled_only=True)
    require_resolved_truth(truth, drill_ms=50.0)
    summary = analyze(run_dir, out=tmp_path / "a", workers=2, progress=False)
    figure = assert_straggler_drill_verdict(summary, truth, rank=1, run=run_dir)
    print(f"unchanged GPT script drill: {figure}")


def test_ranks_that_fail_with_the_same_error_are_not_called_peer_failures(tmp_path):
    """Every rank of a script that fails on its own (here: a variable it expects and nobody sets)
    hit the error itself: none 'stopped after' another."""
    (tmp_path / "train.py").write_text("import os\nworld = int(os.environ['MY_CLUSTER_WORLD'])\n")
    proc = _submit(tmp_path, "bad", "train.py", [])
    assert proc.returncode == 1
    assert "failed at step None: KeyError: 'MY_CLUSTER_WORLD'" in proc.stdout
    assert "failed too, with the same error" in proc.stdout and "peer failure" not in proc.stdout, proc.stdout
