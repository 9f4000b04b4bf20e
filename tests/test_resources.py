"""Where a job runs and with what, decided before anything runs: the local GPU rule (a pure
function of the spec and the visible GPU count), the GPUs a launched local job really sees, the
warnings about wasted GPUs or cores, and the srun options both launch paths share. No GPU needed:
the GPU count is given to the resolution, and the launched job's environment is read back."""

from __future__ import annotations

import argparse
import copy

import pytest

from helpers import REPO
from hpcprof.launch.executors import local_cuda_devices, make_executor
from hpcprof.slurm.geometry import LaunchError, geometry_warnings, resolve_resources
from hpcprof.spec.resources import SlurmResources
from hpcprof.spec import add_spec_arguments, load_spec, spec_from_args

DEMO = REPO / "jobs" / "demo-local.toml"


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    return spec_from_args(parser.parse_args(list(argv)))


def geometry(spec, executor="local", visible=0):
    r = resolve_resources(copy.deepcopy(spec), executor, visible=visible).resources
    return r.tasks_per_node, r.gpus_per_node


# ------------------------------------------------------------------ item 1: make demo uses the GPUs
@pytest.mark.parametrize("visible,expected", [(0, (2, 0)), (1, (1, 1)), (4, (4, 4))])
def test_demo_job_takes_one_rank_per_visible_gpu_and_two_cpu_ranks_without(visible, expected):
    """`make demo` (jobs/demo-local.toml, local executor): every visible GPU, one rank each; with
    none, 2 CPU ranks on gloo as before. (tasks_per_node, gpus_per_node) per visible count."""
    assert geometry(load_spec(DEMO), visible=visible) == expected


def test_local_run_with_fewer_ranks_than_gpus_takes_that_many_gpus():
    assert geometry(parse("--tasks-per-node", "2"), visible=4) == (2, 2)
    assert geometry(parse("--tasks-per-node", "3"), visible=0) == (3, 0)  # no GPU: CPU ranks
    assert geometry(parse("--gpus-per-node", "3"), visible=4) == (3, 3)
    assert geometry(parse("--gpus-per-node", "3", "--tasks-per-node", "2"), visible=4) == (2, 3)


def test_local_run_with_more_ranks_than_visible_gpus_is_refused_with_both_ways_out():
    with pytest.raises(LaunchError) as err:
        resolve_resources(parse("--tasks-per-node", "2"), "local", visible=1)
    msg = str(err.value)
    assert "resources.tasks_per_node = 2" in msg and "1 visible GPU(s)" in msg
    assert "--tasks-per-node 1" in msg and "CUDA_VISIBLE_DEVICES=" in msg
    with pytest.raises(LaunchError, match="this machine has 2 visible GPU"):
        resolve_resources(parse("--gpus-per-node", "4"), "local", visible=2)


def test_debug_executor_runs_one_rank_on_one_gpu_at_most():
    assert geometry(load_spec(DEMO), "debug", visible=4) == (1, 1)
    assert geometry(load_spec(DEMO), "debug", visible=0) == (1, 0)


def test_slurm_resolution_ignores_this_machines_gpus():
    """On SLURM the template or the flags describe the machine, not the submitting host."""
    assert geometry(load_spec(DEMO), "slurm", visible=8) == (1, 0)
    assert geometry(parse("--gpus-per-node", "4"), "slurm", visible=0) == (4, 4)


@pytest.mark.parametrize("caller,gpus,expected", [
    (None, 2, None),                      # unset: submitit's 0..n-1 are the machine's first GPUs
    ("", 0, None),                        # hidden: CPU ranks (submitit exports an empty list)
    ("3,5,6", 2, ("3", "5")),             # a scheduler's or a user's subset: the first n of it
    ("GPU-aa, MIG-bb", 2, ("GPU-aa", "MIG-bb")),
])
def test_local_ranks_get_the_callers_gpus(caller, gpus, expected):
    assert local_cuda_devices(caller, gpus) == expected


@pytest.mark.parametrize("caller,gpus,seen", [
    ("3,5,6", 2, "3,5"), ("GPU-aa,MIG-bb", 1, "GPU-aa"), (None, 2, "0,1"), ("4,5", 0, ""),
])
def test_launched_local_job_sees_the_gpus_the_resolution_gave_it(caller, gpus, seen, tmp_path, monkeypatch):
    """A real submitit local job (2 tasks) started by make_executor, as `submit` starts the ranks:
    each task's CUDA_VISIBLE_DEVICES is read back from its own environment."""
    import submitit

    if caller is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", caller)
    spec = parse("--tasks-per-node", "2", "--time-min", "2")
    spec = resolve_resources(spec, "local", visible=2 if gpus else 0)
    spec.resources.gpus_per_node = gpus  # (1 GPU for 2 ranks is refused; the executor is what is tested)
    ex = make_executor(spec.resources, "local", tmp_path)
    job = ex.submit(submitit.helpers.CommandFunction(["sh", "-c", 'printf "%s" "${CUDA_VISIBLE_DEVICES-unset}"']))
    assert job.results() == [seen, seen]


# ------------------------------------------------------------------ items 5 and 20: warnings
def test_fewer_ranks_than_gpus_warns_that_gpus_stay_idle():
    (line,) = geometry_warnings(SlurmResources(tasks_per_node=4, gpus_per_node=8, cpus_per_task=8))
    assert "4 GPU(s) per node stay idle" in line and "--gpus-per-node 4" in line


