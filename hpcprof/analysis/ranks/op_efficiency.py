"""Operator efficiency of ONE rank: per GEMM, convolution and attention call recorded with its
shapes, FLOPs and bytes by formula (ranks/flop_formulas.py), its device time, achieved TFLOP/s
and TB/s and the share of the device's dense peak for its dtype (ranks/peaks.py); and the rank's
MFU over the profiled steps.

Rules (docs/analysis.md, "Operator efficiency"):
- the calls counted are `cpu_op` events named in flop_formulas.OPS that enclose no other such call
  on their thread (aten::linear -> aten::addmm counts the addmm once; a backward's aten::mm counts);
- a call's device time is the duration of the GPU kernels launched by the runtime calls inside it
  on its thread, linked by correlation id (cpu op -> runtime launch -> kernel);
- fp32 calls whose kernels' names say tf32 are compared with the tf32 peak, other fp32 calls with
  the fp32 (CUDA-core) peak;
- MFU: the counted calls started inside the profiled steps (ProfilerStep#N ranges), sum over them
  of FLOPs / the dtype's peak, over the steps' summed duration: the share of the step time the
  counted forward and backward operators would take at peak. Operators this module does not know
  (element-wise, normalisation, embedding...) and calls without shapes are not counted, so it is a
  lower bound of the model's FLOPs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .comm_kernels import Names, one_of
from .flop_formulas import OPS, call_cost
from .peaks import device_peak, dtype_peak

KERNEL_CATS = ("kernel", "Kernel")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
COLUMNS = ["kind", "op", "shape", "dtype", "calls", "flops_per_call", "bytes_per_call", "device_us", "device_us_per_call",
           "tflops", "tbps", "peak_tflops", "peak_pct", "bw_peak_pct", "reason"]
"""The per-rank table `op_efficiency` (one row per operator, input shapes and dtype)."""
NO_KERNELS = "no GPU kernels in the trace (CPU run): device time, TFLOP/s and share of peak need kernels"


def _num(s) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)


def _col(ev: pd.DataFrame, c: str) -> np.ndarray:
    return ev[c].to_numpy(dtype=object) if c in ev else np.full(len(ev), None, dtype=object)


def rank_device(ev: pd.DataFrame, kern: np.ndarray, device_properties: list) -> str | None:
    """The name of this rank's GPU: the deviceProperties entry whose id is the kernels' most common
    `device`, else the first entry."""
    props = [p for p in device_properties if isinstance(p, dict)]
    if not props:
        return None
    if "device" in ev and kern.size:
        d = pd.to_numeric(ev["device"].iloc[kern], errors="coerce").dropna()
        if len(d):
            dev = int(d.mode().iloc[0])
            hit = next((p for p in props if p.get("id") == dev), None)
            if hit is not None:
                return hit.get("name")
    return props[0].get("name")


def op_calls(ev: pd.DataFrame, names: Names, cats: Names) -> tuple[pd.DataFrame, bool]:
    """(one row per counted call: op, kind, ts, flops, bytes, dtype, shape, reason, device_us,
    tf32; whether the trace has GPU kernels)."""
    ph_x = (ev["ph"] == "X").to_numpy(dtype=bool) if "ph" in ev else np.zeros(len(ev), dtype=bool)
    ts, dur = _num(ev["ts"]), _num(ev["dur"])
    ok = ph_x & np.isfinite(ts) & np.isfinite(dur)
    kern = np.flatnonzero(ok & cats.where(one_of(KERNEL_CATS)))
    op_i = np.flatnonzero(ok & cats.where(lambda u: u == "cpu_op") & names.where(lambda u: u in OPS))
    if not op_i.size:
        return pd.DataFrame(), bool(kern.size)
    corr = _num(ev["correlation"]) if "correlation" in ev else np.full(len(ev), np.nan)
    rt = np.flatnonzero(ok & cats.where(one_of(RUNTIME_CATS)) & np.isfinite(corr)) if kern.size else np.empty(0, dtype=np.int64)
    # thread codes (equal texts, one thread) of the rows walked only: the operators and runtime calls
    rows = np.concatenate([op_i, rt])
    tid = np.full(len(ev), -1, dtype=np.int64)
    tid[rows] = pd.factorize(ev["tid"].iloc[rows].astype(str).to_numpy())[0]
    # innermost: sorted by (thread, start, longest first), a call encloses another iff the next one
    # on its thread starts before it ends
    o = op_i[np.lexsort((-dur[op_i], ts[op_i], tid[op_i]))]
    end = ts[o] + dur[o]
    encloses = np.zeros(o.size, dtype=bool)
    encloses[:-1] = (tid[o[1:]] == tid[o[:-1]]) & (ts[o[1:]] < end[:-1])
    o, end = o[~encloses], end[~encloses]

    dev_us = np.zeros(o.size)
    tf32 = np.zeros(o.size, dtype=bool)
    if kern.size:
        kname = names.take(kern)
        k_tf32 = kname.where(lambda u: isinstance(u, str) and "tf32" in u.lower())
        by_corr = pd.DataFrame({"c": corr[kern], "d": dur[kern], "t": k_tf32}).groupby("c").agg(d=("d", "sum"), t=("t", "max"))
        g = by_corr.reindex(corr[rt])
        rt_d, rt_t = g["d"].fillna(0.0).to_numpy(float), g["t"].fillna(False).to_numpy(bool)
        # per thread, the runtime calls in start order; a call's kernels are those of the runtime
        # calls starting in [ts, end) on its thread: prefix sums over one sorted key, thread * span +
        # time since the first event (exact enough: the span is far below 2**53 us)
        t0 = float(np.nanmin(ts[ok])) if ok.any() else 0.0
        span = float(np.nanmax(ts[ok] + dur[ok]) - t0) + 1.0 if ok.any() else 1.0
        key_rt = tid[rt] * span + (ts[rt] - t0)
        ro = np.argsort(key_rt, kind="stable")
        key_rt = key_rt[ro]
        cum_d = np.concatenate([[0.0], np.cumsum(rt_d[ro])])
        cum_t = np.concatenate([[0], np.cumsum(rt_t[ro].astype(np.int64))])
        lo = np.searchsorted(key_rt, tid[o] * span + (ts[o] - t0), side="left")
        hi = np.searchsorted(key_rt, tid[o] * span + (end - t0), side="left")
        dev_us = cum_d[hi] - cum_d[lo]
        tf32 = (cum_t[hi] - cum_t[lo]) > 0
    dims, types, conc = _col(ev, "input_dims")[o], _col(ev, "input_type")[o], _col(ev, "concrete_inputs")[o]
    opn = names.take(o).values()
    costs = [call_cost(n, d, t, c) for n, d, t, c in zip(opn, dims, types, conc)]
    df = pd.DataFrame({
        "op": opn, "kind": [c.kind for c in costs], "ts": ts[o],
        "flops": [c.flops for c in costs], "bytes": [c.bytes for c in costs], "dtype": [c.dtype for c in costs],
        "shape": [c.shape for c in costs], "reason": [c.reason for c in costs], "device_us": dev_us, "tf32": tf32,
    })
    df["flops"] = df["flops"].astype(float)
    df["bytes"] = df["bytes"].astype(float)
    return df, bool(kern.size)


def _peak_of(dtype: str | None, tf32: bool, peak, why: str | None) -> tuple[float | None, str | None]:
    return dtype_peak(peak, "tf32" if dtype == "fp32" and tf32 else dtype, why)


def rank_efficiency(ev: pd.DataFrame, names: Names, cats: Names, device_properties: list,
                    steps: list[tuple[int, float, float]]) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """(the table COLUMNS, meta.json `op_efficiency`), or an empty table and None when the trace has
    no operator of flop_formulas.OPS."""
    calls, has_kernels = op_calls(ev, names, cats)
    if calls.empty:
        return pd.DataFrame(columns=COLUMNS), None
    kern = np.flatnonzero(cats.where(one_of(KERNEL_CATS)))
    dev_name = rank_device(ev, kern, device_properties)
    peak, why = device_peak(dev_name)
    pk = [_peak_of(d, t, peak, why) for d, t in zip(calls["dtype"], calls["tf32"])]
    calls["peak_tflops"] = [p for p, _ in pk]
    calls["peak_why"] = [w for _, w in pk]
    calls["peak_key"] = np.where(calls["tf32"] & (calls["dtype"] == "fp32"), "tf32", calls["dtype"].astype(str))
    rows = []
    for (kind, op, shape, dtype, pkey), g in calls.groupby(["kind", "op", "shape", "dtype", "peak_key"], dropna=False, sort=True):
        n = len(g)
        fl, by, dus = g["flops"].iloc[0], g["bytes"].iloc[0], float(g["device_us"].sum())
        tflops = fl * n / (dus * 1e6) if has_kernels and dus > 0 and pd.notna(fl) else None
        tbps = by * n / (dus * 1e6) if has_kernels and dus > 0 and pd.notna(by) else None
        p = g["peak_tflops"].iloc[0]
        reason = g["reason"].iloc[0] or (NO_KERNELS if not has_kernels else None if dus > 0 else "no kernels linked to these calls")
        if reason is None and p is None:
            reason = g["peak_why"].iloc[0]
        bw = peak.tbps if peak is not None else None
        rows.append({"kind": kind, "op": op, "shape": shape, "dtype": pkey if dtype is not None else None, "calls": n,
                     "flops_per_call": fl, "bytes_per_call": by, "device_us": dus if has_kernels else None,
                     "device_us_per_call": dus / n if has_kernels else None, "tflops": tflops, "tbps": tbps,
                     "peak_tflops": p, "peak_pct": 100 * tflops / p if tflops is not None and p else None,
                     "bw_peak_pct": 100 * tbps / bw if tbps is not None and bw else None, "reason": reason})
    table = pd.DataFrame(rows, columns=COLUMNS).sort_values("device_us", ascending=False, na_position="last", ignore_index=True)
    return table, _summary(calls, has_kernels, dev_name, peak, why, steps)


def _summary(calls: pd.DataFrame, has_kernels: bool, dev_name, peak, why, steps) -> dict[str, Any]:
    known = calls[calls["flops"].notna()]
    reasons: dict[str, str] = {}
    out: dict[str, Any] = {
        "device_name": dev_name, "peak_source": peak.source if peak is not None else None,
        "peak_label": peak.label if peak is not None else None,
        "calls": int(len(calls)), "calls_with_flops": int(len(known)),
        "flops": float(known["flops"].sum()), "bytes": float(known["bytes"].sum()),
        "by_kind": {k: {"calls": int(len(g)), "flops": float(g["flops"].sum()),
                        "device_us": float(g["device_us"].sum()) if has_kernels else None,
                        "tflops": float(g["flops"].sum() / (g["device_us"].sum() * 1e6)) if has_kernels and g["device_us"].sum() > 0 else None}
                    for k, g in known.groupby("kind")},
        "mfu_counts": "forward and backward GEMM, convolution and attention operators seen in the trace with their shapes",
    }
    if len(known) < len(calls):
        miss = calls.loc[calls["flops"].isna(), "reason"].value_counts()
        out["calls_without_flops"] = {str(r): int(n) for r, n in miss.items()}
    dus = float(known["device_us"].sum())
    out["device_us"] = dus if has_kernels else None
    out["tflops"] = out["flops"] / (dus * 1e6) if has_kernels and dus > 0 else None
    if not has_kernels:
        reasons["tflops"] = reasons["device_us"] = NO_KERNELS
    elif out["tflops"] is None:
        reasons["tflops"] = "no counted call with known FLOPs has kernels linked to it"
    # MFU over the profiled steps
    out["steps"], out["step_time_us"], out["mfu_pct"], out["step_flops"] = len(steps), None, None, None
    if not has_kernels:
        reasons["mfu_pct"] = NO_KERNELS
    elif not steps:
        reasons["mfu_pct"] = "no profiled steps (ProfilerStep#N ranges) in the trace"
    elif peak is None:
        reasons["mfu_pct"] = why
    elif known.empty:  # nothing counted (no shapes recorded): MFU unknown, not 0
        reasons["mfu_pct"] = "no counted call has known FLOPs" + (
            f" ({', '.join(out['calls_without_flops'])})" if out.get("calls_without_flops") else
            " (no GEMM, convolution or attention operator in the profiled steps)")
    else:
        s0 = np.array([s[1] for s in steps])
        s1 = np.array([s[2] for s in steps])
        t = known["ts"].to_numpy(float)
        i = np.searchsorted(s0, t, side="right") - 1
        inside = (i >= 0) & (t < s1[np.maximum(i, 0)])
        sel = known[inside]
        pk = [_peak_of(d, f, peak, why)[0] for d, f in zip(sel["dtype"], sel["tf32"])]
        no_peak = sorted({str(d) for d, p in zip(sel["dtype"], pk) if p is None})
        step_us = float((s1 - s0).sum())
        out["step_time_us"], out["step_flops"] = step_us, float(sel["flops"].sum())
        if no_peak:
            reasons["mfu_pct"] = f"no {peak.label} peak for dtype {', '.join(no_peak)}"
        elif step_us > 0:
            at_peak_us = float(sum(f / (p * 1e6) for f, p in zip(sel["flops"], pk)))
            out["mfu_pct"] = 100 * at_peak_us / step_us
    out["null_reasons"] = reasons
    return out
