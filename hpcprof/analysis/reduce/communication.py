"""The job's communication in one object (summary.json `communication`): how much GPU time it takes
by HTA's rule and by ours, which kernels we count that HTA does not (and why), and how the time in
collectives splits into transfer and waiting for the last arrival.

Why both numbers: HTA's kernel-name rule (`nccl*Kernel`) is the reference the per-rank numbers are
checked against, so its numbers stay, labelled as HTA's; where the trace shows communication HTA's
rule misses (ranks/comm_kernels.py: kernels launched by a host collective, known communication
libraries), ours are given beside them with the reason, one line per kernel family.

Why the split: a collective kernel starts when its rank arrives and ends when the data of the last
rank has moved, so its time is the rank's wait for the last arrival plus the transfer. Only the
transfer is what faster links, bigger buckets or fewer collectives shorten; the waiting is the
late ranks' (the what-if replay, reduce/whatif.py, measures both per rank and collective).
"""

from __future__ import annotations

import pandas as pd

from .kernels import kernel_breakdown

RULE = ("HTA: kernel name nccl*Kernel; hpcprof: also kernels launched by a host-side collective (c10d::*, "
        "_c10d_functional::*, symm_mem::*, record_param_comms, nccl:* around the launch, or the same External id), "
        "kernels carrying a Collective name, and known communication libraries by name (DeepEP, NVSHMEM, "
        "PyTorch symmetric memory, vLLM custom all-reduce)")


def _has(kernel_type: pd.Series, kind: str) -> pd.Series:
    """Which kernel-type labels ("A", "A overlapping B", ...) include `kind`, wherever it stands
    (HTA orders the kinds of a label as they first appear in the rank's frame)."""
    return kernel_type.map(lambda t: kind in str(t).split(" overlapping "))


def comm_share_pct(kernel_type: pd.DataFrame) -> float | None:
    """Share (%) of GPU kernel time during which a communication kernel runs, alone or beside other
    kernels, from a kernel-type table (kernel_type, sum); None without kernel time. Why every label
    that holds COMMUNICATION: "COMPUTATION overlapping COMMUNICATION" was left out (only labels
    starting with COMMUNICATION counted), so the headline gave the part not overlapped with
    compute, 83.9% of DLRM's GPU time where communication runs 86.8% of it (issue 37, item 7)."""
    if kernel_type is None or kernel_type.empty:
        return None
    tot = float(kernel_type["sum"].sum())
    comm = float(kernel_type.loc[_has(kernel_type["kernel_type"], "COMMUNICATION"), "sum"].sum())
    return 100 * comm / tot if tot else None


def comm_overlapped_pct(kernel_type: pd.DataFrame) -> float | None:
    """Share (%) of the communication time (comm_share_pct's) during which a computation kernel runs
    too; None without communication."""
    if kernel_type is None or kernel_type.empty:
        return None
    kt = kernel_type["kernel_type"]
    comm = _has(kt, "COMMUNICATION")
    total = float(kernel_type.loc[comm, "sum"].sum())
    both = float(kernel_type.loc[comm & _has(kt, "COMPUTATION"), "sum"].sum())
    return 100 * both / total if total else None


def ours_kernel_types(ktype: pd.DataFrame, ktype_ours: pd.DataFrame) -> pd.DataFrame:
    """Per-rank kernel-type times with our classes: a rank's own table where it has one (it had
    kernels HTA's rule misses), else HTA's, which is then ours too."""
    if ktype_ours is None or ktype_ours.empty:
        return ktype
    if ktype is None or ktype.empty:
        return ktype_ours
    return pd.concat([ktype[~ktype["rank"].isin(set(ktype_ours["rank"]))], ktype_ours], ignore_index=True)


