"""Re-tag a real trace set's NCCL kernels the way jobs that communicate without NCCL name theirs.

Only the kernels' names change (every other field, the host-side annotations `c10d::*`,
`record_param_comms`, `nccl:*` and the launches included, stays as recorded), so an analysis that
finds communication by what the trace says must give the same communication share, overlap,
matching and verdicts as on the NCCL-named original. The names are real ones:
- PyTorch symmetric memory (torch/csrc/distributed/c10d/symm_mem, as Kineto shows it in vLLM and
  SGLang profiles): `void (anonymous namespace)::multimem_all_reduce_kernel<...>(...)`;
- DeepEP (deepseek-ai/DeepEP, NVSHMEM): `void deep_ep::intranode::dispatch<...>(...)`,
  `void deep_ep::internode::combine<...>(...)`; DeepSeek's own build of it, in their published
  profiles (deepseek-ai/profile-data): `void dpsk::ep::internode::dispatch_ll<...>(...)`;
- NEUTRAL: names no rule knows, so only the link to the host collective can find them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

SYMM_MEM_ALL_REDUCE = ("void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>(float*, unsigned long, "
                       "unsigned int**, unsigned long, unsigned long)")
DEEPEP_DISPATCH = ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, "
                   "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, "
                   "int, int, int, int, void**, int, int, int)")
DEEPEP_COMBINE = ("void deep_ep::internode::combine<false, 8, 4, 768, 8192>(int4*, float*, bool*, int4 const*, "
                  "float const*, int const*, int const*, int const*, void*, void**, int, int, int, int, int, int)")
# DeepEP's low-latency kernels as DeepSeek's own profiles name them (deepseek-ai/profile-data, decode.json:
# the internal build of DeepEP, namespace dpsk::ep; its kernels carry no host-side annotation)
DPSK_DISPATCH_LL = ("void dpsk::ep::internode::dispatch_ll<true, 3, 10, 7168>(void*, float*, int*, long*, int*, int*, void*, "
                    "int*, void*, void const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int*, int)")
DPSK_COMBINE_LL = ("void dpsk::ep::internode::combine_ll<3, 10, 7168, 9>(void*, void*, int*, void*, void const*, long const*, "
                   "float const*, int const*, long const*, int*, int, int*, int, int, int, int, int, int, int, int*, int)")
# the kernel-name prefix in the DLRM and sampled sets -> its new name
SYMMETRIC_AND_EXPERT_PARALLEL = {"ncclKernel_AllReduce": SYMM_MEM_ALL_REDUCE, "ncclKernel_SendRecv": DEEPEP_DISPATCH}
NEUTRAL = {"ncclKernel_AllReduce": "fused_reduce_kernel_v2", "ncclKernel_SendRecv": "exchange_rows_kernel"}


def retag_doc(doc: dict, names: dict[str, str]) -> int:
    """Rename the kernels whose name starts with a key of `names`, in place; returns how many."""
    n = 0
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") == "kernel":
            for prefix, new in names.items():
                if str(e.get("name", "")).startswith(prefix):
                    e["name"] = new
                    n += 1
    return n


def retag_set(src: Path, dst: Path, names: dict[str, str]) -> Path:
    """A copy of trace set `src` in `dst` (same file names, gzip) with its kernels re-tagged."""
    dst.mkdir(parents=True, exist_ok=True)
    total = 0
    for p in sorted(Path(src).glob("*.json*")):
        with gzip.open(p, "rt") if p.name.endswith(".gz") else open(p) as fh:
            doc = json.load(fh)
        total += retag_doc(doc, names)
        with gzip.open(dst / (p.name if p.name.endswith(".gz") else p.name + ".gz"), "wt") as fh:
            json.dump(doc, fh)
    assert total > 0, f"{src}: no kernel to re-tag"
    return dst
