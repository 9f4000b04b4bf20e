"""Run directories built by hand for the comparison's tests: a manifest.json with chosen launch
times, replicate sets and spec, and an analysis folder (summary.json, tables/steps_trace.csv) whose
profiled steps take chosen times. `compare` reads them as it reads analysed runs; nothing is
launched, so the level of every run (and the time it ran) is known to the test.
Imported as a plain module (`from handmade_runs import ...`), like helpers.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd

SPEC = {"name": "x", "data": {"batch_size": 32}, "train_steps": 40}
"""A spec as a manifest records it: runs of one spec share its hash (hpcprof.rundir.manifest.spec_hash)."""
T0 = datetime(2026, 3, 2, 10, 0, 0, tzinfo=timezone.utc)


def iso(minutes: float) -> str:
    """T0 plus `minutes`, in the manifest's time format."""
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S%z")


def make_run(root: Path, name: str, step_ms: float, start_min: float, *, group: str | None = None, index: int = 1,
             count: int = 1, spec: dict | None = None, state: str = "completed", steps: int = 20, seed: int = 0) -> Path:
    """runs/<name> started `start_min` minutes after T0 and ran 4 minutes; its analysis folder (the
    path to pass to compare) holds `steps` profiled steps around `step_ms` (SD 0.5%, median exactly
    `step_ms`). `group`: one of `count` replicates of a set (manifest `replicate`, index `index`)."""
    from hpcprof.rundir.manifest import spec_hash

    spec = dict(SPEC if spec is None else spec)
    run = root / name
    (run / "analysis" / "tables").mkdir(parents=True)
    manifest = {"name": name, "created": iso(start_min), "executor": "local", "spec": spec, "world_size": 1,
                "attempts": [{"started": iso(start_min), "resumed_from_step": None, "job_id": None}],
                "outcome": {"state": state, "time": iso(start_min + 4)}}
    if group is not None:
        manifest["replicate"] = {"group": group, "index": index, "count": count, "spec_sha256": spec_hash(spec)}
    (run / "manifest.json").write_text(json.dumps(manifest))
    rng = np.random.default_rng(seed)
    dev = rng.normal(0.0, 0.005, steps)
    dev -= np.median(dev)
    dur = step_ms * np.exp(dev)
    pd.DataFrame({"step": np.arange(steps), "rank": 0, "dur_ms": dur, "data_loading_ms": 0.1 * dur}).to_csv(
        run / "analysis" / "tables" / "steps_trace.csv", index=False)
    summary = {"source": str(run), "device": "cpu", "ranks_analyzed": [0], "run_state": {"state": state}}
    (run / "analysis" / "summary.json").write_text(json.dumps(summary))
    return run / "analysis"


def make_set(root: Path, group: str, levels_ms: list[float], starts_min: list[float], **kw) -> list[Path]:
    """`submit --repeat N --name <group>` by hand: runs <group>-r1.. at the given step times and starts."""
    n = len(levels_ms)
    return [make_run(root, f"{group}-r{k}", ms, t, group=group, index=k, count=n, seed=k, **kw)
            for k, (ms, t) in enumerate(zip(levels_ms, starts_min), 1)]
