"""A DDP training script on NCCL whose GPU work at one step outlasts its process group's timeout, as a
stuck kernel or a throttled GPU does: NCCL's watchdog should time the gradient all-reduce of that step
out, PyTorch dump its flight recorder into the run directory and abort the process. Prepared to record
NCCL dumps for this folder on a machine of two or more GPUs, run as users run their script under
hpcprof (benchmarks/gpu_session.sh runs it there):

    python -m hpcprof.submit --script tests/data/flight_recorder/nccl_stall.py -- --stall-step 5

Seen on one GPU (one rank; NCCL refuses two ranks on one GPU), torch 2.11.0, NCCL 2.28.9, 2026-11-30:
the 40 s stall ran through and the job ended well, with no timeout and no dump, so no NCCL dump
is kept here yet.

The stall is a chain of large bf16 matrix products (a few hundred launches, well under the GPU's
queue of pending launches, so the all-reduce is queued behind them at once and its timeout starts).
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--stall-step", type=int, default=5)
    p.add_argument("--stall-s", type=float, default=40.0, help="seconds of GPU work queued at the stall step")
    p.add_argument("--timeout-s", type=float, default=10.0, help="the process group's timeout")
    args = p.parse_args()

    dist.init_process_group("nccl", timeout=timedelta(seconds=args.timeout_s))
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    model = DDP(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device),
                device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    n = 32768  # about 90 ms a product on an H100 or H200: a 40 s stall is under 500 launches
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    per_mm = (time.perf_counter() - t) / 10

    for step in range(args.steps):
        x = torch.randn(64, 1024, device=device)
        y = torch.randint(0, 10, (64,), device=device)
        if step == args.stall_step:
            count = int(args.stall_s / per_mm) + 1
            print(f"step {step}: queueing {count} matrix products ({count * per_mm:.0f} s of GPU work)", flush=True)
            for _ in range(count):
                torch.mm(a, b, out=c)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
