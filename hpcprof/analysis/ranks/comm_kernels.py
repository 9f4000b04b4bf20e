"""Which device kernels are communication, and why: by what the trace says, not only by their name.

HTA counts a kernel as communication when its name starts with `nccl` and holds `Kernel` (its
`NCCL_KERNEL_RE`). Current jobs also communicate through kernels with other names: PyTorch's
symmetric-memory collectives (`multimem_all_reduce_kernel`, one-shot and two-shot all-reduce),
DeepEP / NVSHMEM expert-parallel dispatch and combine, copy-engine collectives (peer-to-peer
memcpy). Analysed by name only, such a job shows 0% communication and no collective to match
across ranks, so the straggler analysis has nothing to work with.

The rules, in order (the first that applies gives the reason):
1. "name": HTA's rule (`^nccl.*Kernel`): HTA counts it as communication too.
2. "launched by <op>": the host-side collective that launched the kernel. A kernel's launch (the
   runtime call with the same correlation id) lies inside a host op of the launching thread that is
   a collective: `c10d::*`, `_c10d_functional::*`, `symm_mem::*`, `record_param_comms`, `nccl:*`
   (HOST_COMM_RE); or the kernel's own `External id` (where it differs from its correlation id,
   which older Kineto copies there) is that op's; or the kernel carries the collective's metadata
   itself (`Collective name`, which Kineto copies from `record_param_comms` since PyTorch 2.2).
   Not counted although launched inside a collective: PyTorch's own ATen kernels (the copies,
   casts and scaling before and after the transfer: `at::native::*`) and memory copies other than
   peer-to-peer ones (`Memcpy PtoP` is a copy-engine transfer and counts).
3. "name: <library>": kernels of known communication libraries (KNOWN_LIBRARIES: DeepEP, NVSHMEM,
   PyTorch symmetric memory, vLLM custom all-reduce), for jobs whose host side carries no
   annotation (DeepEP calls its kernels from C++ without a profiler range).

Each communication kernel also gets the collective's metadata where the trace has it (kernel args
first, then the `record_param_comms` op around its launch): the collective's name, process group,
per-group sequence number (`Seq`), `Comms Id`, message size (`In msg nelems` x dtype, else the
`nccl:*` annotation's input dims x type).

Used by the per-rank map (ranks/timeline.py: the collectives; hta/analyzers.py: our kernel
breakdown beside HTA's) and by the trace drills (hpcprof.drills.trace_drill), so a drill finds the
same collectives the analysis does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

NCCL_RE = re.compile(r"^nccl.*Kernel")  # HTA's NCCL_KERNEL_RE (hta.utils.utils)
HOST_COMM_RE = re.compile(r"^(?:c10d::|_c10d_functional::|c10d_functional::|symm_mem::|record_param_comms$|nccl:)")
"""Host ops that launch collectives (PyTorch's distributed ops and their profiler annotations)."""
API_RE = re.compile(r"^(?:c10d::|_c10d_functional::|c10d_functional::|symm_mem::)")
"""Of those, the operator a user called (named in the reason: "launched by c10d::allreduce_")."""
ATEN_RE = re.compile(r"(?:^|[\s(:])at::(?:native|cuda)::|^(?:void )?at::")
"""PyTorch's own kernels: pre- and post-processing of a collective, not its transfer."""
MEMORY_RE = re.compile(r"^(?:Memcpy|Memset|dma)")
PEER_COPY_RE = re.compile(r"PtoP|Peer", re.I)
KNOWN_LIBRARIES = (
    ("DeepEP", re.compile(r"deep_ep::|dpsk::ep::")),  # dpsk::ep: DeepSeek's own build (deepseek-ai/profile-data)
    ("NVSHMEM", re.compile(r"nvshmem", re.I)),
    ("PyTorch symmetric memory", re.compile(r"multimem_(?:one_shot_)?all_(?:reduce|gather)|one_shot_all_reduce|two_shot_all_reduce|symm_mem")),
    ("vLLM custom all-reduce", re.compile(r"cross_device_reduce")),
)
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
HOST_CATS = {"cpu_op", "user_annotation", "Operator"}
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "c10::half": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "byte": 1,
    "uint8": 1, "char": 1, "int8": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
COLUMNS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "correlation", "external_id", "coll_name", "pg_name",
           "seq_upper", "seq_lower", "comms_id", "in_nelems", "msg_dtype", "input_dims", "input_type")
