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
