"""The merged timeline: every rank's trace on one clock, in one Chrome trace (Perfetto, chrome://tracing).

Why: a finding such as "rank 6 costs 160 ms per step" is only believed once it is seen. Per-rank
traces open one at a time and each host has its own clock; this writes ONE file,
`analysis/timeline.pt.trace.json.gz`, where every rank is a process named "rank r · node · device",
its CPU threads and GPU streams are its threads, and all times are on the job's clock
(hpcprof.analysis.reduce.clocks: per-host offsets with their uncertainty, recorded in the file).
Time 0 is the start of the first chosen step (the earliest rank); the file's metadata gives, per
step, where it starts on the timeline, so a finding can say "at 143-193 ms from the start of step 12".

What goes in: the chosen profiled steps (`--timeline-steps`, default all profiled steps). Host
events overlapping those steps' window on the rank; GPU events launched in it (their CUDA runtime
call, matched by correlation id, lies in the window) or, without a launch record, starting in it.
Launch flows (runtime call -> kernel) are rebuilt from correlation ids. Annotations on a thread
"hpcprof: waits" per rank: each collective where the last rank arrived more than ANNOTATE_MS after
the first gets a slice on the late rank ("late arrival") and one on every rank that waited for it,
with a flow arrow from each wait to the late arrival.

Size budget: at most `max_events` events. Above it, whole kinds of low value are dropped first
(DROP_ORDER: flows, Python functions, short CPU ops, runtime calls, long CPU ops), the shortest
events first within the last kind touched; GPU activity, step markers, annotations and collectives
are never dropped. What was dropped is counted in the file's metadata and in the returned dict.

Length: about 370 lines, one data flow (select per rank -> budget -> write, plus the entry point the
orchestrator calls) over one event frame whose columns every part reads; splitting it would spread
that frame's layout over several modules.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from ..decode.events import event_table
from ..decode.load import read_trace
from ..reduce.clocks import ClockAlignment
from .rounding import round_summary

FILE_NAME = "timeline.pt.trace.json.gz"
DEFAULT_MAX_EVENTS = 1_000_000
ANNOTATE_MS = 1.0  # the straggler analysis' noise floor: later arrivals than this are annotated
MAX_ANNOTATED = 500  # collectives annotated at most (the latest arrivals first)
SHORT_OP_US = 10.0
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "gpu_user_annotation"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
# dropped first to last when over budget; anything not listed is never dropped
DROP_ORDER = ("launch_flows", "python_functions", "short_cpu_ops", "runtime_calls", "instant_events", "cpu_ops")
ANNOT_TID = 0
GPU_TID_BASE = 1_000_000


class TimelineError(Exception):
    """The timeline cannot be written (no chosen step on any rank); the message says what to pass."""


@dataclass(frozen=True)
class RankSource:
    rank: int
    path: str
    node: str | None
    device: str | None  # "cpu", "cuda", or a device name


def _num(col: pd.Series) -> np.ndarray:
    if col.dtype.kind in "if":
        return col.to_numpy(dtype=float)
    return pd.to_numeric(col.where(col.map(lambda v: not isinstance(v, bool))), errors="coerce").to_numpy(dtype=float)


def _rank_events(src: RankSource, steps_wanted: set[int] | None) -> dict:
    """One rank's events of the chosen steps, in its own clock, as a small frame plus step bounds."""
    ev = event_table(read_trace(src.path))
    n = len(ev)
    get = lambda k, default=None: ev[k] if k in ev else pd.Series([default] * n)  # noqa: E731
    ph = get("ph").to_numpy(dtype=object)
    name = get("name").to_numpy(dtype=object)
    cat = get("cat").astype(object).where(get("cat").notna(), "").to_numpy(dtype=object)
    ts = _num(get("ts", np.nan))
    dur = _num(get("dur", np.nan))
    pid = get("pid").to_numpy(dtype=object)
    tid = get("tid").to_numpy(dtype=object)
    corr = _num(get("correlation", -1))
    is_x = (ph == "X") & np.isfinite(ts) & np.isfinite(dur) & np.array([isinstance(v, str) for v in name])
    is_gpu = np.isin(cat, list(GPU_CATS))
    steps: dict = {}
    main_count: dict = {}
    for i in np.flatnonzero(is_x & ~is_gpu):
        m = STEP_RE.match(name[i])
        if m:
            steps.setdefault(tid[i], {})[int(m.group(1))] = (float(ts[i]), float(ts[i] + dur[i]))
            main_count[tid[i]] = main_count.get(tid[i], 0) + 1
    if not steps:
        return {"steps": {}, "events": None}
    main_tid = max(main_count, key=main_count.get)
    all_steps = steps[main_tid]
    chosen = {s: v for s, v in all_steps.items() if steps_wanted is None or s in steps_wanted}
    if not chosen:
        return {"steps": all_steps, "chosen": {}, "events": None}
    lo = min(v[0] for v in chosen.values())
    hi = max(v[1] for v in chosen.values())
    end = ts + dur
    host_x = is_x & ~is_gpu & (ts < hi) & (end > lo)
    runtime = host_x & np.isin(cat, list(RUNTIME_CATS))
    launched = set(corr[runtime & (corr >= 0)].tolist())
    gpu_x = is_x & is_gpu
    in_launch = np.array([c in launched for c in corr]) & (corr >= 0)
    gpu_keep = gpu_x & (in_launch | ((ts >= lo) & (ts < hi)))
    inst = (ph == "i") & np.isfinite(ts) & (ts >= lo) & (ts < hi) & np.array([isinstance(v, str) for v in name])
    keep = host_x | gpu_keep | inst
    idx = np.flatnonzero(keep)
    kind = np.full(idx.size, "", dtype=object)
    c, d, nm = cat[idx], dur[idx], name[idx]
    g = is_gpu[idx]
    kind[g] = "gpu"
    kind[~g & (c == "python_function")] = "python_functions"
    kind[~g & np.isin(c, list(RUNTIME_CATS))] = "runtime_calls"
    cpu_op = ~g & (c == "cpu_op")
    kind[cpu_op & (d < SHORT_OP_US)] = "short_cpu_ops"
    kind[cpu_op & (d >= SHORT_OP_US)] = "cpu_ops"
    kind[ph[idx] == "i"] = "instant_events"
    # never dropped: GPU activity, step markers and other annotations, collectives (gloo:*/nccl ops)
    coll = np.array([isinstance(v, str) and (v.startswith("gloo:") or "nccl" in v.lower() or v.startswith("c10d::")) for v in nm])
    kind[coll & (kind != "gpu")] = "keep"
    kind[kind == ""] = "keep"
    frame = pd.DataFrame({
        "ph": ph[idx], "cat": c, "name": nm, "ts": ts[idx], "dur": np.where(ph[idx] == "X", d, 0.0),
        "pid": pid[idx], "tid": tid[idx], "gpu": g, "corr": corr[idx], "kind": kind,
    })
    return {"steps": all_steps, "chosen": chosen, "main_tid": main_tid, "events": frame}


