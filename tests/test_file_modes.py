"""Issue 23 item 6: the files written atomically (manifest.json, spec.toml, summary.json, the parse
cache's entries) get the mode the umask gives every other file, so that the group can read a run on
a shared $WORK (they were 0600 whatever the umask: tempfile's mode, kept by the rename)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DLRM = REPO / "tests" / "data" / "param_dlrm_8x_v100"  # carried by the repository

_WRITE_A_RUN = """
import sys
from hpcprof.rundir import RunDir
from hpcprof.rundir import manifest
from hpcprof.spec import spec_from_dict, JobSpec
run = RunDir(sys.argv[1])
spec = JobSpec()
run.create(spec)
manifest.write(run, manifest.Manifest.at_launch(spec, run.name, "local", 2, ["python"]))
open(run.root / "plain.txt", "w").write("what a plain write gives")
"""


def _mode(p: Path) -> str:
    return oct(stat.S_IMODE(p.stat().st_mode))


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_run_and_analysis_files_follow_the_umask(tmp_path, umask):
    env = dict(os.environ)

    def as_user(*cmd):
        return subprocess.run(["sh", "-c", f"umask {umask:03o} && exec \"$@\"", "sh", *cmd], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    run = tmp_path / "run"
    p = as_user(sys.executable, "-c", _WRITE_A_RUN, str(run))
    assert p.returncode == 0, p.stderr
    plain = _mode(run / "plain.txt")
    assert plain == oct(0o666 & ~umask)
    assert {f: _mode(run / f) for f in ("manifest.json", "spec.toml")} == {"manifest.json": plain, "spec.toml": plain}

    out = tmp_path / "analysis"
    a = as_user(sys.executable, "-m", "hpcprof.analyze", str(DLRM), "--out", str(out), "--quiet")
    assert a.returncode == 0, a.stderr
    assert _mode(out / "summary.json") == _mode(out / "report.html") == plain
    entries = [d for d in (out / ".cache").iterdir() if d.is_dir()]
    assert entries and {_mode(d) for d in entries} == {oct(0o777 & ~umask)}, [(_mode(d), d.name) for d in entries]
