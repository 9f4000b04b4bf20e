"""Inject a known delay into a real multi-rank Kineto trace set; the job-time increase is the truth.

Why: a straggler verdict ("rank r costs the job X ms per step") can only be trusted once it has
been checked against a case whose answer is known. Live drills measure that answer with noise;
here the delay is written into real GPU traces (real kernels, real collectives, real skew between
ranks), so the answer is exact by construction and any verdict can be tested against it.

Matching, injection and propagation must agree on one model of a collective (end = last arrival +
transfer), so they are kept together here (`drill_set`, which slow_gpu.py's drill uses too); reading
a trace set and re-measuring the truth are in traces.py.

Usage (also `python -m hpcprof.drills.trace_drill --help`):

    python -m hpcprof.drills.trace_drill SRC OUT --rank R --stall-ms D --before-collective K [--step N]
    python -m hpcprof.drills.trace_drill SRC OUT --rank R --stretch F [--step N]

SRC is a folder of per-rank traces (`*.json` / `*.json.gz`, rank from `distributedInfo.rank`);
OUT receives the drilled set under the same file names (gzip in, gzip out), every field other than
`ts`/`dur` untouched. It prints the truth as JSON; `inject()` returns it.

Two drills on rank R, in profiled step N (default: the first step of rank R's trace):
- stall: rank R stops for D ms right before its K-th collective of the step (0-based, in start
  order, counting only collectives whose kernels are found on at least one other rank: in a
  sampled trace the others are not there to wait).
- stretch: every compute kernel of rank R in step N (kernels that are not NCCL, launched in the
  step) takes F times as long.

How the delay propagates (the model a real run follows, written as time shifts per rank):
- Every event of rank R at or after the injection point moves later by the delay (CPU and GPU):
  a stall moves everything from the collective's kernel start on; a stretched kernel moves
  everything that starts at or after its original end by its extra time (cumulatively).
- A collective ends at its last arrival plus its transfer time. When the shifts move the last
  arrival later by delta, every participant's NCCL kernel ends delta later (those that were waiting
  wait longer: their kernel's duration grows) and every later event of that participant moves by
  delta too. Ranks that arrived early absorb a delay up to their slack, as in a real run.
- Shifts never decrease along a rank's timeline (the largest applies), so order, nesting, stream
  order, launch-before-kernel and flow arrows stay valid. Host-side spans that contain a shift
  point (ProfilerStep, the waiting op) grow by it; device ops (kernels, memcpy, memset) keep their
  duration except the stretched kernels and the collectives.
Collectives are the communication kernels as the analysis finds them (NCCL names, the host-side
collective that launched a kernel, known communication libraries: hpcprof.analysis.ranks.comm_kernels).
Collective instances are matched across ranks by kernel name and end time: mutual nearest ends
within `tol_us` (default 1 ms; the matched ends in the shared sets agree within 0.4 ms, the next
candidate is 13 ms or more away). A group holds at most one kernel per rank.

Truth (`job_times`, computed by re-reading the written files): per profiled step, the job's step
time = latest end over ranks minus earliest start, where a rank's step runs from its
`ProfilerStep#N` start to the later of that span's end and the end of the GPU work launched in it;
the window = first step's earliest start to the last step's latest end. The drill reports the
increase of each, in ms.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from ..cliparser import ArgumentParser
from .traces import (
    STEP_PREFIX,
    DrillError,
    RankTrace,
    device_step,
    end_of,
    is_device,
    job_times,
    load_for_drill,
    load_set,
    open_trace,
    profiler_steps,
    timed,
)

__all__ = ["DrillError", "RankTrace", "inject", "job_times", "load_set", "match_collectives"]

DEFAULT_TOL_US = 1000.0


def match_collectives(ranks: dict[int, RankTrace], tol_us: float = DEFAULT_TOL_US) -> list[dict[int, dict]]:
    """Groups {rank: NCCL kernel event} of one collective instance: same kernel name, mutual nearest
    end times within tol_us, pairwise; a group that would hold two kernels of one rank is dropped."""
    comm = {r: sorted((e for e in rt.events if timed(e) and id(e) in rt.comm_ids()), key=end_of) for r, rt in ranks.items()}
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    order = sorted(comm)
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            for name in {e["name"] for e in comm[a]} & {e["name"] for e in comm[b]}:
                ka = [e for e in comm[a] if e["name"] == name]
                kb = [e for e in comm[b] if e["name"] == name]
                ea, eb = np.array([end_of(e) for e in ka]), np.array([end_of(e) for e in kb])
                na = np.abs(ea[:, None] - eb[None, :]).argmin(axis=1)
                nb = np.abs(eb[:, None] - ea[None, :]).argmin(axis=1)
                for x, y in enumerate(na):
                    if nb[y] == x and abs(ea[x] - eb[y]) <= tol_us:
                        parent[find((a, id(ka[x])))] = find((b, id(kb[y])))
    by_id = {id(e): e for es in comm.values() for e in es}
    groups: dict = {}
    for node in list(parent):
        groups.setdefault(find(node), []).append(node)
    out = []
    for members in groups.values():
        rs = [r for r, _ in members]
        if len(members) >= 2 and len(set(rs)) == len(rs):
            out.append({r: by_id[i] for r, i in members})
    return out


class _Shift:
    """A rank's time shift (us) as a non-decreasing step function of the original time."""

    def __init__(self):
        self.points: list[tuple[float, float]] = []

    def add(self, t: float, v: float) -> None:
        if v > 0:
            self.points.append((float(t), float(v)))

    def at(self, t: float) -> float:
        return max((v for p, v in self.points if p <= t), default=0.0)

    def arrays(self):
        pts = sorted(self.points)
        t = np.array([p for p, _ in pts], dtype=float)
        v = np.maximum.accumulate(np.array([v for _, v in pts], dtype=float)) if pts else np.empty(0)
        return t, v


