"""Per-rank timeline built from one raw trace: main host thread, GPU activity, interval algebra.

The straggler cause needs to know what a rank did in a time window (waiting for data, CPU work,
un-annotated host gaps, GPU compute, memory copies). We precompute merged interval sets once per
rank so any window can be measured with two binary searches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
DATA_RE = re.compile(r"(^hpcprof\.data$)|DataLoader|dataloader")
NCCL_RE = re.compile(r"^nccl.*Kernel")  # same rule as HTA: ncclKernel_* and ncclDevKernel_*
MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "Operator", "cpu_instant_event"}
GLOO_RE = re.compile(r"^gloo:(.+)$")


class Intervals:
    """A set of disjoint [start, end) intervals with O(log n) covered-length queries."""

    def __init__(self, starts, ends):
        s = np.asarray(starts, dtype=float)
        e = np.asarray(ends, dtype=float)
        if s.size:
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            run_end = np.maximum.accumulate(e)
            new = np.ones(s.size, dtype=bool)
            new[1:] = s[1:] > run_end[:-1]
            idx = np.flatnonzero(new)
            ms = s[idx]
            me = np.append(run_end[idx[1:] - 1], run_end[-1]) if idx.size > 1 else run_end[-1:]
            s, e = ms, me
        self.s, self.e = s, e
        self.cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def _upto(self, t):
        t = np.asarray(t, dtype=float)
        i = np.searchsorted(self.s, t, side="right")  # intervals starting at or before t
        full = self.cum[np.maximum(i - 1, 0)]
        last_s = self.s[np.maximum(i - 1, 0)] if self.s.size else np.zeros_like(t)
        last_e = self.e[np.maximum(i - 1, 0)] if self.e.size else np.zeros_like(t)
        part = np.clip(np.minimum(t, last_e) - last_s, 0, None)
        return np.where(i > 0, full + part, 0.0)

    def covered(self, a, b):
        """Length of [a, b) covered by the set (vectorised over a, b)."""
        if not self.s.size:
            return np.zeros(np.broadcast(np.asarray(a), np.asarray(b)).shape)
        return np.clip(self._upto(b) - self._upto(a), 0, None)

    @property
    def total(self) -> float:
        return float(self.cum[-1])


@dataclass
class RankTimeline:
    main_tid: object
    steps: list[tuple[int, float, float]]  # (step, ts_us, end_us) of ProfilerStep#N on the main thread
    host_all: Intervals  # main-thread events other than ProfilerStep
    host_ops: Intervals  # main-thread operators (cat cpu_op): the host is busy, not blocked
    host_data: Intervals  # data loading regions/ops on the main thread
    gpu_compute: Intervals
    gpu_memory: Intervals
    gpu_comm: Intervals
    has_gpu: bool
    collectives: list[dict] = field(default_factory=list)
    memory_peak_bytes: float | None = None

    # categories reported as a straggler cause; see docs/analysis.md
    CATEGORIES = ("data_loading", "host_gap", "cpu_work", "gpu_compute", "memcpy")

    def busy(self) -> "Intervals":
        """When this rank is doing useful work: GPU compute/memcpy kernels on a GPU rank, main-thread
        operators on a CPU-only rank. Waiting in a collective outside these intervals is blocked time."""
        if self.has_gpu:
            return Intervals(np.concatenate([self.gpu_compute.s, self.gpu_memory.s]), np.concatenate([self.gpu_compute.e, self.gpu_memory.e]))
        return self.host_ops

    def window(self, a, b) -> dict[str, np.ndarray]:
        a = np.asarray(a, dtype=float)
        b = np.maximum(np.asarray(b, dtype=float), a)
        all_ = self.host_all.covered(a, b)
        data = self.host_data.covered(a, b)
        return {
            "data_loading": data,
            "cpu_work": np.clip(all_ - data, 0, None),
            "host_gap": np.clip((b - a) - all_, 0, None),
            "gpu_compute": self.gpu_compute.covered(a, b),
            "memcpy": self.gpu_memory.covered(a, b),
        }


def _coll_kind_from_kernel(name: str) -> str:
    m = re.match(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    return m.group(1) if m else name.split("(")[0]


def build_timeline(doc: dict) -> RankTimeline:
    events = doc["traceEvents"]
    step_ev: dict = {}
    tid_count: dict = {}
    host = []  # (tid, ts, end, name, cat)
    gpu = []  # (ts, end, name, cat, args)
    gloo = []  # (tid, ts, end, kind)
    enqueue = []  # c10d::X_ ops (main-thread collective launches): (tid, ts, name)
    mem_peak = None
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        name = e.get("name")
        if ph == "i" and name == "[memory]":
            a = e.get("args") or {}
            v = a.get("Total Allocated")
            if isinstance(v, (int, float)) and a.get("Device Type", 1) != 0:
                mem_peak = v if mem_peak is None else max(mem_peak, v)
            continue
        if ph != "X" or not isinstance(name, str):
            continue
        ts = e.get("ts")
        dur = e.get("dur", 0)
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        ts = float(ts)
        end = ts + float(dur)
        cat = e.get("cat")
        if cat in GPU_CATS:
            gpu.append((ts, end, name, cat, e.get("args") or {}))
            continue
        if cat not in HOST_CATS:
            continue
        tid = e.get("tid")
        m = STEP_RE.match(name)
        if m:
            step_ev.setdefault(tid, []).append((int(m.group(1)), ts, end))
            continue
        tid_count[tid] = tid_count.get(tid, 0) + 1
        g = GLOO_RE.match(name)
        if g:
            gloo.append((tid, ts, end, g.group(1), e.get("args") or {}))
            continue
        if name.startswith("c10d::"):
            enqueue.append((tid, ts, name))
        host.append((tid, ts, end, name, cat))

    if step_ev:
        main_tid = max(step_ev, key=lambda t: len(step_ev[t]))
        steps = sorted(step_ev[main_tid])
    else:
        main_tid = max(tid_count, key=tid_count.get) if tid_count else None
        steps = []
    mh = [h for h in host if h[0] == main_tid]
    host_all = Intervals([h[1] for h in mh], [h[2] for h in mh])
    oh = [h for h in mh if h[4] == "cpu_op"]
    host_ops = Intervals([h[1] for h in oh], [h[2] for h in oh])
    dh = [h for h in mh if DATA_RE.search(h[3])]
    host_data = Intervals([h[1] for h in dh], [h[2] for h in dh])

    comp, mem, comm = [], [], []
    collectives = []
    for ts, end, name, cat, args in gpu:
        if NCCL_RE.match(name):
            comm.append((ts, end))
            collectives.append(
                {
                    "kind": _coll_kind_from_kernel(name),
                    "name": name,
                    "group": str(args.get("Process Group Name", args.get("stream", "default"))),
                    "seq": args.get("Seq", args.get("seq")),
                    "arrival_us": ts,
                    "end_us": end,
                    "source": "gpu",
                }
            )
        elif MEMORY_RE.match(name) or cat in ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset"):
            mem.append((ts, end))
        else:
            comp.append((ts, end))
    if not gpu:
        # CPU-only (gloo): the collective runs on the gloo worker thread as `gloo:<op>`; it starts when
        # this rank is ready (its enqueue has happened and the previous collective finished) and ends
        # when the data from the slowest peer arrived.
        for tid, ts, end, kind, args in sorted(gloo, key=lambda g: g[1]):
            collectives.append(
                {
                    "kind": kind,
                    "name": f"gloo:{kind}",
                    "group": str(args.get("Process Group Name", "default")),
                    "seq": args.get("Seq", args.get("seq")),
                    "arrival_us": ts,
                    "end_us": end,
                    "source": "cpu",
                }
            )

    def iv(lst):
        return Intervals([x[0] for x in lst], [x[1] for x in lst])

    return RankTimeline(
        main_tid=main_tid,
        steps=steps,
        host_all=host_all,
        host_ops=host_ops,
        host_data=host_data,
        gpu_compute=iv(comp),
        gpu_memory=iv(mem),
        gpu_comm=iv(comm),
        has_gpu=bool(gpu),
        collectives=collectives,
        memory_peak_bytes=mem_peak,
    )