"""The event-table columns the rules read (decode/events.py names them; `frame_from_events` builds them from dicts)."""
ARG_KEYS = {"correlation": "correlation", "external_id": "External id", "coll_name": "Collective name",
            "pg_name": "Process Group Name", "seq_upper": "Seq", "seq_lower": "seq", "comms_id": "Comms Id",
            "in_nelems": "In msg nelems", "msg_dtype": "dtype", "input_dims": "Input Dims", "input_type": "Input type"}


@dataclass
class CommKernels:
    """Per row of the event table: whether it is a communication kernel, why, and the collective's metadata."""

    mask: np.ndarray  # bool: communication kernel
    reason: np.ndarray  # object: "name", "launched by <op>", "name: <library>" (None where not communication)
    hta_comm: np.ndarray  # bool: HTA counts it as communication (its name rule)
    kind: np.ndarray  # object: the collective's name from the host side (None: unknown)
    group: np.ndarray  # object: process group name (None: unknown)
    seq: np.ndarray  # float: per-group sequence number (NaN: unknown)
    comms_id: np.ndarray  # object: Comms Id (None: unknown)
    msg_bytes: np.ndarray  # float: message size in bytes (NaN: unknown)

    def reclassified(self, names: np.ndarray, dur: np.ndarray) -> list[dict]:
        """Communication kernels HTA does not count as such, grouped by (short name, reason):
        name, kernel (a full name), count, time_us, reason; the largest time first."""
        idx = np.flatnonzero(self.mask & ~self.hta_comm)
        if not idx.size:
            return []
        df = pd.DataFrame({"name": [short_kernel_name(n) for n in names[idx]], "kernel": names[idx],
                           "reason": self.reason[idx], "dur": dur[idx]})
        g = df.groupby(["name", "reason"], sort=False)
        out = pd.DataFrame({"kernel": g["kernel"].first(), "count": g.size(), "time_us": g["dur"].sum()}).reset_index()
        return out.sort_values("time_us", ascending=False).to_dict("records")


def short_kernel_name(name: str) -> str:
    """A kernel's qualified function name without return type, anonymous namespaces, template and
    call arguments: "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(...)"
    -> "multimem_all_reduce_kernel"; "void deep_ep::intranode::dispatch<8, 768>(int4*, ...)" ->
    "deep_ep::intranode::dispatch"; NCCL's "ncclKernel_AllReduce_RING_LL_Sum_float(...)" without
    its arguments."""
    s = re.sub(r"^void\s+", "", str(name).strip())
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the first '<' or '(' at depth 0 ends the qualified name
        if ch in "<(" and depth == 0 and i > 0 and not s[:i].endswith("(anonymous namespace"):
            cut = i
            break
        depth += ch in "([<"
        depth -= ch in ")]>"
    base = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", s[:cut]).strip()
    return base or s


def _arr(ev: pd.DataFrame, col: str, n: int, numeric: bool = False) -> np.ndarray:
    if col not in ev:
        return np.full(n, np.nan) if numeric else np.full(n, None, dtype=object)
    return _values(ev[col], numeric)


def _values(c: pd.Series, numeric: bool) -> np.ndarray:
    if numeric:
        if c.dtype.kind in "if":
            return c.to_numpy(dtype=float)
        return pd.to_numeric(c.where(c.map(lambda v: not isinstance(v, bool))), errors="coerce").to_numpy(dtype=float)
    return c.to_numpy(dtype=object)


def _at(ev: pd.DataFrame, col: str, idx: np.ndarray, numeric: bool = False) -> np.ndarray:
    """Column `col` at row positions `idx` only (as `_arr` gives it for the whole column)."""
    if col not in ev:
        return np.full(idx.shape, np.nan) if numeric else np.full(idx.shape, None, dtype=object)
    return _values(ev[col].iloc[idx], numeric)


