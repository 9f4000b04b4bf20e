"""The typed manifest (hpcprof.rundir.manifest): older runs' manifests still read, nothing in them is
lost when rank 0 writes an attempt, and each attempt is recorded explicitly."""

from __future__ import annotations

import json

import pytest

from hpcprof.rundir import RunDir, RunDirError
from hpcprof.rundir import manifest as M
from hpcprof.spec import load_spec

# A manifest as an early hpcprof wrote it: no launcher/nodes/cpu_threads/node_cpus/attempts.job_id,
# and a field this version does not know.
OLD = {
    "name": "old-run", "created": "2026-11-01T10:00:00+0000", "executor": "local", "job_id": "123",
    "command_line": ["python", "-m", "hpcprof.submit"], "spec": {"model": {"arch": "resnet18"}}, "world_size": 2,
    "backend": "gloo", "device": "cpu", "versions": {"python": "3.11", "torch": "2.4"},
    "drills": {"straggler": {"rank": 1, "ms": 80.0}, "crash": None},
    "ranks": [{"rank": r, "local_rank": r, "node": "n1", "device": "cpu", "device_name": "x86", "pid": 10 + r,
               "slurm": {}, "clock": {"wall_ns": 5, "monotonic_ns": 6, "after_barrier": True}} for r in (0, 1)],
    "attempts": [{"started": "2026-11-01T10:00:01+0000", "resumed_from_step": None}],
    "site_note": {"kept": True},
}


def write_raw(run: RunDir, data: dict) -> None:
    run.root.mkdir(parents=True, exist_ok=True)
    run.manifest_path.write_text(json.dumps(data))


def test_old_manifest_reads_typed_and_missing_fields_are_null(tmp_path):
    run = RunDir(tmp_path / "old-run")
    write_raw(run, OLD)
    m = M.load(run)
    assert m.drills.straggler == M.StragglerDrill(rank=1, ms=80.0) and m.drills.crash is None
    assert [e.pid for e in m.ranks] == [10, 11] and m.ranks[0].clock.wall_ns == 5
    assert m.ranks[0].cpu_threads is None and m.ranks[0].launcher is None
    assert m.attempts[0].job_id is None and m.launcher is None
    assert m.to_dict()["site_note"] == {"kept": True}


def test_an_attempt_on_an_old_run_keeps_everything_and_appends(tmp_path):
    run = RunDir(tmp_path / "old-run")
    write_raw(run, OLD)
    spec = load_spec(overrides={"model.arch": "resnet18"})
    entry = M.RankEntry(rank=0, local_rank=0, node="n2", device="cpu", device_name="x86", pid=99, launcher="srun",
                        slurm={"SLURM_JOB_ID": "124"}, clock=M.Clock(1, 2), cpu_threads=4, node_cpus=8)
    M.record_attempt(run, spec, world_size=1, launcher="srun", job_id="124", backend="gloo", device="cpu",
                     versions=M.Versions(torch="2.5"), ranks=[entry], resumed_from_step=7)
    after = run.read_manifest()
    assert after["site_note"] == {"kept": True} and after["job_id"] == "123"  # launch fields untouched
    assert after["executor"] == "local" and after["launcher"] == "srun" and after["nodes"] == ["n2"]
    # the old attempt gains its missing job_id, process_group, steps_source and steps_done as null (unknown),
    # the new one is appended
    unknown = {"process_group": None, "steps_source": None, "steps_done": None}
    assert after["attempts"] == [{**OLD["attempts"][0], "job_id": None, **unknown},
                                 {"started": after["attempts"][1]["started"], "resumed_from_step": 7, "job_id": "124",
                                  **unknown}]
    assert after["ranks"][0]["node_cpus"] == 8 and after["versions"]["torch"] == "2.5"


def test_attempt_without_any_manifest_writes_the_launch_fields_too(tmp_path):
    run = RunDir(tmp_path / "by-hand")
    run.root.mkdir()
    spec = load_spec(overrides={"drills.crash": "0:3", "train.steps": 5})
    M.record_attempt(run, spec, world_size=1, launcher="torchrun", job_id=None, backend="gloo", device="cpu",
                     versions=M.Versions(), ranks=[], resumed_from_step=None)
    m = run.read_manifest()
    assert m["name"] == "by-hand" and m["executor"] == "torchrun" and m["world_size"] == 1
    assert m["drills"]["crash"] == {"rank": 0, "step": 3} and m["drills"]["straggler"] is None
    assert m["spec"]["drills"]["crash"] == "0:3" and len(m["attempts"]) == 1


def test_a_manifest_that_is_not_an_object_is_named(tmp_path):
    run = RunDir(tmp_path / "bad")
    write_raw(run, {**OLD, "ranks": {"0": "x"}})
    with pytest.raises(RunDirError, match=r"manifest.json: manifest.ranks should be a list"):
        M.load(run)
