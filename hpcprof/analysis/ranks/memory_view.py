"""The memory view of one rank, as the PyTorch profiler's TensorBoard plugin (torch-tb-profiler 0.4.3)
defines it, from the trace's `[memory]` instant events (`profile_memory=True`):

- the curve: per device ("CPU", "GPU<id>": the plugin's device keys; other device types are left
  out, as the plugin leaves them), the `Total Allocated` (and `Total Reserved`) each event carries,
  in time order. Traces of PyTorch before 1.10 carry neither (nor `Addr`): the plugin then draws no
  curve and names no peak; here the curve is then the running sum of the events' `Bytes` from the
  first event on (`basis` "bytes_since_start": memory allocated before the profiler started is not
  in it), and says so;
- the peak: the largest value of the curve (the first event reaching it), the operator the plugin
  ties that event to and the ProfilerStep#N whose range holds it;
- the operators that allocate: each event goes to the innermost host node of its thread holding
  its time (the plugin's call tree: operators, `python` events, ProfilerStep#N, collectives, module
  nodes; a node crossing its parent's end left out; an operator whose only child is an operator
  of the same name absorbs it, as the plugin's remove_dup_nodes does), and counts only where that node is an
  operator (a `cpu_op` that is no ProfilerStep, DataLoader step, `Optimizer.*` or
  (Distributed)DataParallel.forward). "Self" figures hold the events of the operator itself, the
  others those of its whole subtree, summed over every node of that name (nested nodes of one name
  count twice, as in the plugin): allocation size and count (events with Bytes > 0), size increase
  (all events' Bytes, frees included).

The plugin also moves backward operators under module nodes where the trace links forward and
backward (`with_modules`); the innermost operator of an event is the same either way.
tests/analysis/test_memory_view.py compares the operators and the peak with the plugin's own.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

NO_EVENTS = "recorded without profile_memory: the trace has no [memory] events"
NO_TOTALS = ("the trace's [memory] events carry no Total Allocated (PyTorch before 1.10): the curve is the running "
             "sum of their Bytes since the first event, memory allocated before the profiler started left out")
NO_RESERVED = "the trace's [memory] events on this device carry no Total Reserved"
CURVE_POINTS = 400
"""The most points a curve keeps in meta.json and summary.json (per bin the highest: the peak stays)."""
TOP_OPERATORS = 10
NOT_OPERATOR = ("DataParallel.forward", "DistributedDataParallel.forward")


def _num(table: pd.DataFrame, col: str) -> np.ndarray:
    if col not in table:
        return np.full(len(table), np.nan)
    return pd.to_numeric(table[col], errors="coerce").to_numpy(dtype=np.float64)


def _device_names(dtype: np.ndarray, did: np.ndarray) -> np.ndarray:
    """The plugin's device key of each event ("CPU", "GPU<id>"), None for other device types."""
    out = np.full(len(dtype), None, dtype=object)
    out[dtype == 0] = "CPU"
    gpu = (dtype == 1) & ~np.isnan(did)
    out[gpu] = [f"GPU{d}" for d in did[gpu].astype(np.int64).tolist()]
    return out