def _apply(rt: RankTrace, shift: _Shift, fixed_end: dict[int, float], exact: dict[int, float] | None = None) -> None:
    """Rewrite ts/dur of every timed event of the rank (see the module docstring); `fixed_end` maps
    id(event) -> its new end (collectives, stretched kernels). Integer fields stay integers, except
    the events of `exact` (id -> new duration), whose duration is written as that float (not as a
    difference of two epoch times, which float64 holds to 0.25 µs only)."""
    exact = exact or {}
    bt, bv = shift.arrays()

    def s_at(t, side):
        i = int(np.searchsorted(bt, t, side=side)) - 1
        return float(bv[i]) if i >= 0 else 0.0

    for e in rt.events:
        if not timed(e):
            continue
        ts, dur = float(e["ts"]), e.get("dur")
        new_ts = ts + s_at(ts, "right")
        if dur is not None and isinstance(dur, (int, float)):
            end = ts + float(dur)
            if id(e) in fixed_end:
                new_end = fixed_end[id(e)]
            elif is_device(e):
                new_end = new_ts + float(dur)
            else:
                new_end = max(new_ts, end + s_at(end, "left"))
            new_dur = exact[id(e)] if id(e) in exact else new_end - new_ts
            e["dur"] = int(round(new_dur)) if isinstance(dur, int) and id(e) not in exact else new_dur
        e["ts"] = int(round(new_ts)) if isinstance(e["ts"], int) else new_ts


MAX_STALL_MS = 600_000.0
"""10 minutes: a longer stall before a collective would have ended a real job (NCCL's and gloo's
default collective timeouts are 10 to 30 minutes)."""
MAX_STRETCH = 1000.0
"""A compute kernel 1000 times slower is already no longer the same job."""
MAX_TOL_US = 1_000_000.0
"""1 s: beyond, instances of a collective from different steps would be matched together."""


def in_range(option: str, value: float, low: float, high: float, unit: str) -> None:
    """Refuse `value` unless low < value <= high (nan and infinities are never in range)."""
    if not (math.isfinite(value) and low < value <= high):
        raise DrillError(f"{option} {value}: must be a number > {low:g} and <= {high:g} {unit}")


def inject(src, out, rank: int, *, stall_ms: float | None = None, before_collective: int | None = None,
           stretch: float | None = None, step: int | None = None, tol_us: float = DEFAULT_TOL_US) -> dict:
    """Write the drilled set to `out` and return the truth (see the module docstring)."""
    if (stall_ms is None) == (stretch is None):
        raise DrillError("choose one drill: --stall-ms D --before-collective K, or --stretch F")
    if stall_ms is not None:
        in_range("--stall-ms", stall_ms, 0.0, MAX_STALL_MS, "ms")
        if before_collective is None or before_collective < 0:
            raise DrillError(f"a stall needs --before-collective >= 0 (got {before_collective})")
    if stretch is not None:
        in_range("--stretch", stretch, 1.0, MAX_STRETCH, "x")
    in_range("--match-tol-us", tol_us, 0.0, MAX_TOL_US, "us")
    out = Path(out)
    ranks = load_for_drill(src, out, rank)
    before = job_times(ranks)
    rt = ranks[rank]
    steps = [n for n, _, _ in profiler_steps(rt)]
    if step is None:
        if not steps:
            raise DrillError(f"{rt.path}: no {STEP_PREFIX}N marker; a drill needs a profiled step")
        step = steps[0]
    elif step not in steps:
        raise DrillError(f"{rt.path}: no profiled step {step} (steps: {steps})")
    in_step = device_step(rt)
    groups = match_collectives(ranks, tol_us)
    mine = sorted((g[rank] for g in groups if rank in g and in_step.get(id(g[rank])) == step), key=lambda e: float(e["ts"]))
    info = {"rank": rank, "step": step, "collectives_matched": len(groups)}
    if stall_ms is not None:
        if before_collective >= len(mine):
            raise DrillError(f"rank {rank} has {len(mine)} matched collectives in step {step}; --before-collective {before_collective} is out of range")
        target = mine[before_collective]
        info.update(drill="stall", stall_ms=stall_ms, before_collective=before_collective, collective=target["name"], at_us=target["ts"])
        return {**info, **drill_set(ranks, out, rank, groups, before, stall=(float(target["ts"]), stall_ms * 1e3))}
    ks = [e for e in rt.events if timed(e) and str(e.get("cat", "")).lower() == "kernel" and id(e) not in rt.comm_ids()
          and in_step.get(id(e)) == step]
    if not ks:
        raise DrillError(f"{rt.path}: no compute kernel launched in step {step} to stretch")
    info.update(drill="stretch", stretch=stretch, kernels_stretched=len(ks), compute_ms=sum(float(e["dur"]) for e in ks) / 1e3)
    return {**info, **drill_set(ranks, out, rank, groups, before, stretched=ks, stretch=stretch)}


