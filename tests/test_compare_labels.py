"""Issue 23 item 18: runs named in non-Latin scripts keep their names in a comparison. Folders 実験
and 試験 became the labels `_` and `_-2` (in the table, the charts, compare.html and the file names
of the per-run tables), so nobody could tell which run was which."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data"  # real traces carried by the repository


def _writable_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return dst


def test_non_latin_run_names_are_the_labels(tmp_path):
    w0, w4 = TRACES / "kineto_resnet50_v100_workers0", TRACES / "kineto_resnet50_v100_workers4"
    a, b = _writable_copy(w0, tmp_path / "実験"), _writable_copy(w4, tmp_path / "試験")
    out = tmp_path / "cmp"
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", str(a), str(b), "--out", str(out), "--quiet",
                        "--no-op-deltas"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    res = json.loads((out / "compare.json").read_text())
    assert [r["label"] for r in res["runs"]] == ["実験", "試験"]
    assert "実験" in p.stdout and "試験" in p.stdout
    assert "Glyph" not in p.stderr, p.stderr  # the charts' font has no CJK: "run 1", "run 2" on the axis
    from hpcprof.compare.outputs import _cells

    table = p.stdout.splitlines()[:3]  # header and the two runs: the columns after the name line up
    assert len({_cells(line.rsplit("  ", 1)[0]) for line in table}) == 1, table
    assert (out / "tables" / "steps_試験.csv").is_file()
    page = (out / "compare.html").read_text()
    assert "試験" in page


def test_labels_stay_file_names(tmp_path):
    from hpcprof.compare.inputs import _label

    taken: set[str] = set()
    assert [_label(Path(n), taken) for n in ("実験", "実験", "a/b c", "..", "x;rm -rf")] == \
        ["実験", "実験-2", "b_c", "run", "x_rm_-rf"]
