"""The kernel-launch view of ONE rank: HTA's own launch statistics and their summary.

- launch statistics: HTA's `CudaKernelAnalysis.cuda_kernel_launch_stats` (what
  `TraceAnalysis.get_cuda_kernel_launch_stats` returns) on the rank's HTA trace: per launched GPU
  event its CPU (runtime call) duration, GPU duration and launch delay (kernel start - call end,
  clipped at 0). Summarised per rank: launches, the share of GPU events shorter than their launch
  call ("short kernels": the CPU cannot keep such a GPU fed), and the outliers above HTA's cutoffs.
"""

from __future__ import annotations

import pandas as pd

RUNTIME_CUTOFF_US = 50  # HTA's defaults for get_cuda_kernel_launch_stats
LAUNCH_DELAY_CUTOFF_US = 100


def launch_stats(hta_trace, rank: int) -> pd.DataFrame:
    """HTA's kernel-launch statistics for this rank (columns correlation, cpu_duration,
    gpu_duration, launch_delay; us): hta/breakdown.launch_stats on HTA's frame, or HTA's own
    implementation where that declines (a correlation id twice on one side)."""
    from .breakdown import launch_stats as on_numpy

    res = on_numpy(hta_trace.get_trace(rank), hta_trace.symbol_table.get_sym_id_map())
    if res is not None:
        return res
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis  # with plotly: only where needed
    res = CudaKernelAnalysis.cuda_kernel_launch_stats(
        hta_trace, [rank], RUNTIME_CUTOFF_US, LAUNCH_DELAY_CUTOFF_US, include_memory_events=True, visualize=False
    )
    return res[rank].reset_index(drop=True)


def launch_summary(stats: pd.DataFrame) -> dict:
    """One rank's launch statistics in a few numbers (see the module docstring)."""
    n = int(len(stats))
    if not n:
        return {"launches": 0}
    cpu, gpu, delay = stats["cpu_duration"], stats["gpu_duration"], stats["launch_delay"]
    return {
        "launches": n,
        "short_kernel_share": float((gpu < cpu).mean()),
        "cpu_launch_median_us": float(cpu.median()),
        "gpu_median_us": float(gpu.median()),
        "launch_delay_median_us": float(delay.median()),
        "launch_delay_p95_us": float(delay.quantile(0.95)),
        "runtime_outliers": int((cpu > RUNTIME_CUTOFF_US).sum()),
        "launch_delay_outliers": int((delay > LAUNCH_DELAY_CUTOFF_US).sum()),
        "gpu_time_us": float(gpu.sum()),
        "cpu_launch_time_us": float(cpu.sum()),
    }
