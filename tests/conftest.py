"""Session fixtures shared by the top-level test modules (helpers are in helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The development tools (tools/localslurm.py: the local SLURM cluster) are not in the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from helpers import INPUT_DIRS, input_snapshot, snapshot_changes  # noqa: E402  (helpers sits beside this file)


@pytest.fixture(scope="session", autouse=True)
def input_folders_unchanged():
    """The tests' input folders (helpers.INPUT_DIRS: the real traces of tests/data, the golden
    files) are hashed when the session starts and again when it ends; any file changed, added or
    removed fails the session (an error at the teardown of its last test), naming the paths. A
    test reads its inputs there and writes under tmp_path, never beside them."""
    before = input_snapshot(INPUT_DIRS)
    yield
    changes = snapshot_changes(before, input_snapshot(INPUT_DIRS))
    if changes:
        pytest.fail("the test session wrote into its input folders (tests must write under tmp_path):\n  "
                    + "\n  ".join(changes[:50]) + (f"\n  ... and {len(changes) - 50} more" if len(changes) > 50 else ""),
                    pytrace=False)


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