def _int_tid(v):
    """A node's thread as the plugin keys its call trees (int(tid): old traces write it as text)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


def _tree_nodes(table: pd.DataFrame, tids: set) -> pd.DataFrame:
    """The host nodes of the plugin's call tree on the threads `tids`: start, end, name, tid and
    whether the node is an operator the memory view counts."""
    ph = table["ph"].astype("string")
    cat = table["cat"].astype("string").str.lower().fillna("")
    name = table["name"].astype("string").fillna("")
    step = name.str.startswith("ProfilerStep#")
    comm = name.str.match(r"^(?:nccl|gloo):(?:broadcast|reduce|all_reduce|all_gather|reduce_scatter)$")
    module = cat.eq("python_function") & pd.Series(_num(table, "module_id"), index=table.index).notna()
    ann = cat.isin(["user_annotation", "gpu_user_annotation"]) & (step | comm)
    op = cat.isin(["cpu_op", "operator"])
    keep = (ph == "X").fillna(False) & (op | cat.eq("python") | module | ann)
    t = table.loc[keep.to_numpy(dtype=bool)]
    ts = _num(t, "ts")
    out = pd.DataFrame({"start": ts, "end": ts + np.nan_to_num(_num(t, "dur")), "name": name[t.index].to_numpy(dtype=object),
                        "tid": [_int_tid(v) for v in t["tid"].tolist()]})
    nm = name[t.index]
    counted = op[t.index] & ~step[t.index] & ~nm.str.startswith("Optimizer.") & ~nm.isin(NOT_OPERATOR) \
        & ~((nm.str.startswith("enumerate(DataLoader)#") & nm.str.endswith(".__next__")) | nm.str.startswith("enumerate(DataPipe)#"))
    out["operator"] = counted.to_numpy(dtype=bool)
    out["op_type"] = (op[t.index] & ~step[t.index]).to_numpy(dtype=bool)  # the plugin's EventTypes.OPERATOR
    out = out[np.isfinite(out["start"].to_numpy()) & out["tid"].isin(tids).to_numpy()]
    return out


def _tree(start: list, end: list, names: list, op_type: list) -> tuple[list[int], list[int]]:
    """The plugin's call tree of one thread (OpTreeBuilder: nodes by start, the longer first; a node
    crossing its parent's end left out; then remove_dup_nodes: an operator whose only child is an
    operator of the same name absorbs it). Returns each node's parent (-1: the root; -2: left out)
    and the node each node's time belongs to (itself, or the node that absorbed it)."""
    n = len(start)
    parent, owner = [-2] * n, list(range(n))
    children: list[list[int]] = [[] for _ in range(n + 1)]  # the root last
    stack = [(n, math.inf)]
    for j in range(n):
        while stack[-1][1] <= start[j]:
            stack.pop()
        if end[j] <= stack[-1][1]:
            p = stack[-1][0]
            parent[j] = -1 if p == n else p
            children[p].append(j)
            stack.append((j, end[j]))
    for j in range(n):  # by start: a node before its descendants, so an absorbing node is final
        if parent[j] == -2 or owner[j] != j:
            continue
        while len(children[j]) == 1 and names[children[j][0]] == names[j] and op_type[j] and op_type[children[j][0]]:
            c = children[j][0]
            owner[c] = j
            children[j] = children[c]
            for g in children[j]:
                parent[g] = j
    return parent, owner


def _attribute(nodes: pd.DataFrame, mem: pd.DataFrame) -> tuple[np.ndarray, dict[str, dict[str, list]]]:
    """Each event's operator name (None: a free, or not tied to an operator) and, per device, per
    operator name: [self increase, self allocation size, self allocation count, increase, allocation
    size, allocation count] (the plugin's MemoryMetrics order)."""
    op_of = np.full(len(mem), None, dtype=object)
    stats: dict[str, dict[str, list]] = {}
    for tid, recs in mem.groupby("tid", sort=False):
        nd = nodes[nodes["tid"] == tid]
        order = np.lexsort((-nd["end"].to_numpy(), nd["start"].to_numpy()))
        start, end = nd["start"].to_numpy()[order].tolist(), nd["end"].to_numpy()[order].tolist()
        names, is_op = nd["name"].to_numpy()[order].tolist(), nd["operator"].to_numpy()[order].tolist()
        parent, owner = _tree(start, end, names, nd["op_type"].to_numpy()[order].tolist())
        own: dict[int, dict[str, list]] = {}  # node -> device -> its own three figures
        stack = [(-1, math.inf)]  # (node, end) from the root (-1, holding everything) to the innermost open node
        j = 0
        for p, ts, dev, nb in zip(recs.index.tolist(), recs["ts"].tolist(), recs["device"].tolist(), recs["bytes"].tolist()):
            while j < len(start) and start[j] <= ts:  # the nodes started by then (those in the tree)
                if parent[j] != -2:
                    while stack[-1][1] <= start[j]:
                        stack.pop()
                    stack.append((j, end[j]))
                j += 1
            while stack[-1][1] <= ts:  # a node holds [start, end)
                stack.pop()
            node = stack[-1][0]
            node = owner[node] if node >= 0 else node
            if node < 0 or not is_op[node] or dev is None:
                continue
            if nb > 0:  # the plugin names the operator of allocations only
                op_of[p] = names[node]
            f = own.setdefault(node, {}).setdefault(dev, [0.0] * 3)
            f[0] += nb
            if nb > 0:
                f[1] += nb
                f[2] += 1
        # whole subtrees: descendants after their ancestors in start order, so add from the last node up
        total: dict[int, dict[str, list]] = {n: {d: v[:] for d, v in fs.items()} for n, fs in own.items()}
        for n in range(len(start) - 1, -1, -1):
            p = parent[n]
            if n in total and p >= 0 and owner[n] == n:
                dst = total.setdefault(p, {})
                for d, v in total[n].items():
                    t = dst.setdefault(d, [0.0] * 3)
                    for x in range(3):
                        t[x] += v[x]
        for n, fs in total.items():
            if not is_op[n]:
                continue
            for d, v in fs.items():
                row = stats.setdefault(d, {}).setdefault(names[n], [0.0] * 6)
                mine = own.get(n, {}).get(d, [0.0] * 3)
                for x in range(3):
                    row[x] += mine[x]
                    row[3 + x] += v[x]
    return op_of, stats


