"""README "On a cluster, day one", run on the local SLURM cluster: the section's own commands, from
a wheel installed non-editable into a separate venv, a template rendered in another folder than
the checkout, submitted with plain ``sbatch``; and a venv without hpcprof, which fails fast.

The cluster here has no module system, so a ``module`` shell function stands in for
``module load pytorch-gpu/...``: it puts the base interpreter on PATH and a "module site-packages"
on PYTHONPATH, as such modules do. That folder links every package of this project's ``.venv``
(torch, torchvision, submitit, HTA, ...) except hpcprof itself, so the venv sees a PyTorch without
hpcprof, as on a cluster. (``--system-site-packages`` on ``.venv``'s interpreter alone would reach
the base interpreter's packages, not ``.venv``'s: no torch.) pip runs with ``PIP_NO_INDEX=1``: the
"module's" packages must satisfy every dependency, and nothing is downloaded.

The job runs in a folder apart from the checkout, so neither the render nor the ranks can import
hpcprof from the current directory: only the wheel can serve them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


from .test_slurm_jobs import TINY, assert_ranks_on_nodes, manifest, step_numbers

REPO = Path(__file__).resolve().parents[2]
SECTION = "## On a cluster, day one\n"
#: What the test changes in the README's render line for the local cluster: the template and the
#: account of Jean Zay, the GPU job file (a tiny CPU job instead). Each must be in the README.
LOCAL_RENDER = {"--template jean-zay-v100": "--template generic",
                "--account abc@v100": "--partition {partition}",
                "--job ~/hpcprof/jobs/resnet50-2nodes.toml": "--tasks-per-node 2 --train-steps 4 {tiny}"}


def readme_commands() -> list[str]:
    """The bash block of the README section, one command per line."""
    text = (REPO / "README.md").read_text()
    assert SECTION in text, "README lost its 'On a cluster, day one' section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no bash block in README 'On a cluster, day one'"
    return [line for line in block.group(1).splitlines() if line.strip()]


def module_site_packages(where: Path) -> Path:
    """A folder linking every top-level entry of .venv's site-packages except hpcprof's."""
    import torch  # the one this test environment runs on

    source = Path(torch.__file__).resolve().parents[1]
    site = where / "module-site-packages"
    site.mkdir(parents=True)
    for entry in source.iterdir():
        if "hpcprof" in entry.name.lower() or entry.suffix == ".pth":
            continue
        (site / entry.name).symlink_to(entry)
    return site


def checkout_copy(home: Path) -> Path:
    """~/hpcprof: the files a checkout holds that the wheel and the job need."""
    src = home / "hpcprof"
    src.mkdir(parents=True)
    for name in ("hpcprof", "slurm", "jobs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    return src


def day_one_env(cluster, tmp_path: Path) -> tuple[dict, Path, str]:
    """HOME and WORK in tmp_path, the cluster's SLURM_CONF, and the bash prelude defining `module`."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(parents=True)
    home.mkdir(parents=True, exist_ok=True)
    site = module_site_packages(tmp_path)
    base_bin = Path(os.path.realpath(sys._base_executable)).parent
    env = {k: v for k, v in cluster.env.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env.update(HOME=str(home), WORK=str(work), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    prelude = (f"set -euo pipefail\n"
               f"module() {{ export PATH={shlex.quote(str(base_bin))}:\"$PATH\" "
               f"PYTHONPATH={shlex.quote(str(site))}; }}\n")
    return env, work, prelude


def job_id_of(sbatch_stdout: str) -> str:
    m = re.search(r"Submitted batch job (\d+)", sbatch_stdout)
    assert m, f"sbatch printed no job id: {sbatch_stdout!r}"
    return m.group(1)


def batch_output(work: Path, job: str) -> str:
    out = work / f"hpcprof-{job}.out"
    return out.read_text() if out.exists() else f"(no {out.name})"


def test_readme_day_one_from_a_wheel_in_a_separate_venv_completes(slurm_cluster, tmp_path):
    commands = readme_commands()
    assert commands[0].startswith("module load pytorch-gpu/")
    assert commands[1] == "python -m venv --system-site-packages ~/venvs/hpcprof"
    assert commands[-1] == "sbatch job.slurm"
    render = [i for i, c in enumerate(commands) if c.startswith("python -m hpcprof.sbatch ")]
    assert len(render) == 1 and "--venv ~/venvs/hpcprof" in commands[render[0]]
    for readme_text, local in LOCAL_RENDER.items():
        assert readme_text in commands[render[0]], f"README render line lost {readme_text!r}"
        local = local.format(partition=slurm_cluster.partition, tiny=shlex.join(TINY))
        commands[render[0]] = commands[render[0]].replace(readme_text, local)

    env, work, prelude = day_one_env(slurm_cluster, tmp_path)
    checkout_copy(Path(env["HOME"]))
    res = subprocess.run(["bash", "-c", prelude + "\n".join(commands)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Collecting torch" not in res.stdout and "Downloading" not in res.stdout

    venv = Path(env["HOME"]) / "venvs" / "hpcprof"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import hpcprof; print(hpcprof.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(venv / "lib")), f"hpcprof comes from {where}, not the venv's wheel install"
    assert not list(venv.glob("lib/python*/site-packages/__editable__*")), "installed editable"
    assert not list(venv.glob("lib/python*/site-packages/torch")), "pip installed a second torch"
    script = (work / "job.slurm").read_text()
    assert f"source {venv}/bin/activate" in script

    job = job_id_of(res.stdout)
    state = slurm_cluster.wait_job(job, timeout=300)
    run = work / "runs" / f"resnet18-job{job}"
    assert state == "COMPLETED", batch_output(work, job) + "".join(
        p.read_text()[-2000:] for p in sorted((run / "logs").glob("*.out")))
    assert f"run directory runs/resnet18-job{job}" in batch_output(work, job)
    assert_ranks_on_nodes(run)  # a trace per rank, ranks on both nodes
    assert manifest(run)["executor"] == "sbatch" and manifest(run)["job_id"] == job
    assert all(step_numbers(run, r) == [0, 1, 2, 3] for r in range(4))


def test_job_whose_venv_lacks_hpcprof_fails_fast_with_one_line_saying_what_to_install(slurm_cluster, tmp_path):
    env, work, prelude = day_one_env(slurm_cluster, tmp_path)
    venv = Path(env["HOME"]) / "venvs" / "hpcprof"
    # The README's first two lines, no pip install; rendered by this checkout's hpcprof.
    setup = subprocess.run(["bash", "-c", prelude + "\n".join(readme_commands()[:2])], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert setup.returncode == 0, setup.stderr
    render = subprocess.run(
        [sys.executable, "-m", "hpcprof.sbatch", "--template", "generic", "--venv", str(venv),
         "--partition", slurm_cluster.partition, "--nodes", "2", "--tasks-per-node", "2", *TINY,
         "-o", "job.slurm"], cwd=work, env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60)
    assert render.returncode == 0, render.stderr
    # Submitted from a shell with the "module" loaded (torch importable), the venv lacking hpcprof.
    sub = subprocess.run(["bash", "-c", prelude + "module load pytorch-gpu/py3/2.3.0\nsbatch job.slurm"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = job_id_of(sub.stdout)
    state = slurm_cluster.wait_job(job, timeout=120)
    out = batch_output(work, job)
    assert state == "FAILED", out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert lines[0].startswith(f"hpcprof: error: hpcprof is not importable by {venv}/bin/python ")
    assert "No module named 'hpcprof'" in lines[0]
    assert f"pip install hpcprof into the venv given with --venv: {venv}/bin/pip install" in lines[0]
    assert not (work / "runs").exists(), "the job went past the check: it created the run directory"
    exit_code = subprocess.run(["sacct", "-n", "-X", "-j", job, "-o", "ExitCode"], env=slurm_cluster.env,
                               capture_output=True, text=True, timeout=30).stdout.split()
    assert exit_code and exit_code[0] == "1:0", exit_code
