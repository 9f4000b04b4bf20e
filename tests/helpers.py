"""Helpers shared by the test modules: running hpcprof's CLIs as a user would (subprocesses of this
interpreter), and a small CPU job spec that keeps runs to a few seconds. Imported as a plain module
(`from helpers import ...`); fixtures live in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"

# A fast CPU job: 2 ranks, resnet18 on 32 px synthetic images.
FAST_FLAGS = [
    "--job", str(REPO / "jobs" / "demo-local.toml"),
    "--cluster", "local",
    "--model-image-size", "32",
    "--data-batch-size", "8",
]


def run_cli(module: str, *args: str, timeout: float = 300, env: dict | None = None, cwd: Path | None = None):
    """Run ``python -m <module> args`` and return the CompletedProcess (stdout+stderr merged)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or REPO,
    )
