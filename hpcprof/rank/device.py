"""What a rank runs on, decided by pure functions (testable without a GPU), and the CUDA/NCCL
settings a first GPU run needs.

Each decision takes what the rank can see (whether torch sees CUDA, how many GPUs, the GPU's
compute capability, what the launcher asked for) and returns the answer or raises
:class:`DeviceError` with one line saying what is wrong and what to do. The rank side calls them
with the real values (:func:`rank_device`); the tests call them with the values of a GPU node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..rundir.flight_recorder import FR_PREFIX, dump_folder


class DeviceError(RuntimeError):
    """The rank cannot run as asked (GPUs requested but unusable, fewer GPUs than local ranks,
    a precision the GPU lacks). The message is one line naming what was requested and what was found."""


def gpus_requested(env: Mapping[str, str], spec_gpus_per_node: int = 0) -> int:
    """How many GPUs per node this job asked for: the spec's ``resources.gpus_per_node`` when set,
    else what SLURM says it allocated to this node (``SLURM_GPUS_ON_NODE``, ``SLURM_GPUS_PER_NODE``,
    else the count of ``SLURM_JOB_GPUS``: global ids, older SLURM). 0: a CPU job
    (``CUDA_VISIBLE_DEVICES`` alone is not a request: desktops set it too)."""
    if spec_gpus_per_node > 0:
        return spec_gpus_per_node
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = str(env.get(key, "")).strip().split(":")[-1].split("(")[0]
        if value.isdigit() and int(value) > 0:
            return int(value)
    ids = [x for x in str(env.get("SLURM_JOB_GPUS", "")).split(",") if x.strip()]
    return len(ids)


def cuda_problem(requested: int, torch_version: str, cuda_version: str | None, available: bool,
                 device_count: int) -> str | None:
    """Why torch cannot use ``requested`` GPUs, in one line, or None when it can (or none was
    requested). ``cuda_version``: ``torch.version.cuda`` (None for a CPU-only build). The one wording
    of this refusal: the rank (:func:`choose_device`) and the batch script's pre-flight
    (hpcprof.slurm.preflight) both say it."""
    if requested <= 0:
        return None
    build = f"torch {torch_version} built for CUDA {cuda_version}" if cuda_version else \
        f"torch {torch_version} is a CPU-only build (torch.version.cuda is None)"
    if not available:
        fix = ("load a CUDA build of PyTorch (module avail pytorch-gpu) or pip install a CUDA wheel"
               if not cuda_version else
               f"the node's NVIDIA driver is missing or older than CUDA {cuda_version} (nvidia-smi shows the "
               f"CUDA version the driver supports): use a PyTorch built for that driver, or run without GPUs "
               f"(--gpus-per-node 0)")
        return f"{requested} GPU(s) requested but torch.cuda.is_available() is False: {build}; {fix}"
    if device_count < requested:
        return (f"{requested} GPU(s) requested but torch sees {device_count} ({build}); "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
    return None


def choose_device(*, requested_gpus: int, cuda_available: bool, device_count: int, local_rank: int,
                  local_world_size: int, torch_version: str, torch_cuda: str | None) -> tuple[str, int | None]:
    """("cuda", index) or ("cpu", None) for this rank.

    - GPUs requested but torch cannot use CUDA (a CPU-only torch, a driver older than the wheel's
      CUDA, no device visible): refuse (:func:`cuda_problem`), never fall back to CPU silently (the
      job would "succeed" 50x slower on gloo).
    - More local ranks than visible GPUs: refuse (``local_rank % device_count`` would put two ranks
      on one GPU without a word).
    - No GPU requested and none visible: CPU. No GPU requested but CUDA visible (a torchrun on a GPU
      machine): one GPU per local rank when there are enough, else CPU."""
    if requested_gpus > 0 and (not cuda_available or device_count == 0):
        raise DeviceError(cuda_problem(requested_gpus, torch_version, torch_cuda, cuda_available, device_count))
    if not cuda_available or device_count == 0:
        return "cpu", None
    if local_rank >= device_count or local_world_size > device_count:
        if requested_gpus == 0:
            return "cpu", None
        raise DeviceError(f"local rank {local_rank} of {local_world_size} on this node, but only {device_count} GPU(s) "
                          "are visible: one rank per GPU; ask for --tasks-per-node <= --gpus-per-node, or check "
                          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}")
    return "cuda", local_rank


@dataclass(frozen=True)
class AmpPlan:
    """The autocast dtype (None: full precision) and whether a GradScaler runs."""

    dtype: str | None
    scaler: bool
    why: str = ""


def amp_plan(amp: str, device_type: str, capability: tuple[int, int] | None) -> AmpPlan:
    """Mixed precision for ``model.amp`` on this device.

    - "auto": bf16 on GPUs of compute capability 8.0 and above (A100, H100), fp16 with a GradScaler
      below (V100 is 7.0: its bf16 convolutions fall back to slow kernels, which made the AMP rung a
      regression there), off on CPU.
    - "bf16" on a GPU below 8.0 is refused with the fix, not run slowly.
    - "bf16" on CPU: autocast to bf16 (CPU autocast supports it); "fp16" on CPU is refused (the CPU
      has no fp16 autocast worth measuring)."""
    if amp == "off":
        return AmpPlan(None, False)
    if device_type != "cuda":
        if amp == "auto":
            return AmpPlan(None, False, "auto: off on CPU")
        if amp == "fp16":
            raise DeviceError("model.amp = 'fp16' needs a GPU (CPU autocast is bf16 only): use 'bf16', 'auto' or 'off'")
        return AmpPlan("bf16", False)
    cap = capability or (0, 0)
    if amp == "auto":
        return AmpPlan("bf16", False, f"auto: bf16 on sm{cap[0]}{cap[1]}") if cap >= (8, 0) else \
            AmpPlan("fp16", True, f"auto: fp16 with GradScaler on sm{cap[0]}{cap[1]} (no fast bf16 below sm80)")
    if amp == "bf16" and cap < (8, 0):
        raise DeviceError(f"model.amp = 'bf16' on a GPU of compute capability {cap[0]}.{cap[1]}: bf16 needs sm80+ "
                          "(A100, H100) and falls back to slow kernels here; use --model-amp fp16 or auto")
    return AmpPlan(amp, amp == "fp16")


# ------------------------------------------------------------------ NCCL environment
FR_BUFFER_RENAMED = "2.8"
"""The torch release that reads the flight recorder's buffer size from TORCH_FR_BUFFER_SIZE (and warns on
every process group that TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated, as torch 2.11 was seen doing)."""


def nccl_environment(run_root: str | Path, env: Mapping[str, str], torch_version: str) -> dict[str, str]:
    """The NCCL / c10d variables a first GPU run should have, without overriding the user's.

    - PyTorch's own TORCH_NCCL_ASYNC_ERROR_HANDLING default (3: abort the communicator and tear the
      process down on an error or timeout) is kept: nothing here sets it.
    - The flight recorder: the last 2,000 collectives of each rank (TORCH_FR_BUFFER_SIZE from torch 2.8,
      TORCH_NCCL_TRACE_BUFFER_SIZE before), dumped on a timeout into the run directory
      (``nccl-flight-recorder/rank-<r>``), so a hang leaves the collective each rank was in (read by
      hpcprof.rundir.flight_recorder).
    - NCCL_DEBUG=WARN: NCCL's own warnings (network, topology) in the rank logs.
    Values the user has set are kept as they are (either name of the buffer size)."""
    folder = dump_folder(run_root)
    from torch.torch_version import TorchVersion

    size = "TORCH_FR_BUFFER_SIZE" if TorchVersion(torch_version) >= FR_BUFFER_RENAMED else "TORCH_NCCL_TRACE_BUFFER_SIZE"
    wanted = {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(folder / FR_PREFIX),
        "NCCL_DEBUG": "WARN",
    }
    if not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & set(env):
        wanted[size] = "2000"
    return {k: v for k, v in wanted.items() if k not in env}


def use_nccl_environment(run_root: str | Path) -> None:
    """Set :func:`nccl_environment` in this process (before its first NCCL communicator exists) and
    make the flight recorder's folder, so that a NCCL watchdog timeout leaves its dumps in the run
    directory."""
    import torch

    extra = nccl_environment(run_root, os.environ, torch.__version__)
    if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in extra:
        Path(extra["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]).parent.mkdir(parents=True, exist_ok=True)
    os.environ.update(extra)