def drill_set(ranks: dict[int, RankTrace], out: Path, rank: int, groups: list[dict[int, dict]], before: dict, *,
              stall: tuple[float, float] | None = None, stretched: list[dict] = (), stretch: float = 1.0,
              whole_us: bool = False) -> dict:
    """Propagate a drill on `rank` through the loaded set (module docstring), write it to `out` and
    return the truth: the job-time increase per step and over the window. `stall`: (time, µs) the
    rank stops for; `stretched`: its kernel events that take `stretch` times as long; `groups`:
    match_collectives of the set; `before`: job_times of the set before the drill.

    whole_us: the stretched kernels keep their exact new duration (a float, as newer Kineto writes
    them) while every shift stays a whole number of µs (each stretched kernel's extra time rounded
    up), so that integer timestamps stay integers and the next kernel on a stream still starts at
    or after the stretched one ends. Without it, integer fields are rounded (durations included)."""
    shifts = {r: _Shift() for r in ranks}
    fixed_end: dict[int, float] = {}
    nodes = [(max(float(e["ts"]) for e in g.values()), max(end_of(e) for e in g.values()), 0, g) for g in groups]
    nodes += [(float(e["ts"]), end_of(e), 1, e) for e in stretched]
    if stall is not None:
        shifts[rank].add(*stall)
    for _, _, kind, p in sorted(nodes, key=lambda n: (n[0], n[1])):
        if kind == 1:  # a stretched kernel: its start moves by the shift so far, its end by that plus its extra
            s = shifts[rank].at(float(p["ts"]))
            extra = (stretch - 1) * float(p["dur"])
            fixed_end[id(p)] = float(p["ts"]) + s + stretch * float(p["dur"])
            shifts[rank].add(end_of(p), s + (math.ceil(extra) if whole_us else extra))
        else:  # a collective: ends at the (shifted) last arrival plus its transfer time
            last = max(float(e["ts"]) for e in p.values())
            new_last = max(float(e["ts"]) + shifts[r].at(float(e["ts"])) for r, e in p.items())
            delta = max(0.0, new_last - last)
            for r, e in p.items():
                fixed_end[id(e)] = end_of(e) + delta
                shifts[r].add(end_of(e), delta)
    exact = {id(e): stretch * float(e["dur"]) for e in stretched} if whole_us else {}
    out.mkdir(parents=True, exist_ok=True)
    for r, t in ranks.items():
        _apply(t, shifts[r], fixed_end, exact)
        tmp = out / (".tmp-" + t.path.name)  # same suffix, so the same compression; renamed when complete
        with open_trace(tmp, "w") as fh:
            fh.write(json.dumps(t.doc))  # dumps uses the C encoder; dump to a stream does not
        tmp.replace(out / t.path.name)
    after = job_times(out)
    common = sorted(set(before["steps_ms"]) & set(after["steps_ms"]))
    return {"step_increase_ms": {n: after["steps_ms"][n] - before["steps_ms"][n] for n in common},
            "job_time_increase_ms": after["window_ms"] - before["window_ms"],
            "job_time_before_ms": before["window_ms"], "job_time_after_ms": after["window_ms"], "n_steps": len(common)}


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m hpcprof.drills.trace_drill", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="folder of per-rank Kineto traces (*.json, *.json.gz)")
    ap.add_argument("out", type=Path, help="folder to write the drilled set to (same file names)")
    ap.add_argument("--rank", type=int, required=True, help="the rank to delay")
    ap.add_argument("--stall-ms", type=float, help="stall the rank this long before a collective")
    ap.add_argument("--before-collective", type=int, help="which collective of the step (0-based, matched ones only)")
    ap.add_argument("--stretch", type=float, help="stretch the rank's compute kernels in the step by this factor (> 1)")
    ap.add_argument("--step", type=int, help="profiled step N (ProfilerStep#N); default: the rank's first")
    ap.add_argument("--match-tol-us", type=float, default=DEFAULT_TOL_US, help="end-time tolerance for matching a collective across ranks (us)")
    a = ap.parse_args(argv)
    try:
        info = inject(a.src, a.out, a.rank, stall_ms=a.stall_ms, before_collective=a.before_collective,
                      stretch=a.stretch, step=a.step, tol_us=a.match_tol_us)
    except DrillError as e:
        print(f"python -m hpcprof.drills.trace_drill: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1, default=str))
    print(f"injected job-time increase: {info['job_time_increase_ms']:.3f} ms over {info['n_steps']} profiled step(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