def _budget(frames: dict[int, pd.DataFrame], n_flows: int, max_events: int, n_fixed: int) -> tuple[dict, dict]:
    """Which events survive the budget: returns ({rank: keep mask}, {kind: dropped count})."""
    total = sum(len(f) for f in frames.values()) + n_flows + n_fixed
    dropped: dict = {}
    masks = {r: np.ones(len(f), dtype=bool) for r, f in frames.items()}
    excess = total - max_events
    for k in DROP_ORDER:
        if excess <= 0:
            break
        if k == "launch_flows":
            take = min(excess, n_flows)
            dropped[k] = take
            excess -= take
            continue
        # the shortest events of this kind go first, across all ranks
        cand = [(r, i, d) for r, f in frames.items() for i, d in zip(np.flatnonzero(f["kind"].to_numpy() == k), f["dur"].to_numpy()[f["kind"].to_numpy() == k])]
        if not cand:
            continue
        cand.sort(key=lambda x: x[2])
        take = cand[: min(excess, len(cand))]
        for r, i, _ in take:
            masks[r][i] = False
        dropped[k] = len(take)
        excess -= len(take)
    return masks, dropped


def late_arrivals(colls: pd.DataFrame, clocks: ClockAlignment, min_ms: float = ANNOTATE_MS) -> pd.DataFrame:
    """Per matched collective whose last rank arrived more than `min_ms` after the first: one row per
    rank with its aligned arrival (us), the late rank, its aligned arrival and the wait (ms).
    `colls`: rank, key, step, kind, arrival_us (the rank's own clock)."""
    if colls is None or colls.empty:
        return pd.DataFrame()
    d = colls[["rank", "key", "step", "kind", "arrival_us"]].copy()
    d["arrival"] = d["arrival_us"] - d["rank"].map(clocks.rank_offsets()).fillna(0.0)
    d = d[d.groupby("key")["rank"].transform("nunique") >= 2]
    if d.empty:
        return pd.DataFrame()
    g = d.groupby("key")["arrival"]
    d["first"] = g.transform("min")
    d["last"] = g.transform("max")
    last_rank = d.loc[g.idxmax(), ["key", "rank"]].set_index("key")["rank"]
    d["late_rank"] = d["key"].map(last_rank)
    d["lateness_ms"] = (d["last"] - d["first"]) / 1e3
    d["wait_ms"] = (d["last"] - d["arrival"]) / 1e3
    return d[d["lateness_ms"] > min_ms].reset_index(drop=True)


