"""Session fixtures shared by the top-level test modules (helpers are in helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The development tools (tools/localslurm.py: the local SLURM cluster) are not in the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def small_cpu_run(runs_root):
    """(the submit process, its RunDir): one finished 2-rank local CPU run of jobs/demo-local.toml
    with helpers.FAST_FLAGS, launched once per session. test_launch checks the launch itself on it
    and test_robustness alters copies of it; each of them launched the same run before."""
    from helpers import FAST_FLAGS, run_cli

    from hpcprof.rundir import RunDir

    proc = run_cli("hpcprof.submit", *FAST_FLAGS, "--runs-dir", str(runs_root), "--name", "healthy")
    assert proc.returncode == 0, proc.stdout
    return proc, RunDir(runs_root / "healthy")
