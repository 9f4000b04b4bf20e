"""analysis/post_job.ipynb runs as the README tells a user to run it: the command is read from the
README and run from the checkout root, against a real run given as `runs/<name>`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat

from .conftest import DRILL_RANKS

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "analysis" / "post_job.ipynb"


def readme_command() -> str:
    lines = [ln.strip() for ln in (REPO / "README.md").read_text().splitlines() if "nbconvert" in ln and "post_job.ipynb" in ln]
    assert lines, "README.md gives no command to run analysis/post_job.ipynb"
    return lines[0]


def test_post_job_notebook_runs_as_the_readme_says(cpu_run, tmp_path):
    cmd = readme_command()
    assert "runs/<name>" in cmd
    name = f".test-notebook-{uuid.uuid4().hex[:8]}"
    runs = REPO / "runs"
    runs.mkdir(exist_ok=True)
    run = runs / name
    # the user's run lives in runs/<name>; the test's run is a fresh copy of a real multi-rank CPU run
    shutil.copytree(cpu_run, run, ignore=shutil.ignore_patterns("analysis"))
    try:
        if not (REPO / ".venv" / "bin" / "python").exists():  # tests run from another interpreter
            cmd = cmd.replace(".venv/bin/python", sys.executable)
        env = {**os.environ, "MPLBACKEND": "Agg"}
        proc = subprocess.run(cmd.replace("<name>", name), shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        executed = run / "analysis" / "post_job.ipynb"
        assert executed.is_file(), f"the command did not write {executed}: {proc.stderr[-2000:]}"
        nb = nbformat.read(executed, as_version=4)
        assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert "parameters" in code[0].get("metadata", {}).get("tags", []), "the parameters cell must be the first code cell"
        outs = [o for c in code for o in c.get("outputs", [])]
        assert not [o for o in outs if o.get("output_type") == "error"]
        text = "\n".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
        assert f"({run.resolve()})" in text, "the notebook did not load the run given as runs/<name>"
        assert f"world size {DRILL_RANKS}" in text
        assert re.search(r"rank \d+ arrived last at \d+ of \d+ matched collectives", text)
        # every section explains what to look for
        md = [c for c in nb.cells if c.cell_type == "markdown"]
        assert len(md) >= 6 and all(len(c.source.split()) >= 15 for c in md)
    finally:
        shutil.rmtree(run, ignore_errors=True)