class Names:
    """A column of names factorized once (pd.factorize, missing values -1); each pattern is evaluated
    once per distinct name. The map factorizes the name and category columns once for all its
    stages (ranks/mapper.py)."""

    def __init__(self, values, codes: np.ndarray | None = None, uniq: np.ndarray | None = None):
        self.per_row = False
        if codes is None:
            try:
                codes, uniq = pd.factorize(pd.Series(values, dtype=object) if isinstance(values, np.ndarray) else values,
                                           use_na_sentinel=True)
            except TypeError:  # a value that cannot be hashed (a list in a hostile trace): each row its own value
                uniq = np.asarray(values, dtype=object)
                codes = np.arange(uniq.size)
                self.per_row = True
        self.codes, self.uniq = codes, np.asarray(uniq, dtype=object)

    @classmethod
    def column(cls, ev: pd.DataFrame, col: str, n: int) -> "Names":
        """Column `col` of the event table factorized (all missing where the table has no such column)."""
        if col not in ev:
            return cls(None, np.full(n, -1, dtype=np.intp), np.empty(0, dtype=object))
        return cls(ev[col])

    def take(self, rows: np.ndarray) -> "Names":
        return Names(None, self.codes[rows], self.uniq)

    def values(self) -> np.ndarray:
        """The column as an object array whose texts are the distinct values' objects (no new Python
        string per event); a missing value is None."""
        return np.append(self.uniq, None)[self.codes]

    def where(self, pred) -> np.ndarray:
        """pred(value) per row, evaluated once per distinct value (False where missing)."""
        hit = np.array([bool(pred(u)) for u in self.uniq] + [False], dtype=bool)
        return hit[self.codes]  # code -1 (missing) picks the trailing False

    def test(self, rx: re.Pattern, search: bool = False) -> np.ndarray:
        f = rx.search if search else rx.match
        return self.where(lambda u: isinstance(u, str) and f(u))


def _thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Codes of the texts f"{pid}|{tid}" (one thread per text) in order of first appearance, made
    per distinct (pid, tid) pair where the ids are ints and texts only (a factorization holds 1, 1.0
    and True for one value: three texts), else per row (a text made per event only where needed)."""
    if not set(map(type, pid)) | set(map(type, tid)) <= {str, int}:
        return pd.factorize(pd.Series([f"{p}|{t}" for p, t in zip(pid, tid)], dtype=object))[0]
    (pc, pu), (tc, tu) = pd.factorize(pid), pd.factorize(tid)
    pair, first = pd.factorize(pc * len(tu) + tc)
    texts = pd.Series([f"{pu[k // len(tu)]}|{tu[k % len(tu)]}" for k in first], dtype=object)
    return pd.factorize(texts)[0][pair]


def _containing(op_rows: np.ndarray, op_thread: np.ndarray, ts: np.ndarray, end: np.ndarray,
                q_t: np.ndarray, q_thread: np.ndarray) -> np.ndarray:
    """For each query instant q_t on thread q_thread: the row (of `op_rows`) of an op on the same
    thread whose span contains it, or -1. Of nested candidates, the one that ends last (the
    outermost of a nest)."""
    out = np.full(q_t.shape, -1, dtype=np.int64)
    if not op_rows.size or not q_t.size:
        return out
    for th in np.intersect1d(np.unique(op_thread), np.unique(q_thread)):
        sel = op_rows[op_thread == th]
        sel = sel[np.argsort(ts[sel], kind="stable")]
        s, e = ts[sel], end[sel]
        run_end = np.maximum.accumulate(e)
        # the index holding the running maximum of the ends
        run_arg = np.maximum.accumulate(np.where(e >= run_end, np.arange(sel.size), 0))
        qi = np.flatnonzero(q_thread == th)
        j = np.searchsorted(s, q_t[qi], side="right") - 1
        ok = (j >= 0) & (run_end[np.maximum(j, 0)] >= q_t[qi])
        out[qi[ok]] = sel[run_arg[j[ok]]]
    return out


def _known(*cols: np.ndarray) -> np.ndarray:
    """Element-wise the first value that is not None/NaN."""
    out = np.array(cols[0], dtype=object, copy=True)
    for c in cols[1:]:
        miss = pd.isna(out)
        out[miss] = np.asarray(c, dtype=object)[miss]
    return out


def _bytes_from_dims(dims, types) -> float:
    """Message size from an annotation's Input Dims [[n, ...]] and Input type ["float"] (NaN unknown)."""
    try:
        size = DTYPE_BYTES.get(str(types[0]).strip().lower())
        shape = dims[0]
        if size is None or not isinstance(shape, (list, tuple)) or not shape:
            return np.nan
        return float(np.prod([int(x) for x in shape])) * size
    except (TypeError, ValueError, IndexError, KeyError):
        return np.nan


def one_of(values) -> "callable":
    """A test for "the value is one of these texts" (an element of a list, as pandas' isin tests it)."""
    allowed = frozenset(values)
    return lambda u: isinstance(u, str) and u in allowed