def _steps(table: pd.DataFrame) -> list[tuple[int, float, float]]:
    """The ProfilerStep#N ranges (step, start, end), by start."""
    name = table["name"].astype("string").fillna("")
    m = (name.str.startswith("ProfilerStep#") & (table["ph"].astype("string") == "X")).fillna(False).to_numpy(dtype=bool)
    t = table.loc[m]
    ts, dur = _num(t, "ts"), np.nan_to_num(_num(t, "dur"))
    step = pd.to_numeric(name[m].str.slice(len("ProfilerStep#")), errors="coerce").to_numpy()
    rows = sorted({(int(s), float(a), float(a + d)) for s, a, d in zip(step, ts, dur) if not (math.isnan(s) or math.isnan(a))}, key=lambda r: r[1])
    return rows


def _step_of(ts: np.ndarray, steps: list[tuple[int, float, float]]) -> np.ndarray:
    """The step whose range holds each time (-1: none)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    for s, a, b in steps:
        out[(ts >= a) & (ts < b)] = s
    return out


def _thin(t: np.ndarray, a: np.ndarray, r: np.ndarray, points: int = CURVE_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At most `points` points: per bin of consecutive events the one with the most allocated."""
    if len(t) <= points:
        return t, a, r
    edges = np.linspace(0, len(t), points + 1).astype(np.int64)
    pick = np.array([lo + int(np.argmax(a[lo:hi])) for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo])
    return t[pick], a[pick], r[pick]


