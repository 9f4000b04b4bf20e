"""A trace set read for a drill: per-rank Kineto traces by rank, their profiled steps, and the job's
time per step (the truth a drill reports, measured on the written files).

Shared by the drills (trace_drill.py: a stall or a stretch in one step; slow_gpu.py: a slow GPU);
the model of a step and of the job time is in trace_drill.py's docstring.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
STEP_PREFIX = "ProfilerStep#"


class DrillError(ValueError):
    """Bad input for a drill (the message names the file, rank or option)."""


@dataclass
class RankTrace:
    path: Path
    rank: int
    doc: dict
    _comm: set | None = None

    @property
    def events(self) -> list:
        return self.doc["traceEvents"]

    def comm_ids(self) -> set[int]:
        """id() of the rank's communication kernels, found as the analysis finds them
        (hpcprof.analysis.ranks.comm_kernels: NCCL names, the host collective that launched a
        kernel, known communication libraries), so that a drill on a job whose collectives are not
        NCCL-named (symmetric memory, DeepEP) matches the collectives the analysis matches."""
        if self._comm is None:
            from ..analysis.ranks.comm_kernels import classify, frame_from_events

            ev = self.events
            device = np.array([timed(e) and is_device(e) for e in ev], dtype=bool)
            found = classify(frame_from_events(ev), device).mask
            self._comm = {id(ev[i]) for i in np.flatnonzero(found)}
        return self._comm


def open_trace(path: Path, mode: str):
    if not path.name.endswith(".gz"):
        return open(path, mode)
    return gzip.open(path, mode + "t", **({"compresslevel": 6} if mode == "w" else {}))


def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))


def load_set(folder: Path) -> dict[int, RankTrace]:
    """Every trace in `folder`, by rank; errors name the file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DrillError(f"{folder}: not a folder of per-rank traces")
    out: dict[int, RankTrace] = {}
    for p in trace_files(folder):
        try:
            with open_trace(p, "r") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as e:
            raise DrillError(f"{p}: not a readable JSON trace ({e})") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise DrillError(f"{p}: no traceEvents list (not a Kineto trace)")
        rank = (doc.get("distributedInfo") or {}).get("rank")
        if not isinstance(rank, int):
            raise DrillError(f"{p}: distributedInfo.rank is missing; a drill needs the rank of every file")
        if rank in out:
            raise DrillError(f"{p}: rank {rank} also in {out[rank].path.name}")
        out[rank] = RankTrace(p, rank, doc)
    if len(out) < 2:
        raise DrillError(f"{folder}: {len(out)} rank trace(s); a drill needs at least two ranks")
    return out


def load_for_drill(src, out, rank: int) -> dict[int, RankTrace]:
    """The source set of a drill, by rank, once `out` is known to differ from `src` (the source is
    never written) and `rank` is known to be in it; errors name the folder or the rank."""
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise DrillError(f"{out}: the output folder must differ from the source (the source is never modified)")
    ranks = load_set(src)
    if rank not in ranks:
        raise DrillError(f"rank {rank} is not in {src} (ranks: {sorted(ranks)})")
    return ranks


def timed(e: dict) -> bool:
    return isinstance(e, dict) and e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))


def is_device(e: dict) -> bool:
    return str(e.get("cat", "")).lower() in DEVICE_CATS


def end_of(e: dict) -> float:
    return float(e["ts"]) + float(e.get("dur") or 0)


def profiler_steps(rt: RankTrace) -> list[tuple[int, float, float]]:
    """(step, start, end) of the rank's host-side ProfilerStep spans, in time order."""
    out = []
    for e in rt.events:
        name = str(e.get("name", "")) if isinstance(e, dict) else ""
        if name.startswith(STEP_PREFIX) and e.get("ph") == "X" and not str(e.get("cat", "")).startswith("gpu") and timed(e):
            try:
                out.append((int(name[len(STEP_PREFIX):]), float(e["ts"]), end_of(e)))
            except ValueError:
                continue
    return sorted(out, key=lambda t: t[1])


def device_step(rt: RankTrace) -> dict[int, int]:
    """id(device op) -> the profiled step that launched it: by the launch's correlation id when the
    launch is in the trace, else by the op's start between two step starts."""
    steps = profiler_steps(rt)
    if not steps:
        return {}
    launch = {}
    for e in rt.events:
        if timed(e) and not is_device(e):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launch[c] = float(e["ts"])
    starts = np.array([s for _, s, _ in steps])
    out = {}
    for e in rt.events:
        if not (timed(e) and is_device(e)):
            continue
        t = launch.get((e.get("args") or {}).get("correlation"))
        by_launch = t is not None
        t = float(e["ts"]) if t is None else t
        i = int(np.searchsorted(starts, t, side="right")) - 1
        if i < 0 or (by_launch and t > steps[i][2]) or (i == len(steps) - 1 and t > steps[i][2]):
            continue
        out[id(e)] = steps[i][0]
    return out


def step_spans(rt: RankTrace) -> dict[int, tuple[float, float]]:
    """step -> (start, end) on this rank; end includes the GPU work launched in the step."""
    spans = {n: [s, e] for n, s, e in profiler_steps(rt)}
    ids = device_step(rt)
    for e in rt.events:
        n = ids.get(id(e)) if timed(e) else None
        if n is not None:
            spans[n][1] = max(spans[n][1], end_of(e))
    return {n: (s, e) for n, (s, e) in spans.items()}


def job_times(traces) -> dict:
    """The job's time per profiled step and over the profiled window (ms), from a folder or from
    loaded traces (see the module docstring). Without step markers: the whole trace span."""
    ranks = load_set(traces) if not isinstance(traces, dict) else traces
    per_rank = {r: step_spans(rt) for r, rt in ranks.items()}
    if not all(per_rank.values()):
        spans = {}
        for r, rt in ranks.items():
            t = [e for e in rt.events if timed(e)]
            spans[r] = {0: (min(float(e["ts"]) for e in t), max(end_of(e) for e in t))}
        per_rank = spans
    common = sorted(set.intersection(*(set(s) for s in per_rank.values())))
    if not common:
        raise DrillError("the ranks share no profiled step (ProfilerStep#N) to measure the job time on")
    steps = {}
    for n in common:
        steps[n] = (max(s[n][1] for s in per_rank.values()) - min(s[n][0] for s in per_rank.values())) / 1e3
    window = (max(s[common[-1]][1] for s in per_rank.values()) - min(s[common[0]][0] for s in per_rank.values())) / 1e3
    return {"steps_ms": steps, "window_ms": window}
