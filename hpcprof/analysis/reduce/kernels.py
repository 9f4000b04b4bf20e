"""GPU kernels across ranks: HTA's kernel-type breakdown summed over ranks, and the top kernels."""

from __future__ import annotations

import pandas as pd


def kernel_breakdown(kernel_type: pd.DataFrame) -> pd.DataFrame:
    """Kernel-type breakdown across ranks (tables/kernel_breakdown): as HTA does, the per-rank
    kernel-type times are summed, then the shares taken."""
    if kernel_type.empty:
        return pd.DataFrame(columns=["kernel_type", "sum", "percentage"])
    kb = kernel_type.groupby("kernel_type")["sum"].sum().reset_index().sort_values("sum", ascending=False, ignore_index=True)
    kb["percentage"] = (kb["sum"] / kb["sum"].sum() * 100).round(1)
    return kb


def kernels_across_ranks(kernels_all: pd.DataFrame) -> pd.DataFrame:
    """Every kernel over all ranks (tables/kernels_across_ranks), from the per-rank full kernel tables."""
    if kernels_all.empty:
        return pd.DataFrame()
    kx = (
        kernels_all.groupby(["kernel_type", "name"])
        .agg(count=("count", "sum"), sum=("sum", "sum"), max=("max", "max"), min=("min", "min"), ranks=("rank", "nunique"))
        .reset_index()
    )
    kx["mean"] = kx["sum"] / kx["count"]
    kx["pct_of_type"] = 100 * kx["sum"] / kx.groupby("kernel_type")["sum"].transform("sum")
    return kx.sort_values("sum", ascending=False, ignore_index=True)
