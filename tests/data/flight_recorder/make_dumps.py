"""How the dumps in this folder were recorded: PyTorch's flight recorder of a real 4-rank gloo job that
hangs, dumped by every rank while it hangs (2026-11-29, torch 2.14.1, CPU).

    python tests/data/flight_recorder/make_dumps.py tests/data/flight_recorder/hang hang
    python tests/data/flight_recorder/make_dumps.py tests/data/flight_recorder/mismatch mismatch

Every rank calls all_reduce five times and a barrier (collectives #1-#6 of the default group), then:
- hang: rank 2 sleeps instead of calling the seventh collective; ranks 0, 1 and 3 wait in all_reduce #7;
- mismatch: rank 1 calls broadcast as #7 where ranks 0, 2 and 3 call all_reduce.
Four seconds later a thread of each rank writes its recorder to rank-<r> and the job ends.

The dump is taken with ``torch._C._distributed_c10d._dump_fr_trace``, a private call that hpcprof itself
never makes (a NCCL job's ranks write the same format on a watchdog timeout); here it only recorded the
test data, once.
"""

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 4


def dump_later(rank: int, out: str) -> None:
    time.sleep(4)
    import torch._C._distributed_c10d as c10d

    data = c10d._dump_fr_trace(True, True, False)
    tmp = os.path.join(out, f"rank-{rank}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(out, f"rank-{rank}"))
    while len([f for f in os.listdir(out) if f.startswith("rank-") and not f.endswith(".tmp")]) < WORLD:
        time.sleep(0.1)
    time.sleep(1)
    os._exit(0)


def work(rank: int, out: str, mode: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, TORCH_FR_BUFFER_SIZE="200")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=30))
    t = torch.ones(1024)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    threading.Thread(target=dump_later, args=(rank, out), daemon=True).start()
    if mode == "hang" and rank == 2:
        time.sleep(60)
    elif mode == "mismatch" and rank == 1:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)
    time.sleep(60)


if __name__ == "__main__":
    out, mode = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    mp.spawn(work, args=(out, mode, os.environ.get("PORT", "29631")), nprocs=WORLD, join=True)