def _plain(o):
    """numpy scalars (from pandas columns) as plain numbers for the JSON encoder."""
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"cannot encode {type(o).__name__} in the timeline")


def write_timeline(
    out_dir: Path,
    sources: list[RankSource],
    clocks: ClockAlignment,
    steps: list[int] | None = None,
    colls: pd.DataFrame | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    progress: bool = False,
) -> dict:
    """Write `out_dir/timeline.pt.trace.json.gz`; return what summary.json records about it."""
    from tqdm import tqdm

    wanted = set(int(s) for s in steps) if steps else None
    per: dict[int, dict] = {}
    for src in tqdm(sources, desc="hpcprof: merged timeline", unit="rank", disable=not progress):
        per[src.rank] = _rank_events(src, wanted)
    have = {r: p for r, p in per.items() if p.get("events") is not None}
    if not have:
        avail = sorted({s for p in per.values() for s in p.get("steps", {})})
        raise TimelineError(
            f"none of the steps {sorted(wanted) if wanted else '(all)'} is a profiled step of any rank; "
            f"profiled steps: {avail or 'none (no ProfilerStep#N in the traces)'}; pass --timeline-steps with some of these"
        )
    offs = clocks.rank_offsets()
    chosen_steps = sorted({s for p in have.values() for s in p["chosen"]})
    step_start = {s: min(p["chosen"][s][0] - offs.get(r, 0.0) for r, p in have.items() if s in p["chosen"]) for s in chosen_steps}
    origin = min(step_start.values())

    late = late_arrivals(colls, clocks) if colls is not None else pd.DataFrame()
    if not late.empty:
        lo_step = {s: step_start[s] for s in chosen_steps}
        late = late[late["step"].isin(list(lo_step))]
        top = late.drop_duplicates("key").nlargest(MAX_ANNOTATED, "lateness_ms")["key"]
        late = late[late["key"].isin(set(top))]
    # one slice on the late rank per collective, per waiting rank one slice and a flow (2 events)
    n_annot = 0 if late.empty else late["key"].nunique() + 3 * int(((late["rank"] != late["late_rank"]) & (late["wait_ms"] > 0)).sum())

    frames = {r: p["events"] for r, p in have.items()}
    n_flows = sum(int(((f["corr"] >= 0) & f["gpu"]).sum()) * 2 for f in frames.values())
    masks, dropped = _budget(frames, n_flows, max_events, n_annot)
    keep_flows = "launch_flows" not in dropped

    out: list[dict] = []
    src_by_rank = {s.rank: s for s in sources}
    for r in sorted(have):
        p, f = have[r], frames[r][masks[r]]
        s = src_by_rank[r]
        shift = offs.get(r, 0.0) + origin
        gpu_ids = sorted({int(x) for x in f.loc[f["gpu"], "pid"] if isinstance(x, (int, np.integer)) or str(x).isdigit()})
        device = s.device or ("cuda" if len(gpu_ids) else "cpu")
        if gpu_ids and device in ("cuda", "gpu"):
            device = "GPU " + ",".join(map(str, gpu_ids))
        elif gpu_ids:
            device = f"{device} (GPU {','.join(map(str, gpu_ids))})"
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r} · {s.node or 'unknown'} · {device}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        threads: dict = {}
        found = f[["gpu", "pid", "tid"]].drop_duplicates()
        # the main thread first, then the other CPU threads, then the GPU streams
        found = found.assign(o=[(bool(g), t != p["main_tid"], str(t)) for g, t in zip(found["gpu"], found["tid"])]).sort_values("o")
        for gpu, pid_, tid_ in found[["gpu", "pid", "tid"]].itertuples(index=False):
            key = (bool(gpu), str(pid_), str(tid_))
            if key in threads:
                continue
            if gpu:
                new = GPU_TID_BASE + len([k for k in threads if k[0]]) + 1
                label = f"GPU {pid_} stream {tid_}"
            else:
                new = 1 + len([k for k in threads if not k[0]])
                label = f"main thread ({tid_})" if tid_ == p["main_tid"] else f"thread {tid_}"
            threads[key] = new
            out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": new, "args": {"name": label}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": new, "args": {"sort_index": new}})
        tids = [threads[(bool(a), str(b), str(c))] for a, b, c in zip(f["gpu"], f["pid"], f["tid"])]
        t = np.round(f["ts"].to_numpy() - shift, 3)
        for ph, cat, nm, ts, dur, tid_new, corr, gpu in zip(f["ph"], f["cat"], f["name"], t, f["dur"], tids, f["corr"], f["gpu"]):
            e = {"ph": ph, "cat": cat, "name": nm, "pid": r, "tid": tid_new, "ts": float(ts)}
            if ph == "X":
                e["dur"] = float(dur)
            else:
                e["s"] = "t"
            if corr >= 0 and (gpu or cat in RUNTIME_CATS):
                e["args"] = {"correlation": int(corr)}
            out.append(e)
        if keep_flows:
            rt = f[~f["gpu"] & f["cat"].isin(list(RUNTIME_CATS)) & (f["corr"] >= 0)]
            rt_pos = {int(c): (float(ts - shift), threads[(False, str(pi), str(ti))]) for c, ts, pi, ti in zip(rt["corr"], rt["ts"], rt["pid"], rt["tid"])}
            for c, ts, pi, ti in zip(f["corr"], f["ts"], f["pid"], f["tid"]):
                if c < 0 or int(c) not in rt_pos or (True, str(pi), str(ti)) not in threads:
                    continue
                fid = int(c) * 100_000 + r
                a_ts, a_tid = rt_pos[int(c)]
                out.append({"ph": "s", "cat": "launch", "name": "launch", "id": fid, "pid": r, "tid": a_tid, "ts": a_ts})
                out.append({"ph": "f", "bp": "e", "cat": "launch", "name": "launch", "id": fid, "pid": r, "tid": threads[(True, str(pi), str(ti))], "ts": float(ts - shift)})
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": ANNOT_TID, "args": {"name": "hpcprof: waits"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": ANNOT_TID, "args": {"sort_index": -1}})

    flow_id = 1
    for key, grp in (late.groupby("key", sort=False) if not late.empty else []):
        lr = int(grp["late_rank"].iloc[0])
        first, last = float(grp["first"].iloc[0]) - origin, float(grp["last"].iloc[0]) - origin
        kind, step, lateness = grp["kind"].iloc[0], int(grp["step"].iloc[0]), float(grp["lateness_ms"].iloc[0])
        if lr in have:
            out.append({"ph": "X", "cat": "hpcprof", "name": f"late arrival: rank {lr} at {kind}, {lateness:.2f} ms after the first rank",
                        "pid": lr, "tid": ANNOT_TID, "ts": round(first, 3), "dur": round(last - first, 3),
                        "args": {"step": step, "collective": str(key), "late_ms": round(lateness, 3)}})
        for r, arr, w in zip(grp["rank"], grp["arrival"], grp["wait_ms"]):
            r = int(r)
            if r == lr or w <= 0 or r not in have:
                continue
            a = float(arr) - origin
            out.append({"ph": "X", "cat": "hpcprof", "name": f"waiting for rank {lr} ({kind}, {w:.2f} ms)", "pid": r, "tid": ANNOT_TID,
                        "ts": round(a, 3), "dur": round(w * 1e3, 3), "args": {"step": step, "collective": str(key), "late_rank": lr}})
            if lr in have:
                out.append({"ph": "s", "cat": "hpcprof", "name": "waits for", "id": 10**15 + flow_id, "pid": r, "tid": ANNOT_TID, "ts": round(a, 3)})
                out.append({"ph": "f", "bp": "e", "cat": "hpcprof", "name": "waits for", "id": 10**15 + flow_id, "pid": lr, "tid": ANNOT_TID, "ts": round(last - 0.001, 3)})
                flow_id += 1

    kept = sum(1 for e in out if e["ph"] != "M")
    info = {
        "path": str(Path(out_dir) / FILE_NAME),
        "steps": chosen_steps,
        "origin_us": origin,
        "step_start_ms": {str(s): round((v - origin) / 1e3, 3) for s, v in step_start.items()},
        "events": kept,
        "max_events": max_events,
        "dropped": {k: int(v) for k, v in dropped.items() if v},
        "annotated_collectives": int(late["key"].nunique()) if not late.empty else 0,
        "ranks": sorted(have),
        "ranks_without_steps": sorted(set(per) - set(have)),
        "open": "open https://ui.perfetto.dev and drag the file in (or chrome://tracing -> Load)",
    }
    doc = {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "hpcprof": "merged timeline: all ranks on one clock; time 0 = start of the first chosen step",
            "steps": ", ".join(map(str, chosen_steps)),
            "dropped": ", ".join(f"{k}: {v}" for k, v in info["dropped"].items()) or "nothing",
            "clock_offsets_ms": "; ".join(f"{h['host']}: {h['offset_ms']:+.3f} ± {h['uncertainty_ms']:.3f}" for h in clocks.to_dict()["hosts"]),
        },
        # rounded as in summary.json, so the two files state the same offsets
        "hpcprof": {"clock_alignment": round_summary(clocks.to_dict(), "clock_alignment"), **{k: v for k, v in info.items() if k != "path"}},
    }
    path = Path(out_dir) / FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wb", compresslevel=6) as fh:
        fh.write(msgspec.json.encode(doc, enc_hook=_plain))
    tmp.replace(path)
    return info


