"""hpcprof.sbatch: templates rendered from a job spec (golden files, bash -n, shellcheck) and every
unsafe value refused with the field named. No SLURM needed; tests/slurm submits them for real."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from hpcprof import sbatch

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("HPCPROF_UPDATE_GOLDEN") == "1"

# One realistic command per template; the golden file is exactly what it prints.
CASES = {
    "jean-zay-v100": ["--template", "jean-zay-v100", "--nodes", "2", "--account", "abc@v100",
                      "--qos", "qos_gpu-t3", "--time-min", "120", "--model-arch", "resnet50",
                      "--data-batch-size", "64", "--train-steps", "30", "--profiler-wait", "5",
                      "--profiler-warmup", "2", "--profiler-active", "5", "--name", "rn50-v100"],
    "jean-zay-a100": ["--template", "jean-zay-a100", "--nodes", "4", "--account", "abc@a100",
                      "--qos", "qos_gpu_a100-t3", "--module", "pytorch-gpu/py3/2.5.0",
                      "--data-source", "fakedata", "--data-num-workers", "6",
                      "--data-pin-memory", "--model-amp", "bf16", "--model-channels-last"],
    "jean-zay-h100": ["--template", "jean-zay-h100", "--nodes", "2", "--gpus-per-node", "2",
                      "--account", "abc@h100", "--qos", "qos_gpu_h100-dev",
                      "--inject-straggler", "1:50", "--runs-dir", "/lustre/fswork/projects/abc/runs"],
    "generic": ["--template", "generic", "--partition", "gpu", "--nodes", "2",
                "--gpus-per-node", "4", "--cpus-per-task", "8", "--mem-gb", "64",
                "--venv", "/opt/venvs/hpcprof", "--module", "cuda/12.1",
                "--slurm-extra", "exclusive=", "--time-min", "1500"],
    "generic-cpu": ["--template", "generic", "--nodes", "2", "--tasks-per-node", "2",
                    "--model-arch", "resnet18", "--model-image-size", "32"],
    # The shipped job file describes the work; each template's machine geometry applies.
    "jean-zay-v100-resnet50-2nodes": ["--template", "jean-zay-v100", "--account", "abc@v100",
                                      "--job", "jobs/resnet50-2nodes.toml"],
    "jean-zay-a100-resnet50-2nodes": ["--template", "jean-zay-a100", "--account", "abc@a100",
                                      "--job", "jobs/resnet50-2nodes.toml"],
    "jean-zay-h100-resnet50-2nodes": ["--template", "jean-zay-h100", "--account", "abc@h100",
                                      "--job", "jobs/resnet50-2nodes.toml"],
}


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch):
    """Render from the checkout, as the README does: job files are named as jobs/..., which the
    golden files record in their "Rendered ... by:" line."""
    monkeypatch.chdir(REPO)


def render_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = sbatch.main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_template_matches_golden_file(case, capsys):
    code, out, err = render_cli(CASES[case], capsys)
    assert code == 0, err
    golden = GOLDEN / f"{case}.sbatch"
    if UPDATE:
        golden.write_text(out)
    assert golden.exists(), f"{golden} missing; create it with HPCPROF_UPDATE_GOLDEN=1"
    assert out == golden.read_text(), f"rendered {case} differs from {golden} (HPCPROF_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_script_passes_bash_n_and_shellcheck(case, capsys, tmp_path):
    code, out, err = render_cli(CASES[case], capsys)
    assert code == 0, err
    script = tmp_path / f"{case}.sbatch"
    script.write_text(out)
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (Debian package shellcheck; scripts/install-debian-deps.sh)")
    res = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("name", sbatch.available_templates())
def test_template_as_shipped_passes_shellcheck(name):
    path = sbatch.templates_dir() / f"{name}.sbatch"
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", "--severity=style", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def sbatch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_jean_zay_templates_request_one_task_per_gpu(capsys):
    expected = {"jean-zay-v100": ("4", "10", "v100-32g", "xxx@v100"),
                "jean-zay-a100": ("8", "8", "a100", "xxx@a100"),
                "jean-zay-h100": ("4", "24", "h100", "xxx@h100")}
    for name, (gpus, cpus, constraint, account) in expected.items():
        code, out, _ = render_cli(["--template", name, "--nodes", "2"], capsys)
        assert code == 0
        lines = sbatch_lines(out)
        assert f"#SBATCH --gres=gpu:{gpus}" in lines
        assert f"#SBATCH --ntasks-per-node={gpus}" in lines
        assert f"#SBATCH --cpus-per-task={cpus}" in lines
        assert f"#SBATCH --constraint={constraint}" in lines
        assert f"#SBATCH --account={account}" in lines
        assert "#SBATCH --hint=nomultithread" in lines
        assert "#SBATCH --nodes=2" in lines
        assert re.search(r"^srun .*\\\n\s+python -m hpcprof\.train ", out, re.M)


def test_generic_template_without_gpus_has_no_gpu_line(capsys):
    code, out, _ = render_cli(["--template", "generic", "--tasks-per-node", "2"], capsys)
    assert code == 0
    assert not [line for line in sbatch_lines(out) if "gpu" in line]
    code, out, _ = render_cli(["--template", "generic", "--gpus-per-node", "2",
                               "--gpu-request", "gpus-per-node"], capsys)
    assert "#SBATCH --gpus-per-node=2" in sbatch_lines(out)


def test_more_tasks_than_gpus_is_refused(capsys):
    code, out, err = render_cli(["--template", "jean-zay-v100", "--tasks-per-node", "8"], capsys)
    assert code == 2 and out == ""
    assert "resources.tasks_per_node" in err


# (arguments, field the error must name)
INJECTIONS = [
    (["--job-name", "a;b"], "job_name"),
    (["--job-name", "$(reboot)"], "job_name"),
    (["--account", "`id`"], "account"),
    (["--partition", "gpu'x"], "partition"),
    (["--qos", 'q"x'], "qos"),
    (["--constraint", "a\nb"], "constraint"),
    (["--module", "x; rm -rf /"], "--module"),
    (["--module", "$(id)"], "--module"),
    (["--module", "a\nb"], "--module"),
    (["--venv", "/opt/v;id"], "--venv"),
    (["--venv", "/opt/`id`"], "--venv"),
    (["--venv", "$HOME/venv"], "--venv"),
    (["--venv", "/opt/my venv"], "--venv"),
    (["--venv", "~/venv"], "--venv"),  # quoted, so never expanded: the shell must expand it first
    (["--venv", "/opt/v'x"], "--venv"),
    (["--data-path", "/data; id"], "data.path"),
    (["--data-path", "/data\nid"], "data.path"),
    (["--runs-dir", "runs$(id)"], "runs_dir"),
    (["--runs-dir", "it's"], "runs_dir"),
    (["--name", "x;y"], "name"),
    (["--setup", "module load x; id"], "resources.setup[0]"),
    (["--setup", "source '/x'"], "resources.setup[0]"),
    (["--setup", "echo `id`"], "resources.setup[0]"),
    (["--slurm-extra", "mail-user=a;id"], "slurm_extra"),
    (["--slurm-extra", "a$(id)=1"], "slurm_extra"),
    (["--inject-straggler", "1:50;id"], "drills.straggler"),
]


@pytest.mark.parametrize("args,field", INJECTIONS, ids=[f"{a[0]}={a[1]!r}" for a, _ in INJECTIONS])
def test_unsafe_value_is_refused_naming_the_field_and_nothing_is_written(args, field, capsys, tmp_path):
    target = tmp_path / "job.slurm"
    code, out, err = render_cli(["--template", "generic", "--output", str(target), *args], capsys)
    assert code == 2
    assert field in err, err
    assert out == "" and not target.exists() and not list(tmp_path.iterdir())


def test_unknown_template_lists_the_valid_ones(capsys):
    code, out, err = render_cli(["--template", "jean-zay-p100"], capsys)
    assert code == 2 and out == ""
    for name in ("jean-zay-v100", "jean-zay-a100", "jean-zay-h100", "generic"):
        assert name in err


def test_output_file_is_written_only_on_success(capsys, tmp_path):
    target = tmp_path / "job.slurm"
    code, out, err = render_cli(["--template", "generic", "--output", str(target)], capsys)
    assert code == 0 and out == ""
    assert target.read_text().startswith("#!/bin/bash\n")
    assert f"sbatch {target}" in err


def test_constraint_with_slurm_operators_is_accepted(capsys):
    # One SLURM-resources type: the spec accepts what sbatch accepts ("&" and "|" are constraint
    # operators); before, the spec refused "&" before the renderer could take it.
    code, out, err = render_cli(["--template", "generic", "--constraint", "v100-32g&ib|a100"], capsys)
    assert code == 0, err
    assert "#SBATCH --constraint=v100-32g&ib|a100" in sbatch_lines(out)
    code, out, err = render_cli(["--template", "generic", "--partition", "gpu|cpu"], capsys)
    assert code == 2 and "resources.partition" in err and "'|'" in err


def test_value_starting_with_a_dash_reaches_the_ranks_as_a_value(capsys, tmp_path):
    # "--data-path -x" would be read by the rank's parser as two flags; the script passes --flag=value.
    code, out, err = render_cli(["--template", "generic", "--data-source", "imagefolder",
                                 "--set", "data.path=--no-profiler-enabled"], capsys)
    assert code == 0, err
    assert "    --data-path=--no-profiler-enabled\n" in out
    import argparse

    from hpcprof.spec import add_spec_arguments, spec_from_args

    parser = argparse.ArgumentParser()  # what python -m hpcprof.train parses
    add_spec_arguments(parser)
    spec = spec_from_args(parser.parse_args(["--data-source", "imagefolder", "--data-path=--no-profiler-enabled"]))
    assert spec.data.path == "--no-profiler-enabled" and spec.profiler.enabled


def test_non_editable_install_renders_templates_from_another_directory(tmp_path):
    """A wheel installed (not editable) into a fresh venv carries the templates as package data."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("hpcprof", "slurm"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    py = Path(sys.executable)
    wheels = tmp_path / "wheels"
    # Built with this environment's setuptools (no download); --no-deps: rendering needs no torch.
    subprocess.run([str(py), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(src)], check=True, capture_output=True, text=True)
    venv = tmp_path / "venv"
    subprocess.run([str(py), "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "--python", str(vpy), "install", "-q", "--no-deps", "--no-index",
                    *map(str, wheels.glob("hpcprof-*.whl"))], check=True, capture_output=True, text=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = REPO / "jobs" / "resnet50-2nodes.toml"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    res = subprocess.run([str(vpy), "-m", "hpcprof.sbatch", "--template", "jean-zay-v100", "--nodes", "2",
                          "--account", "abc@v100", "--job", str(job)],
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    where = subprocess.run([str(vpy), "-c", "import hpcprof; print(hpcprof.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True).stdout
    assert where.startswith(str(venv)), f"hpcprof imported from {where}, not from the installed wheel"
    assert "#SBATCH --account=abc@v100" in sbatch_lines(res.stdout)
    assert "#SBATCH --nodes=2" in sbatch_lines(res.stdout)
    assert res.stdout.startswith("#!/bin/bash\n")


def _run_rendered(script: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run a rendered script with bash outside SLURM: it must stop before srun, so no SLURM is needed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["SLURM_JOB_ID"] = "77"
    return subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_script_whose_venv_lacks_hpcprof_stops_before_srun_with_one_line_saying_what_to_install(tmp_path):
    venv = tmp_path / "venvs" / "empty"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    script = tmp_path / "job.slurm"
    assert sbatch.main(["--template", "generic", "--venv", str(venv), "--output", str(script)]) == 0
    res = _run_rendered(script, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"hpcprof: error: hpcprof is not importable by {venv}/bin/python ")
    assert "No module named 'hpcprof'" in lines[0]
    assert f"pip install hpcprof into the venv given with --venv: {venv}/bin/pip install" in lines[0]
    assert not (tmp_path / "runs").exists(), "the script went past the check (it created the run directory)"


def test_script_with_a_missing_venv_stops_with_one_line_naming_it(tmp_path):
    script = tmp_path / "job.slurm"
    missing = tmp_path / "no-such-venv"
    assert sbatch.main(["--template", "jean-zay-v100", "--venv", str(missing), "--output", str(script)]) == 0
    # The Jean Zay template runs `module purge` first; outside a module system, a no-op stands in.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "module").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "module").chmod(0o755)
    env_path = f"{bin_dir}:{os.environ['PATH']}"
    res = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                              "PATH": env_path, "SLURM_JOB_ID": "77"})
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        f"hpcprof: error: no virtual environment at {missing} (--venv): create it with "
        f"python -m venv --system-site-packages {missing}"]
    assert not (tmp_path / "runs").exists()


def test_script_passes_the_import_check_when_the_venv_holds_hpcprof(tmp_path):
    """The check is not a wall: with this environment (hpcprof importable), the script goes on to srun."""
    script = tmp_path / "job.slurm"
    venv = Path(sys.executable).parent.parent
    assert sbatch.main(["--template", "generic", "--venv", str(venv), "--output", str(script)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST="n1", PYTHONPATH=str(REPO), PATH="/usr/bin:/bin")  # no srun on this PATH
    res = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert "not importable" not in res.stderr
    assert "srun" in res.stderr and (tmp_path / "runs" / "resnet50-job77" / "logs").is_dir()


# ------------------------------------------------------------------ the machine's geometry (issue 18)
TEMPLATE_GEOMETRY = {"jean-zay-v100": (4, 10), "jean-zay-a100": (8, 8), "jean-zay-h100": (4, 24)}


@pytest.mark.parametrize("name", sorted(TEMPLATE_GEOMETRY))
def test_shipped_job_file_gets_one_rank_per_gpu_with_each_templates_cores(name, capsys):
    """jobs/resnet50-2nodes.toml describes the work; each template's node geometry applies (the
    golden files *-resnet50-2nodes.sbatch show the whole script), and the srun line and the ranks'
    spec carry the same cores."""
    gpus, cpus = TEMPLATE_GEOMETRY[name]
    code, out, err = render_cli(["--template", name, "--job", "jobs/resnet50-2nodes.toml"], capsys)
    assert code == 0 and "warning" not in err, err
    lines = sbatch_lines(out)
    for line in (f"--gres=gpu:{gpus}", f"--ntasks-per-node={gpus}", f"--cpus-per-task={cpus}",
                 "--hint=nomultithread", "--nodes=2"):
        assert f"#SBATCH {line}" in lines, (line, lines)
    assert f"SRUN_OPTIONS=(--kill-on-bad-exit=1 --cpus-per-task={cpus})\n" in out
    assert f"    --cpus-per-task {cpus}\n" in out and f"    --gpus-per-node {gpus}\n" in out


@pytest.mark.parametrize("name", sbatch.available_templates())
def test_shipped_templates_srun_options_are_what_rendering_writes(name, capsys):
    """The templates as shipped hold the srun options SlurmResources.srun_options gives for their
    own #SBATCH lines: a template used unrendered launches like a rendered one (and like submit)."""
    shipped = (sbatch.templates_dir() / f"{name}.sbatch").read_text()
    code, out, err = render_cli(["--template", name], capsys)
    assert code == 0, err
    srun_line = [line for line in out.splitlines() if line.startswith("SRUN_OPTIONS=")]
    assert len(srun_line) == 1 and srun_line[0] in shipped.splitlines()
    assert '\nsrun "${SRUN_OPTIONS[@]}" ' in shipped


def test_render_warns_about_idle_gpus_and_ranks_on_one_core_and_still_writes(capsys, tmp_path):
    target = tmp_path / "job.slurm"
    code, out, err = render_cli(["--template", "generic", "--gpus-per-node", "4", "--data-source", "fakedata",
                                 "--data-num-workers", "6", "-o", str(target)], capsys)
    assert code == 0 and target.exists()
    warnings = [line for line in err.splitlines() if line.startswith("hpcprof.sbatch: warning: ")]
    assert len(warnings) == 1 and "resources.cpus_per_task is not set" in warnings[0], err
    assert "its 6 DataLoader worker(s)" in warnings[0] and "--cpus-per-task" in warnings[0]
    code, out, err = render_cli(["--template", "jean-zay-a100", "--tasks-per-node", "2"], capsys)
    assert code == 0 and "hpcprof.sbatch: warning: resources.tasks_per_node = 2 < gpus_per_node = 8" in err
    code, out, err = render_cli(["--template", "generic", "--gpus-per-node", "4", "--cpus-per-task", "8",
                                 "--data-source", "fakedata", "--data-num-workers", "6"], capsys)
    assert code == 0 and "warning" not in err


def _setup_block(text: str) -> list[str]:
    return text.split("# >>> hpcprof:setup", 1)[1].split("# <<< hpcprof:setup", 1)[0].splitlines()[1:]


def test_venv_keeps_the_templates_pytorch_module_and_module_replaces_it(capsys):
    code, out, _ = render_cli(["--template", "jean-zay-v100", "--venv", "/opt/venvs/hp"], capsys)
    block = _setup_block(out)
    assert block[0] == "module load pytorch-gpu/py3/2.3.0" and "source /opt/venvs/hp/bin/activate" in block
    code, out, _ = render_cli(["--template", "jean-zay-v100", "--venv", "/opt/venvs/hp",
                               "--module", "pytorch-gpu/py3/2.5.0"], capsys)
    block = _setup_block(out)
    assert block[0] == "module load pytorch-gpu/py3/2.5.0" and "pytorch-gpu/py3/2.3.0" not in out


def _module_site(where: Path) -> Path:
    """A "module" site-packages: every package of this environment (torch...) but hpcprof."""
    import torch

    site = where / "module-site"
    site.mkdir()
    for entry in Path(torch.__file__).resolve().parents[1].iterdir():
        if "hpcprof" not in entry.name.lower() and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    return site


def _run_with_module_system(script: Path, tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess:
    """Run a rendered Jean Zay script with a stand-in module system: `module load pytorch-gpu/...`
    puts a python on PATH and torch on PYTHONPATH (as the site's module does; hpcprof comes from the
    checkout), anything else is a no-op. No srun on PATH: a script that passes its checks stops there."""
    site = _module_site(tmp_path)
    base_bin = Path(os.path.realpath(sys._base_executable)).parent  # a python without torch
    module = ("() { case \"${1-} ${2-}\" in \"load pytorch-gpu\"*) "
              f"export PATH={shlex.quote(str(base_bin))}:\"$PATH\" "
              f"PYTHONPATH={shlex.quote(str(site))}:{shlex.quote(str(REPO))};; esac; }}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update({"BASH_FUNC_module%%": module, "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n1",
                "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env_extra})
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_jean_zay_job_with_a_venv_on_the_pytorch_module_gets_past_its_checks(tmp_path):
    """README day one on Jean Zay: a venv made with --system-site-packages on the pytorch-gpu module.
    The script runs `module purge`; torch is there only if it loads the module again."""
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                   check=True)
    script = tmp_path / "job.slurm"
    assert sbatch.main(["--template", "jean-zay-v100", "--venv", str(venv), "--tasks-per-node", "1",
                        "--output", str(script)]) == 0
    res = _run_with_module_system(script, tmp_path)
    assert "hpcprof: error" not in res.stderr, res.stderr
    assert "srun" in res.stderr and (tmp_path / "runs" / "resnet50-job77" / "logs").is_dir(), res.stderr


def test_gpu_job_whose_torch_cannot_use_cuda_stops_before_srun_naming_torch_and_the_request(tmp_path):
    """The batch step got 4 GPUs (SLURM_GPUS_ON_NODE) but this torch sees none: one line, exit 1."""
    import torch

    script = tmp_path / "job.slurm"
    assert sbatch.main(["--template", "jean-zay-v100", "--output", str(script)]) == 0
    res = _run_with_module_system(script, tmp_path, SLURM_GPUS_ON_NODE="4")
    assert res.returncode == 1, res.stdout + res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("hpcprof: error: 4 GPU(s) requested but torch.cuda.is_available() is False: ")
    assert f"torch {torch.__version__}" in line and (str(torch.version.cuda) in line or "CPU-only" in line)
    assert not (tmp_path / "runs").exists()