def test_ranks_without_cpus_per_task_on_slurm_warn_with_the_fix():
    (line,) = geometry_warnings(SlurmResources(tasks_per_node=4, gpus_per_node=4), num_workers=6)
    assert "resources.cpus_per_task is not set" in line and "6 DataLoader worker(s)" in line
    assert "--cpus-per-task 10" in line  # e.g. on a 40-core node, 4 ranks
    assert geometry_warnings(SlurmResources(tasks_per_node=2), num_workers=2)  # CPU ranks with workers too
    # Nothing to say: cores given, or CPU ranks without workers (one core per rank is the CPU layout),
    # or a local run (no SLURM binding).
    assert geometry_warnings(SlurmResources(tasks_per_node=4, gpus_per_node=4, cpus_per_task=10), 6) == []
    assert geometry_warnings(SlurmResources(tasks_per_node=2)) == []
    assert geometry_warnings(SlurmResources(tasks_per_node=4, gpus_per_node=4), 6, slurm=False) == []


# ------------------------------------------------------------------ item 3: srun options, one definition
def test_srun_options_reach_submitit_for_the_training_job_and_the_analysis_array():
    r = SlurmResources(tasks_per_node=4, gpus_per_node=4, cpus_per_task=10)
    assert r.srun_options() == ["--kill-on-bad-exit=1", "--cpus-per-task=10"]
    assert r.submitit_parameters("slurm")["slurm_srun_args"] == r.srun_options()
    assert SlurmResources(tasks_per_node=2).srun_options() == ["--kill-on-bad-exit=1"]
    assert "slurm_srun_args" not in r.submitit_parameters("local")



# ------------------------------------------------------------------ item 6: the batch script's pre-flight
def test_preflight_reads_the_gpus_slurm_gave_the_batch_step():
    from hpcprof.rank.device import gpus_requested

    assert gpus_requested({"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_GPUS": "0,1"}) == 4
    assert gpus_requested({"SLURM_JOB_GPUS": "2,3"}) == 2  # SLURM without SLURM_GPUS_ON_NODE
    assert gpus_requested({"SLURM_CPUS_PER_TASK": "10"}) == 0


def test_preflight_names_torchs_cuda_and_the_request_when_torch_cannot_use_the_gpus():
    from hpcprof.rank.device import cuda_problem

    assert cuda_problem(0, "2.3.0", None, False, 0) is None  # CPU job: nothing to check
    assert cuda_problem(4, "2.3.0+cu121", "12.1", True, 4) is None
    cpu_build = cuda_problem(4, "2.3.0+cpu", None, False, 0)
    assert cpu_build.startswith("4 GPU(s) requested but torch.cuda.is_available() is False")
    assert "torch 2.3.0+cpu is a CPU-only build" in cpu_build
    old_driver = cuda_problem(4, "2.5.0+cu124", "12.4", False, 0)
    assert "torch 2.5.0+cu124 built for CUDA 12.4" in old_driver and "older than CUDA 12.4" in old_driver
    assert "torch sees 2" in cuda_problem(4, "2.3.0+cu121", "12.1", True, 2)


# ------------------------------------------------------------------ the README's submit line
def test_readme_submit_line_asks_slurm_for_one_rank_per_gpu_with_its_cores(monkeypatch):
    """README "Launching": the shipped 2-node job file with the machine given as flags. What submit
    would hand to submitit, resolved as it resolves it (the job file itself holds no geometry)."""
    import shlex

    from hpcprof.launch.submit import build_parser

    readme = (REPO / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("python -m hpcprof.submit --cluster slurm "))
    monkeypatch.chdir(REPO)
    spec = spec_from_args(build_parser().parse_args(shlex.split(line)[3:]))
    spec = resolve_resources(spec, "slurm")
    params = spec.resources.submitit_parameters("slurm")
    assert (params["nodes"], params["tasks_per_node"], params["gpus_per_node"], params["cpus_per_task"]) == (2, 4, 4, 10)
    assert params["slurm_srun_args"] == ["--kill-on-bad-exit=1", "--cpus-per-task=10"]
    assert geometry_warnings(spec.resources, spec.data.num_workers) == []
    job_file = load_spec(REPO / "jobs" / "resnet50-2nodes.toml").resources
    assert (job_file.gpus_per_node, job_file.tasks_per_node, job_file.cpus_per_task, job_file.slurm_extra) == (0, 0, 0, {})


def test_submit_to_slurm_prints_the_geometry_warnings_before_submitting(tmp_path, monkeypatch, capsys):
    """`python -m hpcprof.submit --cluster slurm` warns as the sbatch renderer does (item 20); the
    submission itself is stubbed to fail here (no SLURM), which also shows the warning comes first."""
    from hpcprof.launch import submit

    def no_slurm(*args, **kwargs):
        raise RuntimeError("sbatch: no SLURM here")

    monkeypatch.setattr(submit, "make_executor", no_slurm)
    spec = parse("--cluster", "slurm", "--gpus-per-node", "4", "--data-source", "fakedata",
                 "--data-num-workers", "6", "--runs-dir", str(tmp_path), "--name", "w")
    with pytest.raises(LaunchError, match="no SLURM here"):
        submit.launch(spec, argv=["python", "-m", "hpcprof.submit"], log=lambda *a: None)
    err = capsys.readouterr().err
    assert "hpcprof: warning: resources.cpus_per_task is not set" in err and "6 DataLoader worker(s)" in err
    assert not (tmp_path / "w").exists()  # the run directory of a job that never started is removed
