"""What ranks write into a run directory, besides traces: the step records of steps/rank-<r>.jsonl,
the failure notes of failures/rank-<r>.json, and the names of the ``record_function`` regions every
step is cut into. The rank side writes them and the analysis reads them; both take the names from
here, so a key or a region is spelled in exactly one place (docs/contract.md is checked against this
module by tests/test_contract.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout import atomic_write_text, read_jsonl

# ------------------------------------------------------------------ record_function regions
REGION_PREFIX = "hpcprof."
"""Every region of a step is a ``record_function`` range named ``hpcprof.<name>``."""
KNOWN_REGIONS = ("data", "copy", "forward", "backward", "optimizer")
"""The regions the analysis knows, in the order a training step runs them: ``data`` (getting the
batch from the loader, on the host: the input pipeline alone), ``copy`` (issuing the host-to-device
copy and on-device preprocessing: on a GPU with pageable memory this waits for the GPU, which is why
it is not part of ``data``), ``forward``, ``backward``, ``optimizer``. Any other name a user gives
(``run.region("attention")``) is a user region: traced as ``hpcprof.<name>``, timed in the step
record's ``regions``, reported by name."""
REGION_NAME_RE = r"[A-Za-z][A-Za-z0-9_-]{0,63}"
"""What a region name may be (it becomes part of a trace event name and a table column)."""


def region_label(name: str) -> str:
    """The trace name of region `name` (``hpcprof.<name>``)."""
    return REGION_PREFIX + name


REGION_DATA = region_label("data")
"""Getting the batch from the loader or generator (the input pipeline; the copy is REGION_COPY)."""
REGION_COPY = region_label("copy")
REGION_FORWARD = region_label("forward")
REGION_BACKWARD = region_label("backward")
REGION_OPTIMIZER = region_label("optimizer")
REGIONS = tuple(region_label(n) for n in KNOWN_REGIONS)
"""The known regions of one step, in the order they run, each inside ProfilerStep#<step>."""

CONTROL_REGION = "hpcprof:control"
"""The ``record_function`` range around every collective hpcprof itself issues (control rounds,
agreements, set-up exchanges, barriers), all on its own gloo groups. The colon keeps it apart from
the step regions (a region name cannot hold one). Where the rank could list the worker threads of
those groups, the range's name carries their thread ids: ``hpcprof:control threads=<tid>,<tid>``
(:func:`control_label`), which is how the analysis tells the ``gloo:<op>`` events those threads run
from the job's own collectives (a gloo event names neither its group nor the call that issued it)."""
CONTROL_LABEL_RE = r"^hpcprof:control(?: threads=(\d+(?:,\d+)*))?$"


def control_label(thread_ids) -> str:
    """The trace name of hpcprof's control collectives, with the ids of its groups' worker threads."""
    ids = sorted({int(t) for t in thread_ids})
    return CONTROL_REGION + (f" threads={','.join(map(str, ids))}" if ids else "")


