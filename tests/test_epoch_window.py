"""The profiled window and epoch boundaries: the spec says when a traced step starts a new epoch,
and no rung of the shipped ladders does."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprof.spec import JobSpec, load_spec

REPO = Path(__file__).resolve().parents[1]


def test_ladder_rung_04_as_reported_crosses_at_step_16():
    # the case: 2048 FakeData images, batch 128, one rank -> 16 steps an epoch; traced 10-17
    spec = load_spec(REPO / "jobs" / "ladder" / "04-batch.toml", {"data.dataset_size": 2048})
    assert spec.data.steps_per_epoch(spec.world_size) == 16
    assert spec.traced_epoch_boundaries() == [(0, 10, 16)]
    (w,) = spec.warnings()
    assert "step(s) 16" in w and "data.dataset_size >= 3840" in w and "profiler.wait" in w


@pytest.mark.parametrize("folder", ["ladder", "ladder-cpu"])
def test_every_shipped_rung_profiles_inside_one_epoch(folder):
    files = sorted((REPO / "jobs" / folder).glob("*.toml"))
    if not files:
        pytest.skip(f"jobs/{folder} not there yet")
    for f in files:
        spec = load_spec(f)
        assert spec.traced_epoch_boundaries() == [], f.name
        assert spec.warnings() == [], f.name


def test_cycles_world_size_and_sources():
    spec = JobSpec()
    spec.data.source, spec.data.dataset_size, spec.data.batch_size = "fakedata", 64, 4
    spec.resources.tasks_per_node = 2  # 64 / (4 x 2) = 8 steps an epoch
    spec.profiler.wait, spec.profiler.warmup, spec.profiler.active, spec.profiler.repeat = 2, 1, 3, 3
    spec.train.steps = 18  # cycles trace 2-5, 8-11, 14-17: boundaries 8 and 16
    assert spec.traced_epoch_boundaries() == [(1, 8, 8), (2, 14, 16)]
    spec.train.steps = 16  # step 16 is never run
    assert spec.traced_epoch_boundaries() == [(1, 8, 8)]
    spec.data.source = "synthetic"  # no epochs
    assert spec.traced_epoch_boundaries() == [] and spec.warnings() == []


def test_submit_prints_the_warning_before_running(capsys):
    from hpcprof.launch.submit import build_parser
    from hpcprof.spec import spec_from_args

    args = build_parser().parse_args(["--job", str(REPO / "jobs" / "ladder" / "06-amp.toml"), "--data-dataset-size", "2048"])
    spec_from_args(args)
    err = capsys.readouterr().err
    assert "hpcprof: warning: the profiled window crosses an epoch boundary at step(s) 16" in err