def classify(ev: pd.DataFrame, device: np.ndarray, names: "Names | None" = None, cats: "Names | None" = None) -> CommKernels:
    """The rules of the module docstring on an event table (decode/columns.event_table, or
    `frame_from_events`); `device`: the rows that are device activity (kernels, copies); `names`,
    `cats`: the table's name and category columns factorized, where the caller has them already.

    The text columns (ph, cat, name) are tested once per distinct value, and names are kept as the
    distinct values' objects: no Python string per event (a 20.5 MB rank: 81,000 events, 300 names)."""
    n = len(ev)
    if not np.asarray(device, dtype=bool).any():  # a CPU-only trace: no kernel to classify
        none, nan = np.full(n, None, dtype=object), np.full(n, np.nan)
        return CommKernels(mask=np.zeros(n, dtype=bool), reason=none, hta_comm=np.zeros(n, dtype=bool), kind=none,
                           group=none, seq=nan, comms_id=none, msg_bytes=nan)
    ts = _arr(ev, "ts", n, numeric=True)
    end = ts + _arr(ev, "dur", n, numeric=True)
    corr = _arr(ev, "correlation", n, numeric=True)
    ext = _arr(ev, "external_id", n, numeric=True)
    names = names if names is not None else Names.column(ev, "name", n)
    name = names.values()
    cats = cats if cats is not None else Names.column(ev, "cat", n)
    complete = Names.column(ev, "ph", n).where(lambda u: u == "X") & np.isfinite(ts) & np.isfinite(end)
    device = np.asarray(device, dtype=bool) & complete

    is_memory = device & (names.test(MEMORY_RE) | cats.where(one_of(["gpu_memcpy", "Memcpy", "gpu_memset", "Memset"])))
    hta_comm = device & names.test(NCCL_RE)
    host = complete & ~device & cats.where(one_of(HOST_CATS))
    comm_op = host & names.test(HOST_COMM_RE)
    api = comm_op & names.test(API_RE)
    rpc = comm_op & names.where(lambda u: u == "record_param_comms")
    ann = comm_op & names.test(re.compile(r"^nccl:"))
    runtime = complete & ~device & cats.where(one_of(RUNTIME_CATS)) & np.isfinite(corr) & (corr >= 0)

    # threads of the rows that need one (comm ops, launches), as small integers
    need = np.flatnonzero(comm_op | runtime)
    pid, tid = _arr(ev, "pid", n), _arr(ev, "tid", n)
    thread = np.full(n, -1, dtype=np.int64)
    thread[need] = _thread_ids(pid[need], tid[need])

    # the launch of each device op: the host-side runtime call with its correlation id
    dev_rows = np.flatnonzero(device)
    launch_row = pd.Series(np.flatnonzero(runtime), index=corr[runtime]).groupby(level=0).first()
    lr = launch_row.reindex(corr[dev_rows]).to_numpy()
    has_launch = ~np.isnan(lr)
    lr = lr[has_launch].astype(np.int64)

    def around(mask: np.ndarray) -> np.ndarray:  # per device row: the op of `mask` around its launch (-1: none)
        out = np.full(dev_rows.size, -1, dtype=np.int64)
        rows = np.flatnonzero(mask)
        out[has_launch] = _containing(rows, thread[rows], ts, end, ts[lr], thread[lr])
        return out

    by_op = around(comm_op)
    # External id link (where it is not a copy of the correlation id, as older Kineto wrote)
    ext_dev = ext[dev_rows]
    by_ext = np.full(dev_rows.size, -1, dtype=np.int64)
    own_ext = np.isfinite(ext_dev) & (ext_dev >= 0) & (ext_dev != corr[dev_rows])
    if own_ext.any() and comm_op.any():
        ext_of_op = pd.Series(np.flatnonzero(comm_op), index=ext[comm_op]).groupby(level=0).first()
        hit = ext_of_op.reindex(ext_dev[own_ext]).to_numpy()
        by_ext[own_ext] = np.where(np.isnan(hit), -1, hit).astype(np.int64)
    coll_name = _arr(ev, "coll_name", n)[dev_rows]
    carries = Names(coll_name).where(lambda v: isinstance(v, str) and v not in ("", "wait", "barrier"))

    dev_names = names.take(dev_rows)
    aten = dev_names.test(ATEN_RE, search=True)
    mem = is_memory[dev_rows]
    peer = dev_names.test(PEER_COPY_RE, search=True)
    link_ok = ((by_op >= 0) | (by_ext >= 0) | carries) & ~aten & (~mem | peer)
    lib = np.full(dev_rows.size, None, dtype=object)
    for label, rx in KNOWN_LIBRARIES:
        lib[dev_names.test(rx, search=True) & pd.isna(lib) & ~mem] = label

    r = np.full(dev_rows.size, None, dtype=object)
    by_lib = ~link_ok & ~pd.isna(lib)
    r[by_lib] = ["name: " + x for x in lib[by_lib]]
    if link_ok.any():
        by_api = around(api)
        op = np.where(by_api >= 0, by_api, np.where(by_op >= 0, by_op, by_ext))
        # one text per distinct launching op's name (op: rows of host ops, whose names are texts)
        said = np.array([f"launched by {u}" for u in names.uniq] + ["carries a Collective name"], dtype=object)
        o = op[link_ok]
        r[link_ok] = said[np.where(o >= 0, names.codes[np.maximum(o, 0)], -1)]
    r[hta_comm[dev_rows]] = "name"
    is_c = ~pd.isna(r)
    reason = np.full(n, None, dtype=object)
    reason[dev_rows] = r
    mask = np.zeros(n, dtype=bool)
    mask[dev_rows[is_c]] = True

    # the collective's metadata, for the communication kernels: the kernel's own args, then the
    # record_param_comms op around its launch (or named by its External id)
    rows = dev_rows[is_c]
    by_rpc, by_ann, by_api2 = (around(m)[is_c] for m in (rpc, ann, api))
    bext = by_ext[is_c]
    rpc_row = np.where(by_rpc >= 0, by_rpc, np.where((bext >= 0) & rpc[np.maximum(bext, 0)], bext, -1))

    def meta(col: str, numeric: bool = False) -> np.ndarray:
        own, via = np.split(_at(ev, col, np.concatenate([rows, np.maximum(rpc_row, 0)]), numeric), [rows.size])
        if numeric:
            return np.where(np.isnan(own) & (rpc_row >= 0), via, own)
        return _known(own, np.where(rpc_row >= 0, via, None))

    ann_kind = np.array([name[a][len("nccl:"):] if a >= 0 else None for a in by_ann], dtype=object)
    api_kind = np.array([re.sub(r"^.*::|_$", "", name[a]) if a >= 0 else None for a in by_api2], dtype=object)
    kind = _known(meta("coll_name"), ann_kind, api_kind)
    seq = meta("seq_upper", numeric=True)
    seq = np.where(np.isnan(seq), meta("seq_lower", numeric=True), seq)
    size = np.array([DTYPE_BYTES.get(str(d).strip().lower(), np.nan) if d is not None else np.nan for d in meta("msg_dtype")], dtype=float)
    msg = meta("in_nelems", numeric=True) * size
    if "input_dims" in ev and "input_type" in ev:
        sized = np.flatnonzero(np.isnan(msg) & (by_ann >= 0))
        dims, types = (ev[c].iloc[by_ann[sized]].tolist() for c in ("input_dims", "input_type"))
        msg[sized] = [_bytes_from_dims(d, t) for d, t in zip(dims, types)]

    def full(v: np.ndarray, numeric: bool = False) -> np.ndarray:
        out = np.full(n, np.nan) if numeric else np.full(n, None, dtype=object)
        out[rows] = v
        return out

    return CommKernels(mask=mask, reason=reason, hta_comm=hta_comm, kind=full(kind), group=full(meta("pg_name")),
                       seq=full(seq, numeric=True), comms_id=full(meta("comms_id")), msg_bytes=full(msg, numeric=True))


def frame_from_events(events: list) -> pd.DataFrame:
    """The COLUMNS of `classify` from Chrome-trace event dicts (the trace drills read traces as dicts)."""
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for e in events:
        ok = isinstance(e, dict)
        a = (e.get("args") if ok else None) or {}
        a = a if isinstance(a, dict) else {}
        for c in ("ph", "cat", "name", "ts", "dur", "pid", "tid"):
            cols[c].append(e.get(c) if ok else None)
        for c, k in ARG_KEYS.items():
            cols[c].append(a.get(k))
    return pd.DataFrame({c: pd.Series(v, dtype=object) for c, v in cols.items()})
