"""analysis/post_job.ipynb runs top to bottom on a fresh run's analysis (nbclient, python3 kernel)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from hpcprof.analysis import analyze

NOTEBOOK = Path(__file__).resolve().parents[2] / "analysis" / "post_job.ipynb"


def test_post_job_notebook_executes(cpu_run, tmp_path, monkeypatch):
    out = tmp_path / "analysis"
    analyze(cpu_run, out=out, workers=2, progress=False)
    monkeypatch.setenv("HPCPROF_RUN_DIR", str(cpu_run))
    monkeypatch.setenv("HPCPROF_ANALYSIS_DIR", str(out))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "world size 4" in text
    assert "rank" in text and "arrived last at" in text
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
