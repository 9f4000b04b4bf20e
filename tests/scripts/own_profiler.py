"""A DDP script that profiles itself with torch.profiler (schedule, tensorboard_trace_handler), as
the PyTorch profiler tutorial shows. On CPU and gloo. It knows nothing of hpcprof.

    torchrun --nproc_per_node 2 own_profiler.py --steps 16 --logdir ./log
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--logdir", default="./log")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = DDP(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.logdir, worker_name=f"rank{dist.get_rank()}"),
    ) as prof:
        for step in range(args.steps):
            x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    if dist.get_rank() == 0:
        print(f"trained {args.steps} steps; traces in {args.logdir}: {sorted(os.listdir(args.logdir))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
