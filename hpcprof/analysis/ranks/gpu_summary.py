"""The GPU summary of one rank, as the PyTorch profiler's TensorBoard plugin (torch-tb-profiler 0.4.3)
defines each figure: GPU utilization, Est. SM Efficiency, Est. Achieved Occupancy, the share of
kernel time in Tensor Core kernels, and the step-time breakdown (Kernel, Memcpy, Memset,
Communication, Runtime, DataLoader, CPU Exec, Other).

Computed from the rank's event table (decode/events.py: complete events with their `blocks per SM`,
`est. achieved occupancy %`, `device`, correlation and external ids) with the plugin's rules, which
this module restates (docs/summary-json.md, "gpu_summary"):

- events are typed by category as the plugin types them: `Kernel`, `Memcpy`/`gpu_memcpy`,
  `Memset`/`gpu_memset`, `Runtime` (only that spelling: the plugin does not know `cuda_runtime`, so
  on newer traces it sees no runtime calls), `cpu_op`/`Operator`, `python`; user annotations only
  when they are `ProfilerStep#N` or a `nccl:`/`gloo:` collective;
- the steps are the ProfilerStep ranges (without any: the span of the CPU operators), moved to the
  device side where the runtime calls of a step launched device work, the last steps dropped when
  they launched no (or under 80% of the previous step's) device work;
- the breakdown gives each moment of a step to the first role active then, in the order Kernel,
  Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec; Other is the rest; averaged over
  the steps;
- GPU utilization: the merged kernel time inside [first step start, last step end] over that span;
  Est. SM Efficiency: over the same span, the time-weighted sum of the kernels' `blocks per SM`
  running at each moment, capped at 1; Est. Achieved Occupancy: the kernels' occupancy weighted by
  their time inside the span; Tensor Cores: the time of kernels whose name holds one of the plugin's
  patterns over the time of all kernels launched by a runtime call the plugin ties to an operator.

A figure the trace cannot give is None with a one-line reason (never 0). tests/analysis/
test_gpu_summary.py compares every figure with the plugin's own on real traces.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from .comm_kernels import Names

ROLES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
"""The breakdown's roles in the plugin's order of precedence (ProfileRole); "other" is the rest."""
GPU_ROLES = ("kernel", "memcpy", "memset", "runtime")
"""The roles the plugin shows only when the trace has runtime calls, kernels, copies or memsets."""
COMM_NAMES = frozenset(f"{lib}:{op}" for lib in ("nccl", "gloo")
                       for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter"))
"""The host collectives the plugin counts as communication (its NcclOpNameSet and GlooOpNameSet)."""
TC_PATTERNS = ("h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2",
               "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm",
               "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm", "c1688")
"""Kernel-name parts the plugin takes as Tensor Core use (its TC_Allowlist, from NVIDIA PyProf)."""
_TC_RX = re.compile("|".join(map(re.escape, TC_PATTERNS)))

# event kinds, as the plugin types the categories (trace.EventTypeMap and create_trace_event)
K, MC, MS, RT, OP, PY, STEP, ANN_COMM = range(8)
_CAT_KIND = {"kernel": K, "memcpy": MC, "gpu_memcpy": MC, "memset": MS, "gpu_memset": MS, "runtime": RT,
             "cpu_op": OP, "operator": OP, "python": PY}
_ANNOTATION = ("user_annotation", "gpu_user_annotation")


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint union of the intervals [s, e) (touching ones joined), as the plugin's merge_ranges."""
    if not len(s):
        return s.astype(np.float64), e.astype(np.float64)
    o = np.argsort(s, kind="stable")
    s, e = s[o].astype(np.float64), e[o].astype(np.float64)
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, idx)
    return s[idx], ends


