"""Issue 23 items 4, 14 and 15, `python -m hpcprof.sbatch`: where the script goes (-o) never
destroys what is there (a device, a FIFO, a folder, a symlink's target), `-o -` is standard output,
a template that is not UTF-8 is one line, and values starting with "-" (--runs-dir=-x, --name=-x)
never render a script whose ranks all fail."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import one_line_error

REPO = Path(__file__).resolve().parents[1]
JOB = str(REPO / "jobs" / "demo-local.toml")


def _sbatch(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcprof.sbatch", "--template", "generic", "--job", JOB, *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_dash_o_dash_writes_the_script_to_standard_output(tmp_path):
    p = _sbatch("-o", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("#!/bin/bash") and "python -m hpcprof.train" in p.stdout
    assert not (tmp_path / "-").exists(), "-o - wrote a file named '-'"
    assert "sbatch -" not in p.stderr, p.stderr


def test_a_fifo_or_a_device_is_refused_and_left_as_it_was(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = one_line_error(_sbatch("-o", str(fifo)), str(fifo), "FIFO", "not a regular file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced"
    assert "> " in line  # says how to write into it instead (a shell redirection)
    if os.geteuid() == 0:
        dev = tmp_path / "full"
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # what /dev/full is
        one_line_error(_sbatch("-o", str(dev)), str(dev), "device")
        assert stat.S_ISCHR(dev.lstat().st_mode), "the device node was replaced by a file"
    one_line_error(_sbatch("-o", "/dev/null"), "/dev/null", "device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    folder = tmp_path / "folder"  # refused before this issue too: kept as a control
    folder.mkdir()
    one_line_error(_sbatch("-o", str(folder)), str(folder), "is a folder")
    assert folder.is_dir() and not list(folder.iterdir())


def test_a_symlink_is_followed_the_link_stays_and_its_target_gets_the_script(tmp_path):
    target = tmp_path / "scripts" / "job.sbatch"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "job.sbatch"
    link.symlink_to(target)
    p = _sbatch("-o", str(link))
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("#!/bin/bash")
    dangling = tmp_path / "dangling.sbatch"
    dangling.symlink_to(tmp_path / "nowhere" / "x.sbatch")
    one_line_error(_sbatch("-o", str(dangling)), str(dangling), "does not exist")
    assert dangling.is_symlink()


def test_a_template_that_is_not_utf8_isone_line_error(tmp_path):
    text = (REPO / "slurm" / "generic.sbatch").read_text()
    latin = tmp_path / "mine.sbatch"
    latin.write_bytes(text.replace("# ", "# Réseau: ", 1).encode("latin-1"))
    line = one_line_error(_sbatch("--template", str(latin)), str(latin), "UTF-8")
    assert "line 2" in line or "line 1" in line, line


def _rendered_srun_args(script: Path, cwd: Path) -> list[str]:
    """Run the script with a stand-in srun that records the rank command it would start."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {cwd}/srun.args\n')
    (bin_dir / "srun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST="n1", PYTHONPATH=str(REPO),
               PATH=f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    res = subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    args = (cwd / "srun.args").read_text().splitlines()
    return args[args.index("hpcprof.train") + 1:]


def test_a_runs_dir_starting_with_a_dash_reaches_the_ranks_as_that_folder(tmp_path):
    script = tmp_path / "job.sbatch"
    p = _sbatch("--runs-dir=-x", "-o", str(script))
    assert p.returncode == 0, p.stderr
    args = _rendered_srun_args(script, tmp_path)
    from hpcprof.rank.entry import build_parser
    from hpcprof.spec import spec_from_args

    spec = spec_from_args(build_parser().parse_args(args))  # what every rank parses
    assert Path(spec.runs_dir) == Path("-x"), spec.runs_dir
    assert (tmp_path / "-x" / "resnet18-job77" / "logs").is_dir(), "the script's own mkdir failed"


@pytest.mark.parametrize("module", ["hpcprof.sbatch", "hpcprof.submit"])
def test_a_run_name_starting_with_a_dash_is_refused_inone_line_error(tmp_path, module):
    p = subprocess.run([sys.executable, "-m", module, "--job", JOB, "--cluster", "local", "--name=-x",
                        "--runs-dir", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    one_line_error(p, "'-x'", "name")
    assert not list(tmp_path.iterdir())