def merged_timeline(out_dir: Path, keep: dict, nodes: dict, matching, warnings: list[str],
                    steps: list[int] | None = None, max_events: int | None = None) -> tuple[ClockAlignment, dict]:
    """The merged timeline, on the clock the straggler analysis used. `keep`: rank -> RankResult;
    `matching`: the what-if replay's matched collectives (reduce/whatif.Matching: `df` with rank,
    key, step, kind, arrival_us, and `clocks` from reduce/clocks.py), or None (one rank, no
    collectives: one host's clock, offset 0). A timeline that cannot be written is a warning (and
    `error` in the returned dict), never a failed analysis. The clock's warnings are appended to
    `warnings`."""
    from ..reduce.clocks import estimate_clocks

    hosts = {r: nodes.get(r) for r in keep}
    if matching is not None and getattr(matching, "clocks", None) is not None:
        clocks, matched = matching.clocks, matching.df
    else:
        clocks, matched = estimate_clocks(pd.DataFrame(columns=["rank", "key", "end_us"]), hosts), pd.DataFrame()
    warnings.extend(clocks.warnings())
    sources = []
    for r, v in sorted(keep.items()):
        m = v.meta
        sources.append(RankSource(r, v.path, nodes.get(r), (m.get("device_name") or m.get("device")) if m.get("device") in ("cuda", "accelerator") else "cpu"))
    try:
        info = write_timeline(out_dir, sources, clocks, steps, matched if len(matched) else None,
                              max_events=max_events or DEFAULT_MAX_EVENTS)
    except TimelineError as exc:
        warnings.append(f"no merged timeline: {exc}")
        info = {"error": str(exc)}
    except Exception as exc:  # a trace that changed since the map, a full disk: the rest still stands
        warnings.append(f"no merged timeline: {type(exc).__name__}: {exc}")
        info = {"error": f"{type(exc).__name__}: {exc}"}
    return clocks, info