def _intersect(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sorted disjoint interval lists (as sorted disjoint intervals)."""
    (as_, ae), (bs, be) = a, b
    if not len(as_) or not len(bs):
        return np.empty(0), np.empty(0)
    # every pair that overlaps: for each a, the b's from the first ending after its start
    lo = np.searchsorted(be, as_, side="right")
    hi = np.searchsorted(bs, ae, side="left")
    n = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(len(as_)), n)
    bi = np.repeat(lo, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))  # lo..hi-1 of each a
    s, e = np.maximum(as_[ai], bs[bi]), np.minimum(ae[ai], be[bi])
    keep = e > s
    return s[keep], e[keep]


def _subtract(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """a minus b, both sorted disjoint interval lists."""
    (as_, ae), (bs, be) = a, b
    if not len(as_) or not len(bs):
        return as_, ae
    lo, hi = min(as_[0], bs[0]) - 1.0, max(ae[-1], be[-1]) + 1.0
    # the complement of b within [lo, hi], intersected with a
    cs = np.concatenate([[lo], be])
    ce = np.concatenate([bs, [hi]])
    keep = ce > cs
    return _intersect((as_, ae), (cs[keep], ce[keep]))


def _length(iv: tuple) -> float:
    return float(np.sum(iv[1] - iv[0]))


def _num(col: pd.Series) -> np.ndarray:
    """An args column as floats (missing or not a number: NaN)."""
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)


def _kinds(table: pd.DataFrame, names: Names, cats: Names) -> np.ndarray:
    """The plugin's type of each event (-1: an event it leaves out of these figures). `names`, `cats`:
    the name and category columns factorized: each test runs once per distinct value, as text
    (categories compared in lower case), a missing value being the empty text."""
    kind = np.array([_CAT_KIND.get(str(u).lower(), -1) for u in cats.uniq] + [-1], dtype=np.int64)[cats.codes]
    step = names.where(lambda u: str(u).startswith("ProfilerStep#"))
    ann = cats.where(lambda u: str(u).lower() in _ANNOTATION)
    comm = names.where(lambda u: str(u) in COMM_NAMES)
    kind[ann] = -1
    kind[ann & comm] = ANN_COMM
    kind[(ann | (kind == OP)) & step] = STEP
    kind[~(table["ph"] == "X").to_numpy(dtype=bool, na_value=False)] = -1
    return kind


def _is_loader(name) -> bool:
    s = str(name)
    return (s.startswith("enumerate(DataLoader)#") and s.endswith(".__next__")) or s.startswith("enumerate(DataPipe)#")


class _Events:
    """The columns of the events the plugin reads, sorted by start as the plugin sorts them."""

    def __init__(self, table: pd.DataFrame, names: Names, cats: Names):
        kind = _kinds(table, names, cats)
        keep = np.flatnonzero(kind >= 0)

        def col(c: str, rows: np.ndarray) -> np.ndarray:
            """Column `c` at `rows` as floats (NaN where missing), one column at a time: a copy of
            the table's rows was most of a 1 GB rank's peak memory."""
            return _num(table[c].iloc[rows]) if c in table else np.full(rows.size, np.nan)

        ts = col("ts", keep)
        order = np.argsort(ts, kind="stable")
        rows = keep[order]
        self.kind = kind[rows]
        self.ts = ts[order]
        self.end = self.ts + np.nan_to_num(col("dur", rows))
        self.names = names.take(rows)
        self.comm_name = self.names.where(lambda u: str(u) in COMM_NAMES)
        self.loader = self.names.where(_is_loader)
        ext, ext_up = col("external_id_lc", rows), col("external_id", rows)
        ext_up[ext_up == -1] = np.nan  # the decode's default for a missing "External id"
        self.ext = np.where(np.isnan(ext), ext_up, ext)
        self.corr = col("correlation", rows)
        self.corr[self.corr == -1] = np.nan
        self.blocks, self.occ, self.device = (col(c, rows) for c in ("blocks_per_sm", "occupancy_pct", "device"))


def _roles(ev: _Events) -> tuple[dict[str, tuple], list[tuple[float, float]]]:
    """Each role's merged intervals and the host-side steps (StepParser.parse_steps)."""
    comm_ext = ev.ext[np.isin(ev.kind, (OP, PY, STEP, ANN_COMM)) & ev.comm_name]
    comm_ext = comm_ext[~np.isnan(comm_ext)]
    k = ev.kind
    kern = k == K
    comm_kernel = kern & np.isin(ev.ext, comm_ext)
    host_op = np.isin(k, (OP, PY, ANN_COMM))
    is_loader = np.isin(k, (OP, ANN_COMM)) & ev.loader
    host_comm = host_op & ~is_loader & ev.comm_name
    masks = {"kernel": kern & ~comm_kernel, "memcpy": k == MC, "memset": k == MS,
             "communication": comm_kernel | host_comm, "runtime": k == RT, "dataloader": is_loader,
             "cpu_exec": host_op & ~is_loader & ~host_comm}
    roles = {r: _merge(ev.ts[m], ev.end[m]) for r, m in masks.items()}
    st = np.flatnonzero(k == STEP)
    steps = list(zip(ev.ts[st].tolist(), ev.end[st].tolist()))
    if not steps:
        cpu = np.isin(k, (OP, PY, STEP))
        steps = [(float(ev.ts[cpu].min()), float(ev.end[cpu].max()))] if cpu.any() else []
    return roles, steps


def _device_steps(ev: _Events, steps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The steps moved to the device side (StepParser._find_device_steps, _update_steps_duration)."""
    dev = np.flatnonzero(np.isin(ev.kind, (K, MC, MS)))
    # the loops below are per event: each value read as a Python float from a view of the array
    # (lists of every value were most of a 1 GB rank's peak memory)
    ts, end, corr = (memoryview(np.ascontiguousarray(a, dtype=np.float64)) for a in (ev.ts, ev.end, ev.corr))
    by_corr: dict[float, list[int]] = {}
    for i in dev.tolist():
        if not math.isnan(corr[i]):
            by_corr.setdefault(corr[i], []).append(i)
    rts = np.flatnonzero(ev.kind == RT)
    rts = rts[np.argsort(ev.ts[rts], kind="stable")].tolist()
    big = math.inf
    dev_span = [(big, -big)] * len(steps)
    matched_n = [0] * len(steps)
    matched: set[int] = set()
    i_step, i_rt, lo, hi = 0, 0, big, -big
    while i_step < len(steps) and i_rt < len(rts):
        r = rts[i_rt]
        s0, s1 = steps[i_step]
        if ts[r] < s0:
            i_rt += 1
        elif end[r] <= s1:
            for d in by_corr.get(corr[r], ()):  # NaN never equals a key
                lo, hi = min(ts[d], lo), max(end[d], hi)
                matched.add(d)
                matched_n[i_step] += 1
            i_rt += 1
        elif ts[r] < s1:
            i_rt += 1
        else:
            dev_span[i_step] = (lo, hi)
            i_step, lo, hi = i_step + 1, big, -big
    while i_step < len(steps):
        dev_span[i_step] = (lo, hi)
        i_step, lo, hi = i_step + 1, big, -big
    if not matched:
        return steps
    prev = steps[0][0]
    if dev_span[0][0] != big:
        free = dev[~np.isin(dev, np.fromiter(matched, dtype=np.int64, count=len(matched)))]
        before = ev.end[free][ev.end[free] < dev_span[0][0]]
        prev = max(prev, float(before.max())) if len(before) else prev
    out = []
    for (s0, s1), (d0, d1) in zip(steps, dev_span):
        start = max(prev, s0)
        end = max(s1, start) if d0 == big else max(s1, d1, start)
        out.append((start, end))
        prev = end
    if len(out) > 1:
        i = len(out) - 1
        while i >= 0 and matched_n[i] <= 0:
            i -= 1
        if i >= 0:
            keep = i if i > 0 and matched_n[i - 1] * 0.8 > matched_n[i] else i + 1
            out = out[:keep]
    return out


def _breakdown(roles: dict[str, tuple], steps: list[tuple[float, float]]) -> dict[str, float]:
    """The average time per step of each role and of "other" and the step ("total"), in us
    (OverallParser.aggregate: each moment goes to the first role active then)."""
    slots = _merge(np.array([s for s, _ in steps]), np.array([e for _, e in steps]))
    costs: dict[str, tuple] = {}
    for i, role in enumerate(ROLES):
        costs[role] = roles[role] if i == 0 else _intersect(slots, roles[role])
        slots = _subtract(slots, costs[role])
    costs["other"] = slots
    avg = {r: 0.0 for r in (*ROLES, "other", "total")}
    for s, e in steps:
        one = (np.array([s]), np.array([e]))
        for r, iv in costs.items():
            avg[r] += _length(_intersect(one, iv))
        avg["total"] += e - s
    return {r: v / len(steps) for r, v in avg.items()}


def _sm_efficiency(ts: np.ndarray, end: np.ndarray, blocks: np.ndarray, span: tuple) -> float:
    """The time-weighted sum of `blocks per SM` of the kernels running, capped at 1, inside `span`
    (merge_ranges_with_value then intersection with the steps), summed: the caller divides."""
    times = np.concatenate([ts, end])
    starts = np.concatenate([np.zeros(len(ts), int), np.ones(len(end), int)])
    delta = np.concatenate([blocks, -blocks])
    o = np.lexsort((starts, times))  # a start before an end at the same time
    times, value = times[o], np.cumsum(delta[o])
    s, e, v = times[:-1], times[1:], value[:-1]
    on = (e > s) & (v > 0.0)
    s, e, v = np.maximum(s[on], span[0]), np.minimum(e[on], span[1]), np.minimum(v[on], 1.0)
    inside = e > s
    return float(np.sum(v[inside] * (e[inside] - s[inside])))


def _tc_kernels(ev: _Events, kern: np.ndarray) -> np.ndarray:
    """The kernels of `kern` the plugin's Tensor Core ratio counts: launched by a runtime call it
    ties to an operator (same external id) that its operator statistics list (a `cpu_op` that is no
    DataLoader step, no `Optimizer.*` and no (Distributed)DataParallel.forward); the launches it puts
    under the root of its tree (no such operator) do not count."""
    listed = (ev.kind == OP) & ~ev.loader & ~ev.names.where(
        lambda u: str(u).startswith("Optimizer.") or str(u) in ("DataParallel.forward", "DistributedDataParallel.forward"))
    op_ext = ev.ext[listed]
    rt = np.flatnonzero(ev.kind == RT)
    tied = ev.corr[rt][np.isin(ev.ext[rt], op_ext[~np.isnan(op_ext)])]
    return kern[np.isin(ev.corr[kern], tied[~np.isnan(tied)])]


def gpu_summary(table: pd.DataFrame, device_properties: list | None = None, names: Names | None = None,
                cats: Names | None = None) -> dict[str, Any]:
    """The plugin's GPU summary of one rank's event table: `figures` (percentages, None where the
    trace cannot give one), `reasons` (figure -> why it is None), `breakdown_us` / `breakdown_pct`
    (the average step's time per role), `steps`, `device` (the GPU's id, name and compute capability
    from `deviceProperties`). `names`, `cats`: the table's name and category columns factorized
    (comm_kernels.Names), where the caller has them."""
    n = len(table)
    ev = _Events(table, names if names is not None else Names.column(table, "name", n),
                 cats if cats is not None else Names.column(table, "cat", n))
    figures: dict[str, float | None] = {"gpu_utilization_pct": None, "sm_efficiency_pct": None,
                                        "achieved_occupancy_pct": None, "tensor_cores_pct": None}
    reasons: dict[str, str] = {}
    roles, steps = _roles(ev)
    steps = _device_steps(ev, steps) if steps else steps
    out: dict[str, Any] = {"figures": figures, "reasons": reasons, "steps": len(steps), "device": None,
                           "breakdown_us": None, "breakdown_pct": None}
    if not steps or steps[-1][1] <= steps[0][0]:
        why = "no ProfilerStep ranges or CPU operators to measure the steps by"
        reasons.update({f: why for f in figures})
        reasons["breakdown"] = why
        return out
    avg = _breakdown(roles, steps)
    show_gpu = any(len(roles[r][0]) for r in ("runtime", "kernel", "memcpy", "memset"))
    shown = [r for r in (*ROLES, "other") if (show_gpu or r not in GPU_ROLES) and (r != "communication" or len(roles[r][0]))]
    out["breakdown_us"] = {r: (avg[r] if r in shown else None) for r in (*ROLES, "other")} | {"step": avg["total"]}
    out["breakdown_pct"] = {r: (100.0 * avg[r] / avg["total"] if r in shown and avg["total"] > 0 else None) for r in (*ROLES, "other")}
    if not show_gpu:
        reasons["breakdown_gpu"] = "no kernels, copies, memsets or runtime calls in the trace (ranks on CPU): no GPU roles"
    kern = np.flatnonzero((ev.kind == K) & ~np.isnan(ev.device))
    if not len(kern):
        why = "no GPU kernels in the trace (ranks on CPU, or the profiler's CUDA activity off)"
        reasons.update({f: why for f in figures})
        return out
    gpu = int(np.nanmin(ev.device[kern]))  # the plugin lists the first device first
    out["devices"] = sorted({int(d) for d in ev.device[kern].tolist()})
    kern = kern[ev.device[kern] == gpu]
    out["device"] = _device_info(device_properties, gpu)
    if out["device"] is None:
        reasons["device"] = f"the trace has no deviceProperties entry for GPU {gpu}: name and compute capability unknown"
    span = (steps[0][0], steps[-1][1])
    total = span[1] - span[0]
    ks, ke = ev.ts[kern], ev.end[kern]
    busy = _intersect(_merge(ks, ke), (np.array([span[0]]), np.array([span[1]])))
    figures["gpu_utilization_pct"] = 100.0 * _length(busy) / total
    b = ev.blocks[kern]
    on = b > 0.0  # the plugin leaves out kernels without it and with 0 or less
    weighted = _sm_efficiency(ks[on], ke[on], b[on], span) if on.any() else 0.0
    if weighted > 0.0:
        figures["sm_efficiency_pct"] = 100.0 * weighted / total
    else:
        reasons["sm_efficiency_pct"] = "no kernel inside the steps carries a positive `blocks per SM` (the trace lacks kernel args)"
    occ = ev.occ[kern]
    on = occ >= 0.0
    d = np.minimum(ke[on], span[1]) - np.maximum(ks[on], span[0])
    inside = d > 0
    if inside.any():
        figures["achieved_occupancy_pct"] = float(np.sum(occ[on][inside] * d[inside]) / np.sum(d[inside]))
    else:
        reasons["achieved_occupancy_pct"] = "no kernel inside the steps carries `est. achieved occupancy %` (the trace lacks kernel args)"
    tc = _tc_kernels(ev, np.flatnonzero(ev.kind == K))
    if len(tc):
        tc = tc[ev.device[tc] == gpu]
        dur = ev.end[tc] - ev.ts[tc]
        used = ev.names.take(tc).where(lambda u: _TC_RX.search(str(u)))  # each distinct kernel name searched once
        figures["tensor_cores_pct"] = 100.0 * float(dur[used].sum()) / float(dur.sum()) if dur.sum() > 0 else 0.0
    else:
        reasons["tensor_cores_pct"] = ("no kernel is tied to an operator through a `Runtime`-category launch with its "
                                       "external id (the plugin does not read `cuda_runtime` events), so the plugin gives no Tensor Core share")
    return out


def _device_info(props: list | None, gpu: int) -> dict | None:
    """The GPU's id, name and compute capability from the trace's deviceProperties, or None."""
    for p in props or []:
        if isinstance(p, dict) and p.get("id") == gpu:
            cc = (f"{p['computeMajor']}.{p['computeMinor']}" if isinstance(p.get("computeMajor"), int)
                  and isinstance(p.get("computeMinor"), int) else None)
            return {"id": gpu, "name": str(p["name"]) if p.get("name") is not None else None, "compute_capability": cc}
    return None


FIGURES = ("gpu_utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct", "tensor_cores_pct")
"""The plugin's GPU figures, in percent, as summary.json names them."""
BREAKDOWN = tuple(f"{r}_pct" for r in (*ROLES, "other"))
"""The step-time breakdown's shares of the average step, in percent, as summary.json names them."""


def rank_gpu_summary(table: pd.DataFrame, device_properties: list | None = None, names: Names | None = None,
                     cats: Names | None = None) -> dict[str, Any]:
    """`gpu_summary` as the flat record meta.json keeps (plain floats): the figures, the breakdown's
    shares (`*_pct`) and the average step (`step_time_us`), `profiled_steps`, `gpu_name`, and
    `null_reasons` (field -> one line) for every field that is None."""
    g = gpu_summary(table, device_properties, names, cats)
    rec: dict[str, Any] = {f: (None if g["figures"][f] is None else float(g["figures"][f])) for f in FIGURES}
    pct = g["breakdown_pct"] or {}
    for f in BREAKDOWN:
        v = pct.get(f[:-4])
        rec[f] = None if v is None else float(v)
    rec["step_time_us"] = None if g["breakdown_us"] is None else float(g["breakdown_us"]["step"])
    rec["profiled_steps"] = int(g["steps"])
    rec["gpu_name"] = (g["device"] or {}).get("name")
    reasons = g["reasons"]
    why: dict[str, str] = {f: reasons[f] for f in FIGURES if rec[f] is None}
    for f in (*BREAKDOWN, "step_time_us"):
        if rec[f] is None:
            why[f] = reasons.get("breakdown") or (reasons.get("breakdown_gpu") if f[:-4] in GPU_ROLES else None) \
                or "no host collectives or communication kernels in the trace"
    if rec["gpu_name"] is None:
        why["gpu_name"] = reasons.get("device") or reasons.get("gpu_utilization_pct") or "no GPU kernels in the trace"
    rec["null_reasons"] = why
    return rec
