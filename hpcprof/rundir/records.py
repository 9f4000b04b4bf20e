"""What ranks write into a run directory, besides traces: the step records of steps/rank-<r>.jsonl,
the failure notes of failures/rank-<r>.json, and the names of the ``record_function`` regions every
step is cut into. The rank side writes them and the analysis reads them; both take the names from
here, so a key or a region is spelled in exactly one place (docs/contract.md is checked against this
module by tests/test_contract.py).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout import atomic_write_text, read_jsonl

# ------------------------------------------------------------------ record_function regions
REGION_DATA = "hpcprof.data"
"""Getting the batch from the loader or generator (and issuing its host-to-device copy)."""
REGION_FORWARD = "hpcprof.forward"
REGION_BACKWARD = "hpcprof.backward"
REGION_OPTIMIZER = "hpcprof.optimizer"
REGIONS = (REGION_DATA, REGION_FORWARD, REGION_BACKWARD, REGION_OPTIMIZER)
"""The regions of one step, in the order they run, each inside ProfilerStep#<step>."""


# ------------------------------------------------------------------ steps/rank-<r>.jsonl
@dataclass(slots=True)
class StepRecord:
    """One line of steps/rank-<r>.jsonl: host timings of one training step, every step (not only the
    profiled ones), so the analysis sees the whole run and not just the profiler's window."""

    step: int
    """Global step number; continues across a requeue (equals the ProfilerStep#<n> of the trace)."""
    epoch: int
    rank: int
    t_start: float
    """Unix seconds (time.time()) when the step began."""
    t_end: float
    step_s: float
    data_wait_s: float
    """Time to get the batch from the loader / generator."""
    host_pre_forward_s: float
    """Step start -> forward begins: data wait, H2D copy issue, and any drill sleep."""
    drill_sleep_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    batch_size: int
    """Samples per rank in this step."""
    profiled: bool
    """The step was an active profiler step."""
    gpu_ms: float | None = None
    """CUDA-event time of the step on the GPU; None on CPU (filled in when the events are read back)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in STEP_KEYS}


STEP_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StepRecord))
STEP_TIME_KEYS: tuple[str, ...] = tuple(k for k in STEP_KEYS if k.endswith("_s"))
"""The host timings of a step record, in seconds (the analysis reports them in ms)."""


class StepWriter:
    """Appends one JSON line per step to a steps file, flushed at once so that a crash keeps every
    finished step. Resuming after a requeue first drops the records of steps that will run again."""

    def __init__(self, path: Path, keep_until_step: int | None = None):
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_until_step is not None and path.exists():
            kept = [r for r in read_jsonl(path) if r.get("step", -1) < keep_until_step]
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
        self._fh = open(path, "a", buffering=1)

    def write(self, record: StepRecord) -> None:
        self._fh.write(json.dumps(record.to_dict()) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


# ------------------------------------------------------------------ failures/rank-<r>.json
@dataclass
class FailureNote:
    """Left by a rank that failed, so the launcher can name the first rank that failed, and why."""

    rank: int
    node: str
    pid: int
    step: int | None
    """The step the rank was in (None: before the step loop)."""
    time: float
    """Unix seconds; the earliest note that is not a peer failure is the root cause."""
    error: str
    peer_failure: bool
    """The error looks like a consequence of another rank's death (closed connection, timeout)."""
    traceback: str
    log: str | None
    """This rank's log file, when the launcher said where it is."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FAILURE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FailureNote))
