"""Fixtures for the analysis tests: the shared real traces, bad variants built in tmp dirs, and one
pair of real 4-rank local CPU runs (healthy + straggler drill) produced once per session."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACES = (REPO / ".." / "shared" / "traces").resolve()
DLRM = TRACES / "param_dlrm_8x_v100"
SAMPLED = TRACES / "hta_sampled_2of128"
KINETO0 = TRACES / "kineto_resnet50_v100_workers0"

# The drill runs: tiny resnet18 on 32 px synthetic images, 4 gloo ranks on this machine.
DRILL_RANKS = 4
DRILL_ARGS = [
    "--job", str(REPO / "jobs" / "demo-local.toml"),
    "--cluster", "local",
    "--tasks-per-node", str(DRILL_RANKS),
    "--model-arch", "resnet18",
    "--model-image-size", "32",
    "--data-batch-size", "8",
    "--train-steps", "30",
    "--profiler-wait", "3",
    "--profiler-warmup", "1",
    "--profiler-active", "10",
]


def require(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"{path} not found (shared/ traces must sit beside the repository)")
    return path


def load_trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def write_trace(path: Path, doc: dict) -> Path:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path


_LOADS: dict[str, float] = {}


def cpu_busy_cores(window_s: float = 2.0) -> float:
    """Cores kept busy by OTHER work right now: /proc/stat sampled over `window_s` while this test
    process sleeps. (The 1-minute load average would also count this suite's own finished runs.)"""
    def sample():
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v) - idle, sum(v)
    try:
        b0, t0 = sample()
        import time

        time.sleep(window_s)
        b1, t1 = sample()
    except OSError:
        return 0.0
    return (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)


def _submit(runs_dir: Path, name: str, extra: list[str]) -> Path:
    # Other work on this machine distorts step times: note how busy it was just before the run.
    _LOADS[name] = cpu_busy_cores()
    cmd = [sys.executable, "-m", "hpcprof.submit", *DRILL_ARGS, "--name", name, "--runs-dir", str(runs_dir), *extra]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    run = runs_dir / name
    if proc.returncode != 0 or not (run / "traces").is_dir():
        raise AssertionError(f"submit failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return run


@pytest.fixture(scope="session")
def drill_runs(tmp_path_factory) -> dict[str, Path]:
    """A healthy 4-rank run and the same run with `--inject-straggler 2:50`, produced once."""
    runs = tmp_path_factory.mktemp("runs")
    return {
        "healthy": _submit(runs, "healthy", []),
        "drill": _submit(runs, "drill", ["--inject-straggler", "2:50"]),
    }


@pytest.fixture(scope="session")
def drill_loads(drill_runs) -> dict[str, float]:
    """Cores busy with other work just before each drill run was started."""
    return dict(_LOADS)


@pytest.fixture(scope="session")
def cpu_run(drill_runs) -> Path:
    return drill_runs["healthy"]


@pytest.fixture
def dlrm_copy(tmp_path) -> Path:
    d = tmp_path / "dlrm"
    shutil.copytree(require(DLRM), d)
    for p in d.iterdir():
        os.chmod(p, 0o644)
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="session")
def traces() -> dict[str, Path]:
    return {"dlrm": DLRM, "sampled": SAMPLED, "kineto0": KINETO0, "root": TRACES}


class _Helpers:
    require = staticmethod(require)
    load_trace = staticmethod(load_trace)
    write_trace = staticmethod(write_trace)


@pytest.fixture(scope="session")
def helpers():
    return _Helpers


def pytest_collection_modifyitems(config, items):
    # HTA 0.5 calls pandas APIs that pandas 3 deprecates, and divides by zero for ranks without
    # communication kernels; neither is ours to fix, so keep this folder's output readable.
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.filterwarnings("ignore:The inplace keyword"))
            item.add_marker(pytest.mark.filterwarnings("ignore:The .lsuffix. and .rsuffix. keywords"))
            item.add_marker(pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"))
            item.add_marker(pytest.mark.filterwarnings("ignore::FutureWarning"))