def memory_view(table: pd.DataFrame, device_properties: list | None = None) -> dict[str, Any]:
    """The rank's memory view (module docstring) as plain JSON values, for meta.json `memory_view`.
    Without `[memory]` events: `events` 0 and `reason` NO_EVENTS, every other field None."""
    m = np.array(table["name"] == "[memory]", dtype=bool)  # object compare: no text column made for every event
    m[m] = np.asarray(table["ph"][m] == "i", dtype=bool)
    base: dict[str, Any] = {"events": int(m.sum()), "reason": None, "device": None, "devices": [], "basis": None,
                            "peak_allocated_bytes": None, "peak_time_ms": None, "peak_operator": None, "peak_step": None,
                            "peak_reserved_bytes": None, "device_total_bytes": None, "curve": None, "steps": [],
                            "top_operators": [], "null_reasons": {}}
    if not m.any():
        base["reason"] = NO_EVENTS
        return base
    t = table.loc[m]
    ts = _num(t, "ts")
    dev = _device_names(_num(t, "device_type"), _num(t, "device_id"))
    mem = pd.DataFrame({"ts": ts, "tid": t["tid"].to_numpy(dtype=object), "device": dev,
                        "bytes": np.nan_to_num(_num(t, "mem_bytes")), "total": _num(t, "total_allocated"),
                        "reserved": _num(t, "total_reserved")})
    mem = mem[np.isfinite(ts)].sort_values("ts", kind="stable").reset_index(drop=True)
    first_ts = float(np.nanmin(_num(table, "ts")))  # the trace's start: the curve's time 0
    nodes = _tree_nodes(table, set(mem["tid"].tolist()))
    op_of, stats = _attribute(nodes, mem)
    mem["op"] = op_of
    known = mem[mem["device"].notna()]
    if known.empty:
        base["reason"] = "the trace's [memory] events are on no CPU or CUDA device"
        return base
    counts = known["device"].value_counts()
    gpus = [d for d in counts.index if d.startswith("GPU")]
    device = max(gpus, key=lambda d: (counts[d], d)) if gpus else "CPU"  # the rank's own GPU: the most events
    base["devices"] = sorted(counts.index.tolist())
    base["device"] = device
    d = known[known["device"] == device]
    why = base["null_reasons"]
    if d["total"].notna().any():
        base["basis"] = "total_allocated"
        d = d[d["total"].notna()]
        alloc = d["total"].to_numpy()
    else:
        base["basis"] = "bytes_since_start"
        why["basis"] = NO_TOTALS
        alloc = np.cumsum(d["bytes"].to_numpy())
    res = d["reserved"].to_numpy()
    k = int(np.argmax(alloc))
    tms = (d["ts"].to_numpy() - first_ts) / 1e3
    steps = _steps(table)
    step_of = _step_of(d["ts"].to_numpy(), steps)
    base.update(peak_allocated_bytes=float(alloc[k]), peak_time_ms=float(tms[k]), peak_operator=d["op"].iloc[k],
                peak_step=int(step_of[k]) if step_of[k] >= 0 else None)
    if base["peak_operator"] is None:
        why["peak_operator"] = "the event at the peak is not inside an operator of its thread (the plugin ties it to none)"
    if base["peak_step"] is None:
        why["peak_step"] = "the peak lies outside every ProfilerStep#N range"
    if np.isfinite(res).any():
        base["peak_reserved_bytes"] = float(np.nanmax(res))
    else:
        why["peak_reserved_bytes"] = NO_RESERVED
    if device.startswith("GPU"):
        gid = int(device[3:])
        base["device_total_bytes"] = next((float(p["totalGlobalMem"]) for p in device_properties or []
                                           if isinstance(p, dict) and p.get("id") == gid
                                           and isinstance(p.get("totalGlobalMem"), (int, float))), None)
    if base["device_total_bytes"] is None:
        why["device_total_bytes"] = ("the trace has no deviceProperties totalGlobalMem for " + device) if device != "CPU" \
            else "host memory: the trace does not say its size"
    ct, ca, cr = _thin(tms, alloc, res)
    base["curve"] = {"time_ms": ct.tolist(), "allocated_bytes": ca.tolist(),
                     "reserved_bytes": [None if math.isnan(v) else float(v) for v in cr.tolist()]}
    nb = d["bytes"].to_numpy()
    for s, _a, _b in steps:
        on = step_of == s
        if not on.any():
            continue
        pos = np.flatnonzero(on & (nb > 0))
        big = int(pos[np.argmax(nb[pos])]) if len(pos) else None
        base["steps"].append({"step": s, "peak_allocated_bytes": float(alloc[on].max()),
                              "allocated_bytes": float(nb[pos].sum()) if len(pos) else 0.0, "allocations": len(pos),
                              "largest_allocation_bytes": float(nb[big]) if big is not None else None,
                              "largest_allocation_operator": d["op"].iloc[big] if big is not None else None})
    ops = stats.get(device, {})
    top = sorted(ops.items(), key=lambda kv: (-kv[1][1], kv[0]))[:TOP_OPERATORS]
    base["top_operators"] = [{"operator": n, "self_allocation_bytes": v[1], "self_allocations": int(v[2]),
                              "self_increase_bytes": v[0], "allocation_bytes": v[4], "allocations": int(v[5]),
                              "increase_bytes": v[3]} for n, v in top if v[1] > 0]
    return base


def gpu_peak_bytes(view: dict | None) -> float | None:
    """The rank's GPU memory peak: the memory view's peak where the view is of a GPU and read from
    the Total Allocated its events carry; None otherwise (a CPU rank, no profile_memory, no totals,
    no view). The one definition of the peak: meta.json's `gpu_memory_peak_bytes`, which the
    memory-headroom recommendation reads, is this."""
    if not view or not str(view.get("device") or "").startswith("GPU") or view.get("basis") != "total_allocated":
        return None
    return view.get("peak_allocated_bytes")


def thin_curve(curve: dict | None, points: int) -> dict | None:
    """A `curve` of memory_view() with at most `points` points, chosen as memory_view chooses them
    (the peak stays)."""
    if not curve or len(curve["time_ms"]) <= points:
        return curve
    res = np.array([np.nan if v is None else v for v in curve["reserved_bytes"]], dtype=np.float64)
    t, a, r = _thin(np.asarray(curve["time_ms"], dtype=np.float64), np.asarray(curve["allocated_bytes"], dtype=np.float64),
                    res, points)
    return {"time_ms": t.tolist(), "allocated_bytes": a.tolist(), "reserved_bytes": [None if math.isnan(v) else float(v) for v in r.tolist()]}
