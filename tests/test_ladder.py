"""python -m hpcprof.ladder: rungs one after another, each analysed, one comparison; a bad rung is
reported and the rest go on; the CPU ladder's measured directions hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.launch.ladder import find_rungs

pytestmark = pytest.mark.alone  # the rungs' throughputs are compared with each other (tests/conftest.py)

REPO = Path(__file__).resolve().parents[1]

TINY = """[resources]
cluster = "local"
tasks_per_node = 1
[model]
arch = "{arch}"
num_classes = 10
image_size = 32
[data]
source = "synthetic"
batch_size = 4
[train]
steps = 5
[profiler]
wait = 1
warmup = 1
active = 2
"""


def test_rungs_are_found_in_order_and_through_stops(tmp_path):
    for name in ("10-ten.toml", "02-two.toml", "01-one.toml", "notes.toml", "README.md"):
        (tmp_path / name).write_text("")
    assert [r.name for r in find_rungs(tmp_path)] == ["01-one", "02-two", "10-ten"]
    assert [r.name for r in find_rungs(tmp_path, through=2)] == ["01-one", "02-two"]
    with pytest.raises(ValueError, match="no rung numbered 0"):
        find_rungs(tmp_path, through=0)
    with pytest.raises(ValueError, match="not a folder of rung files"):
        find_rungs(tmp_path / "notes.toml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no rung files"):
        find_rungs(tmp_path / "empty")


def test_a_bad_rung_is_reported_and_the_next_one_runs(tmp_path):
    rungs = tmp_path / "rungs"
    rungs.mkdir()
    (rungs / "01-bad.toml").write_text(TINY.format(arch="resnet7"))
    (rungs / "02-good.toml").write_text(TINY.format(arch="resnet18"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--cluster", "local"],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "rung 01-bad: not launched: model.arch = 'resnet7' is not valid" in p.stdout
    assert "1/2 rung(s) ok" in p.stdout
    rec = json.loads((out / "ladder.json").read_text())
    assert [r["status"] for r in rec["rungs"]] == ["not launched", "ok"]
    assert [[x["name"] for x in r["runs"]] for r in rec["rungs"]] == [[], ["02-good"]]
    assert (out / "02-good" / "analysis" / "summary.json").is_file()


def _bad_rungs(tmp_path) -> Path:
    rungs = tmp_path / "rungs"
    rungs.mkdir()
    for name in ("01-a.toml", "02-b.toml"):
        (rungs / name).write_text(TINY.format(arch="resnet7"))
    return rungs


def test_a_second_ladder_into_the_same_out_is_refused(tmp_path):
    """Issue 23 item 5: a second ladder into one --out rewrote ladder.json with every rung "not
    launched" while the first one's runs and compare/ stayed. Now it is refused, nothing changed."""
    rungs = tmp_path / "rungs"
    rungs.mkdir()
    (rungs / "01-a.toml").write_text(TINY.format(arch="resnet18"))
    out = tmp_path / "out"
    (out / "01-a").mkdir(parents=True)
    (out / "01-a" / "manifest.json").write_text("{}")
    before = json.dumps({"rungs": [{"name": "01-a", "status": "ok"}]})
    (out / "ladder.json").write_text(before)
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--cluster", "local"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == f"hpcprof.ladder: error: {out} already holds a ladder (ladder.json); choose another --out (nothing was changed)"
    assert (out / "ladder.json").read_text() == before and sorted(x.name for x in out.iterdir()) == ["01-a", "ladder.json"]
    (out / "ladder.json").unlink()  # a rung's run directory alone is refused as well
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--cluster", "local"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and f"{out} already holds 01-a; choose another --out" in p.stderr, p.stderr


