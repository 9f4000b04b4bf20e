"""Per-rank timeline built from one trace's event table: main host thread, GPU activity, collectives.

The straggler cause needs to know what a rank did in a time window (waiting for data, CPU work,
un-annotated host gaps, GPU compute, memory copies). We precompute merged interval sets once per
rank (:mod:`.intervals`) so any window can be measured with two binary searches; whether the main
thread sat blocked in a CPU collective is :mod:`.waits`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .categories import STEP_CATEGORIES, CategoryClock
from .comm_kernels import Names, classify, one_of, short_kernel_name
from .control import control_events
from ..intervals import Intervals
from .waits import main_waited

from ...rundir.records import REGION_DATA

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
DATA_RE = re.compile(rf"(^{re.escape(REGION_DATA)}$)|DataLoader|dataloader")
"""Data loading: hpcprof's own data region (hpcprof.rundir.records), or a DataLoader's events."""
MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "Operator", "cpu_instant_event"}
GLOO_RE = re.compile(r"^gloo:(.+)$")
C10D_RE = re.compile(r"^c10d::")
CATEGORIES = STEP_CATEGORIES
"""What a rank spent a time window on (RankTimeline.window's keys): the per-step and per-window
columns of the map's tables. Defined in ranks/categories.py, with the straggler causes (these + comm)."""


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
    device_kind: str = "cpu"
    """"cuda" (CUDA/ROCm kernel categories), "accelerator" (device-stream activity without them, e.g. MTIA), "cpu"."""
    collectives: list[dict] = field(default_factory=list)
    # host launch time of each device op (NaN: unknown)
    device_launch: np.ndarray = field(default_factory=lambda: np.empty(0))
    device_end: np.ndarray = field(default_factory=lambda: np.empty(0))  # its end
    comm_host: "Intervals | None" = None  # CPU ranks: gloo ops in flight (any thread)
    comm_reclassified: list = field(default_factory=list)
    """Communication kernels HTA does not count as such (ranks/comm_kernels.py), by name and reason."""
    comm_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Per event of the table: a communication kernel (ranks/comm_kernels.py), for the other per-rank
    tables that leave communication out (ranks/kernel_work.py) without classifying again."""
    comm_extra_corr: frozenset = frozenset()
    """Their correlation ids: the kernels whose HTA kernel type our breakdown changes to COMMUNICATION."""
    control_collectives: int = 0  # hpcprof's own, issued in the trace (ranks/control.py): never in `collectives`
    control_left_out: int = 0  # the gloo:<op> events of its groups' worker threads, left out of `collectives`

    def category_clock(self) -> CategoryClock:
        """The partition of this rank's time into CAUSE_CATEGORIES (see CategoryClock)."""
        idle_host = [("data_loading", self.host_data), ("cpu_work", self.host_all)]
        if self.has_gpu:
            layers = [("gpu_compute", self.gpu_compute), ("memcpy", self.gpu_memory), ("comm", self.gpu_comm)]
            layers += idle_host
        else:
            layers = idle_host + [("comm", self.comm_host if self.comm_host is not None else Intervals([], []))]
        return CategoryClock(layers, "host_gap")

    def device_end_in(self, a, b) -> np.ndarray:
        """Per window [a, b): the latest end of the device work launched in it (NaN if none)."""
        a, b = np.atleast_1d(np.asarray(a, dtype=float)), np.atleast_1d(np.asarray(b, dtype=float))
        out = np.full(a.shape, np.nan)
        ok = ~np.isnan(self.device_launch)
        L, E = self.device_launch[ok], self.device_end[ok]
        for i, (lo, hi) in enumerate(zip(a, b)):
            m = (L >= lo) & (L <= hi)
            if m.any():
                out[i] = E[m].max()
        return out

    def busy(self) -> "Intervals":
        """When this rank is doing useful work: GPU compute/memcpy kernels on a GPU rank, main-thread
        operators on a CPU-only rank. Waiting in a collective outside these intervals is blocked time."""
        if self.has_gpu:
            return Intervals(np.concatenate([self.gpu_compute.s, self.gpu_memory.s]),
                             np.concatenate([self.gpu_compute.e, self.gpu_memory.e]))
        return self.host_ops

    def window(self, a, b) -> dict[str, np.ndarray]:
        """Time in each of CATEGORIES within [a, b) (vectorised over a, b)."""
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


def _equals(values: np.ndarray, v) -> np.ndarray:
    """values == v element-wise, as Python's == (an int 5 equals 5.0, never "5"), tested once per
    distinct value (None or a float: every value, as missing values are one in the factorization).
    Missing values (code -1) equal no such v: the factorization need not test every value for
    being missing first, as use_na_sentinel=False would (a pass over every value of the column)."""
    try:
        if v is None or isinstance(v, float):
            raise TypeError
        codes, uniq = pd.factorize(values)
    except TypeError:  # also a value that cannot be hashed (a list as tid in a hostile trace)
        return np.array([t == v for t in values], dtype=bool)
    return np.array([u == v for u in uniq] + [False], dtype=bool)[codes]


def _numeric(col: pd.Series) -> np.ndarray:
    """A column's values as floats: NaN where missing or not a number (booleans are not numbers)."""
    if col.dtype.kind in "if":
        return col.to_numpy(dtype=float)
    return pd.to_numeric(col.where(col.map(lambda v: not isinstance(v, bool))), errors="coerce").to_numpy(dtype=float)


GPU_DRIVING = re.compile(r"^(cuda|cu|hip)(LaunchKernel|LaunchCooperativeKernel|MemcpyAsync|Memcpy|GraphLaunch)")
"""Runtime calls that only a process driving a GPU makes."""


def _drives_a_gpu(name: pd.Series, cat: pd.Series) -> bool:
    """Whether a trace without GPU activity events still comes from a GPU run: it launches kernels
    (cudaLaunchKernel, hipLaunchKernel...) or holds CUPTI profiler ranges (`cuda_profiler_range`:
    per-kernel counters, taken instead of the activity trace). Why: hta_tests/cupti_profiler, an A100
    trace with 77 cudaLaunchKernel calls, was reported as "CPU-only run, e.g. gloo backend"
    (issue 23, item 12)."""
    runtime = cat.isin(["cuda_runtime", "cuda_driver", "hip_runtime"]).to_numpy()
    if (cat == "cuda_profiler_range").any():
        return True
    return bool(runtime.any() and name[runtime].map(lambda v: isinstance(v, str) and bool(GPU_DRIVING.match(v))).any())


def build_timeline(ev: pd.DataFrame, names: Names | None = None, cats: Names | None = None) -> RankTimeline:
    """Timeline of one rank from its event table (hpcprof.analysis.decode.columns).

    Complete events (`ph` X) with a name and a numeric `ts` and `dur` are used: GPU categories as
    GPU activity, host categories on the main thread (the thread holding most ProfilerStep#N
    regions) as host activity; `gloo:<op>` host events are the CPU collectives. (The GPU memory
    peak is the memory view's: ranks/memory_view.gpu_peak_bytes.)
    `names`, `cats`: the name and category columns factorized (Names.column), where the caller has them.
    """
    n = len(ev)

    def col(key: str, missing=None) -> pd.Series:  # the default made only where the column is absent
        return ev[key] if key in ev else pd.Series([missing] * n)

    ph, name, cat = col("ph"), col("name"), col("cat")

    ts = _numeric(col("ts", np.nan))
    dur = _numeric(col("dur", np.nan))
    # names and categories factorized once: each test runs on the distinct values, and no Python
    # string is made per event (one per event would be a large part of the rank's peak memory)
    nm = names if names is not None else Names.column(ev, "name", n)
    cn = cats if cats is not None else Names.column(ev, "cat", n)
    is_str = nm.where(lambda v: isinstance(v, str)) if name.dtype == object else name.notna().to_numpy()
    x = (ph == "X").to_numpy() & is_str & np.isfinite(ts) & np.isfinite(dur)
    end = ts + dur
    is_gpu = x & cn.where(one_of(GPU_CATS))
    device_kind = "cuda" if is_gpu.any() else "cpu"
    if not is_gpu.any() and "stream" in ev:
        # Other accelerators (MTIA...) have no CUDA event categories: as HTA does (stream != -1),
        # an event on a device stream is device activity, classified by name like a kernel.
        stream_v = pd.to_numeric(ev["stream"], errors="coerce").to_numpy(dtype=float)
        is_gpu = x & (stream_v >= 0) & ~cn.where(one_of(HOST_CATS))
        device_kind = "accelerator" if is_gpu.any() else "cpu"
    if device_kind == "cpu" and _drives_a_gpu(name, cat):
        device_kind = "cuda"  # kernels launched, their activity not traced: a GPU run all the same
    is_host = x & cn.where(one_of(HOST_CATS))

    tid = col("tid").to_numpy(dtype=object)
    is_step = is_host & nm.test(STEP_RE)
    others = is_host & ~is_step
    is_gloo = others & nm.test(GLOO_RE)
    is_control, control_gloo = control_events(nm, others, is_gloo, tid)  # hpcprof's own collectives
    is_gloo &= ~control_gloo  # are not the job's: left out of every collective analysis

    names = nm.values()
    step_ev: dict = {}
    for i in np.flatnonzero(is_step):
        step_ev.setdefault(tid[i], []).append((int(STEP_RE.match(names[i]).group(1)), float(ts[i]), float(end[i])))
    if step_ev:
        main_tid = max(step_ev, key=lambda t: len(step_ev[t]))
        steps = sorted(step_ev[main_tid])
    else:
        tid_count: dict = {}
        for t in tid[others]:
            tid_count[t] = tid_count.get(t, 0) + 1
        main_tid = max(tid_count, key=tid_count.get) if tid_count else None
        steps = []

    main = others & ~is_gloo & _equals(tid, main_tid)
    host_all = Intervals(ts[main], end[main])
    ops = main & cn.where(lambda v: v == "cpu_op")
    host_ops = Intervals(ts[ops], end[ops])
    computing = ops & ~nm.test(C10D_RE)
    data = main & nm.test(DATA_RE, search=True)
    host_data = Intervals(ts[data], end[data])

    # communication kernels by what the trace says (ranks/comm_kernels.py): HTA's name rule, the
    # host-side collective that launched a kernel, known communication libraries
    ck = classify(ev, is_gpu, names=nm, cats=cn)
    comm = is_gpu & ck.mask
    memory = is_gpu & ~comm & (nm.test(MEMORY_RE) | cn.where(one_of(["gpu_memcpy", "Memcpy", "gpu_memset", "Memset"])))
    comp = is_gpu & ~comm & ~memory

    # the args the collectives read, once as arrays (not one column lookup per collective)
    pg_names = ev["pg_name"].to_numpy(dtype=object)
    seq_up, seq_lo = ev["seq_upper"].to_numpy(dtype=object), ev["seq_lower"].to_numpy(dtype=object)

    def group(i: int, fallback: str) -> str:
        pg = pg_names[i]
        if pg is None:
            pg = ck.group[i]  # the process group of the collective that launched it
        if pg is not None and not (isinstance(pg, float) and np.isnan(pg)):
            return str(pg)
        return str(fallback)

    def seq(i: int):
        v = seq_up[i]
        v = v if v is not None else seq_lo[i]
        return v if v is not None else (None if np.isnan(ck.seq[i]) else ck.seq[i])

    def comm_kind(i: int) -> str:
        """NCCL kernels: the function in their name (as before); other communication kernels: the
        collective that launched them (Collective name, nccl:<op>, c10d::<op>), else their name."""
        if ck.hta_comm[i] or not isinstance(ck.kind[i], str):
            return _coll_kind_from_kernel(names[i]) if ck.hta_comm[i] else short_kernel_name(names[i])
        return ck.kind[i]

    # host launch time of each device op, by correlation id (cudaLaunchKernel & co. carry the same id)
    corr = _numeric(col("correlation", np.nan))
    # (the first host event with the id, in trace order)
    host_corr = x & ~is_gpu & np.isfinite(corr) & (corr >= 0)
    ids, first = np.unique(corr[host_corr], return_index=True)  # first: where each id first occurs
    gpu_idx = np.flatnonzero(is_gpu)
    g_corr = corr[gpu_idx]
    at = np.minimum(np.searchsorted(ids, g_corr), max(ids.size - 1, 0))
    found = (ids[at] == g_corr) if ids.size else np.zeros(gpu_idx.size, dtype=bool)
    dev_launch = np.where(found, ts[host_corr][first[at]] if ids.size else np.nan, np.nan)
    launch_by_row = np.full(n, np.nan)
    launch_by_row[gpu_idx] = dev_launch

    collectives = []
    comm_rows = np.flatnonzero(comm)
    has_args = ev["has_args"].to_numpy(dtype=bool)
    # the stream of the communication kernels only (not a Python int per event)
    for i, stream in zip(comm_rows, ev["stream"].iloc[comm_rows].to_numpy(dtype=object)):
        collectives.append(
            {
                "kind": comm_kind(i),
                "name": names[i],
                "group": group(i, stream if has_args[i] else "default"),
                "seq": seq(i),
                "comms_id": ck.comms_id[i],
                "msg_bytes": float(ck.msg_bytes[i]),
                "comm_reason": ck.reason[i],
                "arrival_us": float(ts[i]),
                "end_us": float(end[i]),
                "launch_us": float(launch_by_row[i]),
                "source": "gpu",
                "waited": True,  # a stream runs its NCCL kernels one after the other
            }
        )
    if not is_gpu.any():
        # CPU-only (gloo): the collective runs on the gloo worker thread as `gloo:<op>`; it starts when
        # this rank is ready (its enqueue has happened and the previous collective finished) and ends
        # when the data from the slowest peer arrived.
        idx = np.flatnonzero(is_gloo)
        waited = np.zeros(n, dtype=bool)
        waited[idx] = main_waited(ts[computing], end[computing], end[idx], ts[idx])
        for i in idx[np.argsort(ts[idx], kind="stable")]:
            kind = GLOO_RE.match(names[i]).group(1)
            collectives.append(
                {
                    "kind": kind,
                    "name": f"gloo:{kind}",
                    "group": group(i, "default"),
                    "seq": seq(i),
                    "arrival_us": float(ts[i]),
                    "end_us": float(end[i]),
                    "launch_us": np.nan,
                    "source": "cpu",
                    "waited": bool(waited[i]),
                }
            )

    return RankTimeline(
        main_tid=main_tid,
        steps=steps,
        host_all=host_all,
        host_ops=host_ops,
        host_data=host_data,
        gpu_compute=Intervals(ts[comp], end[comp]),
        gpu_memory=Intervals(ts[memory], end[memory]),
        gpu_comm=Intervals(ts[comm], end[comm]),
        has_gpu=bool(is_gpu.any()),
        device_kind=device_kind,
        collectives=collectives,
        device_launch=dev_launch,
        device_end=end[gpu_idx].astype(float),
        comm_host=Intervals(ts[is_gloo], end[is_gloo]) if not is_gpu.any() else None,
        comm_reclassified=ck.reclassified(names, dur),
        comm_rows=comm,
        comm_extra_corr=frozenset(corr[comm & ~ck.hta_comm & np.isfinite(corr)].tolist()),
        control_collectives=int(is_control.sum()),
        control_left_out=int(control_gloo.sum()),
    )
