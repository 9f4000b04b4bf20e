"""The real local SLURM cluster used by every test in tests/slurm (marker ``slurm``).

One cluster per test session: ``slurmctld``, MariaDB + ``slurmdbd``, ``slurmd`` nodes ``n1`` and
``n2`` (tools/localslurm.py). Where it cannot start (not root, no namespaces, packages missing),
every test using it is skipped with the precise reason. Deselect with ``-m "not slurm"``.
"""

from __future__ import annotations

import os

import pytest

from localslurm import LocalSlurm, _mnt_ns, unavailable_reason  # tools/, on sys.path via tests/conftest.py


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: runs jobs on a real local SLURM cluster (root, namespaces, Debian "
                   "packages from scripts/install-debian-deps.sh); skipped where it cannot start")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A started LocalSlurm: ``.env`` (environment with SLURM_CONF for subprocesses),
    ``.state_dir``, ``.partition``, ``.node_names``, ``wait_job(id)``, ``sacct_state(id)``."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"local SLURM cluster cannot start: {reason}")
    # Short path: munge and MariaDB sockets live below it (unix socket paths max 107 bytes).
    # `make test` may start one cluster per pytest-xdist worker (PYTEST_XDIST_WORKER gw0, gw1...):
    # each hands out its own range of job ids, so no two jobs share a rendezvous port
    worker = int("".join(c for c in os.environ.get("PYTEST_XDIST_WORKER", "") if c.isdigit()) or 0)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=2, cpus_per_node=8, first_job_id=1 + 1000 * worker)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        left = [name for name, alive in cluster.running().items() if alive]
        left += [f"pid {p} in node {n}'s namespace"
                 for n, ns in cluster.node_namespaces.items()
                 for p in (int(e) for e in os.listdir("/proc") if e.isdigit())
                 if _mnt_ns(p) == ns]
        assert not left, f"local SLURM cluster left processes running: {left}"


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """SLURM_CONF set in this process's environment too (for in-process submitit)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf_path))
    return slurm_cluster.env