def reclassified(metas: dict[int, dict]) -> list[dict]:
    """The kernels counted as communication that HTA does not count, over the ranks: name, reason,
    ranks, count, time_us, kernel (one full name), note (one line); the largest time first."""
    rows = [{**x, "rank": r} for r, m in metas.items() for x in (m.get("comm_reclassified") or [])]
    if not rows:
        return []
    df = pd.DataFrame(rows)
    g = df.groupby(["name", "reason"], sort=False)
    out = pd.DataFrame({"kernel": g["kernel"].first(), "count": g["count"].sum(), "time_us": g["time_us"].sum(),
                        "ranks": g["rank"].agg(lambda s: sorted({int(x) for x in s}))}).reset_index()
    out = out.sort_values("time_us", ascending=False)
    res = []
    for x in out.to_dict("records"):
        why = x["reason"]
        why = f"named as a {why[len('name: '):]} kernel" if why.startswith("name: ") else why
        x["note"] = (f"{x['count']} {x['name']} kernel{'s' if x['count'] != 1 else ''} counted as communication "
                     f"({x['time_us'] / 1e3:.2f} ms on {len(x['ranks'])} rank{'s' if len(x['ranks']) != 1 else ''}): {why}")
        res.append({k: x[k] for k in ("name", "reason", "ranks", "count", "time_us", "kernel", "note")})
    return res


def communication(metas: dict[int, dict], ktype: pd.DataFrame, ktype_ours: pd.DataFrame, wi, device: str) -> dict:
    """summary.json `communication` (docs/summary-json.md); `wi`: the what-if result (reduce/whatif.WhatIf)."""
    gpu = device != "cpu"
    ours = ours_kernel_types(ktype, ktype_ours)
    share_hta = comm_share_pct(ktype) if gpu else None
    share = comm_share_pct(ours) if gpu else None
    out: dict = {
        "rule": RULE if gpu else "CPU ranks: gloo:<op> events (the gloo worker thread)",
        "share_pct": share,
        "overlapped_pct": comm_overlapped_pct(ours) if gpu else None,
        "hta_share_pct": share_hta,
        "differs": bool(gpu and share is not None and (share_hta is None or abs(share - share_hta) >= 0.005)),
        "reclassified": reclassified(metas) if gpu else [],
        "kernel_breakdown": [{"kernel_type": k, "time_us": float(t), "pct": float(p)}
                             for k, t, p in kernel_breakdown(ours)[["kernel_type", "sum", "percentage"]].itertuples(index=False)]
        if gpu and ours is not None and not ours.empty else None,
        "in_collectives_ms_per_step": None, "wait_ms_per_step": None, "transfer_ms_per_step": None,
        "wait_share": None, "transfer_share": None, "waited_for": [],
    }
    pr = getattr(wi, "per_rank", None)
    if pr is not None and not pr.empty and "in_collectives_ms_per_step" in pr:
        inside, wait = float(pr["in_collectives_ms_per_step"].sum()), float(pr["wait_ms_per_step"].sum())
        transfer = float(pr["transfer_ms_per_step"].sum())
        out.update(in_collectives_ms_per_step=inside, wait_ms_per_step=wait, transfer_ms_per_step=transfer,
                   wait_share=wait / inside if inside > 0 else None, transfer_share=transfer / inside if inside > 0 else None)
        out["waited_for"] = waited_for(wi.collectives, len(wi.steps))
    return out


def waited_for(colls: pd.DataFrame, n_steps: int) -> list[dict]:
    """Who the others waited for: per rank that arrived last at some matched collectives, the time
    the others spent waiting for it (summed over them, ms per profiled step) and at how many
    collectives it was last; the largest first."""
    if colls is None or colls.empty or "waited_ms" not in colls or not n_steps:
        return []
    g = colls.groupby("last_rank")
    df = pd.DataFrame({"waited_ms_per_step": g["waited_ms"].sum() / n_steps, "last_at": g.size()}).reset_index()
    df = df[df["waited_ms_per_step"] > 0].sort_values("waited_ms_per_step", ascending=False)
    return [{"rank": int(r.last_rank), "waited_ms_per_step": float(r.waited_ms_per_step), "last_at": int(r.last_at),
             "collectives": int(len(colls))} for r in df.itertuples()]