def test_an_option_no_rung_accepts_fails_once_before_anything_runs(tmp_path):
    """Issue 23 item 15: --train-steps -5 failed on every rung, one after another."""
    rungs = tmp_path / "rungs"
    rungs.mkdir()
    for name in ("01-a.toml", "02-b.toml"):
        (rungs / name).write_text(TINY.format(arch="resnet18"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--train-steps", "-5"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == ("hpcprof.ladder: error: --train-steps -5: train.steps must be >= 1, got -5 "
                                "(for every rung; nothing was launched)")
    assert not out.exists() and p.stdout == ""
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--repeat", "0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "--repeat" in p.stderr and "at least 1" in p.stderr


def test_an_unwritable_out_is_one_line_and_leaves_no_partial_ladder_json(tmp_path):
    """Issue 23 item 14: a full disk gave a traceback and a cut ladder.json. A file-size limit
    (RLIMIT_FSIZE, 200 bytes) fails writes as a full disk does; an --out under a file cannot be made."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    rungs = _bad_rungs(tmp_path)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--cluster", "local"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert f"hpcprof.ladder: error: cannot write {out / 'ladder.json'} (File too large)" in p.stderr
    assert list(out.iterdir()) == []  # no ladder.json, no temporary file
    (tmp_path / "a-file").write_text("x")
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(tmp_path / "a-file" / "out")],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "cannot create --out" in p.stderr, p.stderr


def test_a_rung_with_runs_under_way_has_a_status():
    """A SLURM ladder with --repeat records each rung as soon as its first run is submitted (its
    other runs pending): Rung.settle raised StopIteration on ["submitted", "pending", ...], which
    stopped `ladder --cluster slurm --repeat 3` at its first submission with a traceback."""
    from hpcprof.launch.ladder import Rung, RungRun

    def status(*states):
        rung = Rung(1, Path("01-a.toml"), "01-a", runs=[RungRun(f"01-a-r{k}", k, s) for k, s in enumerate(states, 1)])
        rung.settle()
        return rung.status

    assert status("submitted", "pending", "pending") == "submitted"
    assert status("failed", "submitted", "pending") == "failed"
    assert status("ok", "submitted", "pending") == "1 of 3 runs ok"
    assert status("interrupted", "not launched") == "interrupted"


def _read_only_view(folder: Path, cmd: list[str]) -> subprocess.CompletedProcess:
    """`cmd` run where `folder` is on a read-only file system (EROFS, which root cannot write
    through as it can through chmod 555): a private mount namespace holding a read-only bind mount of
    it, gone with the command. Skips where mounts are not permitted."""
    import shlex
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("unshare not found")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {shlex.quote(str(folder))} {shlex.quote(str(folder))}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private read-only mount here: {probe.stderr.strip()}")
    f = shlex.quote(str(folder))
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {f} {f} && mount -o remount,ro,bind {f} && exec \"$@\"",
                           "sh", *cmd], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_read_only_out_is_one_line_and_writes_nothing(tmp_path):
    """Issue 23 item 14, the read-only half: `ladder --out` on a read-only file system ended in an
    OSError traceback (both when --out had to be made and when it existed)."""
    rungs = _bad_rungs(tmp_path)
    ro = tmp_path / "ro"
    (ro / "existing").mkdir(parents=True)
    for out, needle in ((ro / "new", "cannot create --out"), (ro / "existing", "cannot write")):
        p = _read_only_view(ro, [sys.executable, "-m", "hpcprof.ladder", str(rungs), "--out", str(out), "--cluster", "local"])
        assert p.returncode == 2, p.stdout + p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert needle in p.stderr and str(out) in p.stderr and "Read-only file system" in p.stderr, p.stderr
    assert sorted(str(x.relative_to(ro)) for x in ro.rglob("*")) == ["existing"]


@pytest.fixture(scope="module")
def cpu_ladder(tmp_path_factory):
    """One run of the README's CPU ladder with 3 interleaved replicates per rung, shared by the tests
    below: 4 rungs x 3 runs of 16 steps (about 1.5 min on the quiet 2-core VM)."""
    out = tmp_path_factory.mktemp("ladder") / "ladder"
    p = subprocess.run([sys.executable, "-m", "hpcprof.ladder", "jobs/ladder-cpu", "--repeat", "3", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p, out


def test_cpu_ladder_throughput_rises_where_it_should(cpu_ladder):
    """Directions measured on this 2-core machine (benchmarks/README.md, "CPU ladder"): a worker
    removes the data wait (about 31% of the step -> 2%) and raises samples/s; the 4x batch makes
    each step longer and the job faster than the baseline. channels_last is run and compared, not
    asserted (its effect on a CPU depends on the kernels; one of its replicates ran at half the
    speed of the other two in one ladder). Each rung's figures are over its 3 replicates."""
    p, out = cpu_ladder
    assert "samples/s" in p.stdout
    res = json.loads((out / "compare" / "compare.json").read_text())
    arms = {a["label"]: a for a in res["arms"]}
    assert list(arms) == ["01-baseline", "02-workers", "03-batch", "04-channels-last"]
    sps = {k: a["samples_per_s"] for k, a in arms.items()}
    print({k: round(v, 1) for k, v in sps.items()})
    assert sps["02-workers"] > sps["01-baseline"]
    assert sps["03-batch"] > sps["01-baseline"]
    assert arms["03-batch"]["step_ms"] > arms["02-workers"]["step_ms"]  # slower steps, faster job
    deltas = {(d["arm"], d["metric"]): d for d in res["deltas"]}
    assert deltas[("02-workers", "data_wait_pct")]["verdict"] == "lower"
    assert deltas[("02-workers", "data_wait_pct")]["basis"] == "replicates"
    assert arms["01-baseline"]["data_wait_pct"] > 10 > arms["02-workers"]["data_wait_pct"]
    for r in res["runs"]:  # steady-state steps only, every exclusion counted
        steps = r["throughput"]["job"]["steps"]
        assert steps["epoch_boundary"] == 0 and steps["warmup"] == 1 and steps["profiled"] == 2
    for f in ("compare.html", "noise.json", "plots/throughput.png", "plots/step_breakdown.png", "tables/arms.csv", "tables/runs.csv"):
        assert (out / "compare" / f).is_file()


def test_cpu_ladder_runs_replicates_interleaved_and_its_table_carries_their_interval(cpu_ladder):
    """--repeat 3: the runs are <rung>-r1..r3, launched A B C D A B C D A B C D (their first steps
    start in that order), recorded as replicates and grouped into one arm per rung; each arm's
    interval comes from its replicates, and every run is a point in compare.json and the console."""
    p, out = cpu_ladder
    rec = json.loads((out / "ladder.json").read_text())
    assert rec["repeat"] == 3 and all(r["status"] == "ok" for r in rec["rungs"])
    names = [r["name"] for r in rec["rungs"]]
    order = [f"{n}-r{k}" for k in (1, 2, 3) for n in names]
    first_step = {}
    for name in order:
        man = json.loads((out / name / "manifest.json").read_text())
        assert man["replicate"]["group"] == name.rsplit("-r", 1)[0] and man["replicate"]["count"] == 3
        first_step[name] = json.loads((out / name / "steps" / "rank-0.jsonl").read_text().splitlines()[0])["t_start"]
    assert sorted(order, key=first_step.get) == order
    res = json.loads((out / "compare" / "compare.json").read_text())
    for a in res["arms"]:
        assert a["runs"] == [f"{a['label']}-r{k}" for k in (1, 2, 3)] and a["runs_used"] == 3
        lo, hi = a["samples_per_s_ci95"]
        assert a["samples_per_s_ci_basis"] == "replicates" and lo < a["samples_per_s"] < hi
        assert len(a["samples_per_s_runs"]) == 3 and min(a["samples_per_s_runs"]) > 0
        runs_line = f"  {a['label']}: {a['samples_per_s']:.1f} samples/s (95% CI [{lo:.1f}, {hi:.1f}], replicates); runs: "
        assert runs_line + ", ".join(f"{x:.1f}" for x in a["samples_per_s_runs"]) in p.stdout
    for d in res["deltas"]:
        if d["metric"] == "samples_per_s":
            assert d["basis"] == "replicates" and d["runs"] == [3, 3] and d["detectable_pct"] > 0
            assert f"3 runs per arm can see {d['detectable_pct']:.1f}%" in p.stdout
    assert "step breakdown, ms per step" in p.stdout and "data wait" in p.stdout
    noise = json.loads((out / "compare" / "noise.json").read_text())
    assert noise["metrics"]["samples_per_s"]["df"] == 8 and noise["metrics"]["samples_per_s"]["sd"] > 0
    page = (out / "compare" / "compare.html").read_text()
    assert all(f"{n}-r{k}" in page for n in names for k in (1, 2, 3)) and "data:image/png;base64" in page


def test_raw_image_size_augments_large_fakedata_images_down_to_the_model_size():
    import torch

    from hpcprof.rank.data import BatchSource
    from hpcprof.spec import Data, JobSpec, Model, SpecError

    src = BatchSource(Data(source="fakedata", batch_size=2, dataset_size=8, raw_image_size=96), Model(image_size=32, num_classes=10),
                      torch.device("cpu"), 0, 1, seed=0)
    x, y = next(src)
    assert tuple(x.shape) == (2, 3, 32, 32) and tuple(y.shape) == (2,)
    spec = JobSpec()
    spec.data.raw_image_size = 96  # the default source is synthetic: nothing to augment
    with pytest.raises(SpecError, match="data.raw_image_size applies to data.source = 'fakedata' only"):
        spec.validate()
