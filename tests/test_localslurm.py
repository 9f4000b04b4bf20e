"""tools/localslurm.py without starting anything: why a cluster cannot start is said precisely
(the tests/slurm fixture skips with this reason), and the CLI's errors name the state directory."""

from __future__ import annotations

import pytest

import localslurm  # tools/, on sys.path via tests/conftest.py


def test_not_root_is_the_reason(monkeypatch):
    monkeypatch.setattr(localslurm.os, "geteuid", lambda: 1000)
    reason = localslurm.unavailable_reason()
    assert reason is not None and "needs root" in reason and "uid 1000" in reason


def test_missing_program_is_named_with_its_package(monkeypatch):
    monkeypatch.setattr(localslurm.os, "geteuid", lambda: 0)
    real = localslurm.which
    monkeypatch.setattr(localslurm, "which", lambda p: None if p in ("slurmd", "mariadbd") else real(p))
    reason = localslurm.unavailable_reason()
    assert reason is not None
    assert "slurmd (package slurmd)" in reason and "mariadbd (package mariadb-server-core)" in reason
    assert "install-debian-deps.sh" in reason


def test_down_without_a_cluster_names_the_state_dir(tmp_path, capsys):
    assert localslurm.main(["down", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "localslurm.py up" in err


def test_invalid_node_count_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nodes"):
        localslurm.LocalSlurm(tmp_path, nodes=0)


def test_the_make_targets_run_it_as_a_script_outside_the_package(tmp_path):
    # mk/slurm.mk runs `python tools/localslurm.py ...`; the installed package does not carry it.
    import importlib.util
    import subprocess
    import sys

    from helpers import REPO

    assert importlib.util.find_spec("hpcprof.localslurm") is None
    assert "tools/localslurm.py down" in (REPO / "mk" / "slurm.mk").read_text()
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "localslurm.py"), "down", "--state-dir",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and str(tmp_path) in proc.stderr and "localslurm.py up" in proc.stderr