# ------------------------------------------------------------------ steps/rank-<r>.jsonl
@dataclass(slots=True)
class StepRecord:
    """One line of steps/rank-<r>.jsonl: the timings of one training step, every step (not only the
    profiled ones), so the analysis sees the whole run and not just the profiler's window.

    Host times (``*_s``) are measured with the host clock; on a GPU they are launch times (the host
    runs ahead of the device), and the step's own time is ``gpu_ms``."""

    step: int
    """Global step number; continues across a requeue (equals the ProfilerStep#<n> of the trace)."""
    epoch: int
    rank: int
    t_start: float
    """Unix seconds (time.time()) when the step began."""
    t_end: float
    step_s: float
    """Host time of the step (on a GPU: the time the host took to issue it)."""
    data_wait_s: float | None
    """Time in the ``data`` region: getting the batch from the loader (the input pipeline alone)."""
    host_pre_forward_s: float | None
    """Step start -> forward begins: data wait, copy issue, and any drill sleep (null without a
    forward region)."""
    drill_sleep_s: float
    """Host time the straggler drill added to this step (its sleep, and on a GPU the wait for the
    device that makes the sleep visible there); 0 when it did not act."""
    forward_s: float | None
    backward_s: float | None
    optimizer_s: float | None
    batch_size: int | None
    """Samples per rank in this step (null when the training loop did not say)."""
    profiled: bool
    """The step was an active profiler step."""
    gpu_ms: float | None = None
    """The step's time on the GPU's clock: from its boundary event to the next step's (CUDA events,
    read back without synchronising), the GPU's own period for the step, idle time included. Null
    on CPU, and for steps whose events had not completed when a rank failed."""
    copy_s: float | None = None
    """Time in the ``copy`` region: issuing the host-to-device copy (and on-device preprocessing)."""
    regions: dict = dataclasses.field(default_factory=dict)
    """Host seconds in each user-named region of the step ({name: s}; the known regions have their
    own fields). Every region time is exclusive: time inside a nested region counts for the
    innermost one only, so a step's region times add up to at most ``step_s``."""
    trace_export_s: float = 0.0
    """Host time the profiler spent right after this step writing a trace (the end of a profiling
    window); 0 in every other step. This step and the next are not steady state."""
    blocked_s: float = 0.0
    """Host time the rank's main thread was blocked (wall minus its CPU time) inside the step's regions
    other than data and copy (exclusive, as the region times): mostly waiting for the other ranks in
    collectives. step_s - blocked_s is the rank's own time in the step (what the triggered profiler
    compares across ranks)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in STEP_KEYS}


STEP_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StepRecord))
STEP_TIME_KEYS: tuple[str, ...] = tuple(k for k in STEP_KEYS if k.endswith("_s") and k != "trace_export_s")
"""The host timings of a step record, in seconds (the analysis reports them in ms)."""


MAX_STEP = 10**9
"""Step numbers at or above this are refused when the planned step count is unknown (10^9 steps of
1 ms are 11 days: a larger number is a corrupt record, not a run)."""
MAX_STEP_S = 86_400.0
"""The longest time a step record may give (a step, a region of it, its GPU time): one day. A step
longer than that is a corrupt record, not a training step; one step_s of 1e300 made the job's
throughput interval 0.0-650 samples/s, unflagged (issue 37, item 5)."""


def step_record_problem(rec: dict[str, Any], file_rank: int, max_step: int | None = None) -> str | None:
    """Why the step record `rec` of steps/rank-<file_rank>.jsonl cannot enter the figures (the field,
    and what is wrong with it), or None when it can. `max_step`: the planned step count (steps run
    0..max_step-1), else MAX_STEP.

    Why: records with step_s NaN, inf or negative, batch_size 0, step 10^18 or another rank's
    number were used as they were: an interval with a lower bound of 0.0 samples/s, a run
    "completed" by one absurd step number, a copied file counted as a rank (issue 23, item 11).
    A time beyond MAX_STEP_S (step_s, the other host timings, a region's, gpu_ms) is refused too
    (issue 37, item 5)."""
    rank = rec.get("rank")
    if rank is not None and (not _is_int(rank) or rank != file_rank):
        return f"rank ({rank!r}: the file is rank {file_rank}'s)"
    step = rec.get("step")
    limit = max_step if isinstance(max_step, int) and max_step > 0 else MAX_STEP
    if not _is_int(step) or not 0 <= step < limit:
        return f"step ({step!r}: outside 0..{limit - 1})"
    if not _is_number(rec.get("step_s")) or not 0 < rec["step_s"] <= MAX_STEP_S:
        return f"step_s ({rec.get('step_s')!r}: not a number of seconds > 0 and <= {MAX_STEP_S:.0f})"
    for key in STEP_TIME_KEYS:
        value = rec.get(key)
        if key != "step_s" and value is not None and not (_is_number(value) and 0 <= value <= MAX_STEP_S):
            return f"{key} ({value!r}: not a number of seconds >= 0 and <= {MAX_STEP_S:.0f})"
    gpu = rec.get("gpu_ms")
    if gpu is not None and not (_is_number(gpu) and 0 <= gpu <= MAX_STEP_S * 1e3):
        return f"gpu_ms ({gpu!r}: not a number of ms >= 0 and <= {MAX_STEP_S * 1e3:.0f})"
    regions = rec.get("regions")
    if regions is not None and not (isinstance(regions, dict) and all(
            isinstance(k, str) and (v is None or _is_number(v) and 0 <= v <= MAX_STEP_S) for k, v in regions.items())):
        return f"regions ({str(regions)[:80]}: not names with a number of seconds >= 0 and <= {MAX_STEP_S:.0f} each)"
    batch = rec.get("batch_size")
    if batch is not None and not (_is_int(batch) and batch >= 1):
        return f"batch_size ({batch!r}: not an integer >= 1)"
    return None


def usable_step_records(records: list[dict[str, Any]], file_rank: int, max_step: int | None = None,
                        where: str | None = None, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The records of one steps file that can enter the figures (:func:`step_record_problem`; of a
    step recorded twice, the last record), the others named in `problems`, one line per file:
    "<where>: N record(s) excluded from the figures: <field> (<value>: why) at step(s) ...". """
    good: dict[int, dict[str, Any]] = {}
    bad: dict[str, list[Any]] = {}
    twice: list[int] = []
    for rec in records:
        why = step_record_problem(rec, file_rank, max_step)
        if why is not None:
            bad.setdefault(why.split(" (")[0], []).append((rec.get("step"), why))
            continue
        if rec["step"] in good:
            twice.append(rec["step"])
        good[rec["step"]] = rec
    if problems is not None and (bad or twice):
        where = where or f"steps/rank-{file_rank}.jsonl"
        parts = []
        for field, items in bad.items():
            steps = ", ".join(str(s) for s, _ in items[:5]) + (", ..." if len(items) > 5 else "")
            parts.append(f"{len(items)} with {items[0][1]} at step(s) {steps}")
        if twice:
            parts.append(f"{len(twice)} step(s) recorded twice ({', '.join(map(str, twice[:5]))}): the last record kept")
        n = sum(len(v) for v in bad.values())
        problems.append(f"{where} (rank {file_rank}): {n} record(s) excluded from the step-time and throughput "
                        f"figures: " + "; ".join(parts))
    return [good[s] for s in sorted(good)]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
    kind: str = "error"
    """What kind of failure (hpcprof.rank.failures.classify): error (the training code's own),
    oom, nccl (this rank's NCCL or network operation failed), drill (--inject-crash) are root
    causes; peer_closed, peer_timeout, nccl_remote, peer_stopped are consequences of another rank's
    failure (peer_failure true)."""
    memory_snapshot: str | None = None
    """kind oom on a GPU rank recording the allocator's history (profiler.memory_snapshot): the CUDA
    memory snapshot written at the failure, relative to the run directory
    (memory/rank-<r>.oom.pickle), which `analyze` reads to say what held the memory."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FAILURE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FailureNote))

STOPPED_AFTER_TIMEOUT = "timed out waiting for a peer"
"""Words of the note of a rank hpcprof's peer watch stopped because another rank timed out waiting
for a peer (hpcprof.rank.failures.PeerWatch), while this rank had not failed itself."""


def unanswered(notes: list[dict]) -> dict | None:
    """Who did not answer, when the job ended on a collective's timeout and no rank has a
    root-cause note: {"rank", "step", "error", "node", "log", "waiting": [ranks that timed out]},
    or None when no note is a timeout (kind peer_timeout). `notes`: failure notes, earliest first.

    A rank that timed out waited for another; it is never the one named. The one named is the rank
    the peer watch stopped after the timeout (it had not failed, nor timed out itself) when there is
    exactly one; otherwise the rank is not known (None) and the error says so."""
    if any(not n.get("peer_failure") for n in notes):
        return None
    waits = [n for n in notes if n.get("kind") == "peer_timeout"]
    if not waits:
        return None
    waiting = sorted({n.get("rank") for n in waits if isinstance(n.get("rank"), int)})
    first = waits[0]
    said = str(first.get("error"))
    said = said if len(said) <= 160 else said[:157] + "..."
    who = f"rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))}"
    at = f" at step {first.get('step')}" if first.get("step") is not None else ""
    stopped = [n for n in notes if n.get("kind") == "peer_stopped" and STOPPED_AFTER_TIMEOUT in str(n.get("error"))
               and n.get("rank") not in waiting]
    if len({n.get("rank") for n in stopped}) == 1:
        n = stopped[0]
        return {"rank": n.get("rank"), "step": n.get("step"), "node": n.get("node"), "log": n.get("log"),
                "waiting": waiting,
                "error": f"did not answer: {who} timed out waiting for it in a collective{at} ({said}); it had not "
                         "failed itself and was stopped by hpcprof"}
    return {"rank": None, "step": first.get("step"), "node": None, "log": None, "waiting": waiting,
            "error": f"the job timed out: {who} waited in a collective{at} for a rank that did not answer ({said}); "
                     "which rank did not answer is not known"}
