"""What does zero-change mode cost per step? (issue 33)

One process, one rank (gloo), a training step of a small MLP whose optimizer step ends the step:
``model(x).sum().backward(); opt.step(); opt.zero_grad()``, sized to about --step-ms milliseconds.
Two loops, the same code, interleaved block by block in one run (AB AB ..., so drift of the machine
falls on both): ``bare`` (no hpcprof) and ``zero-change`` (hpcprof.rank.auto installed: the global
forward pre-hook until the first forward, the model's own forward pre-hook, the optimizer post hook,
a step record per step; the profiler configured with its window after the run's end). The ratio is
of the medians of the per-step times. On this VM the loops' times move by 10-30% for seconds, which
hides an overhead under 1%; so each loop is also timed with an empty step (the optimizer's step with
no gradients, no forward): the difference per step there IS zero-change mode's own cost (the hook,
the step record), measured to a few microseconds.

    .venv/bin/python benchmarks/zero_change_overhead.py [--step-ms 50] [--blocks 8] [--block-steps 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import torch


def make_step(step_ms: float):
    width = 256
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Linear(width, width))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(32, width)

    def step(reps: int) -> None:
        for _ in range(reps):
            model(x).sum().backward()
        opt.step()
        opt.zero_grad()

    step(3)  # warm-up: thread pools and allocations

    def per_rep(n: int) -> float:
        t = time.perf_counter()
        step(n)
        return (time.perf_counter() - t) / n

    per = min(per_rep(20) for _ in range(3))
    reps = max(1, round(step_ms / 1e3 / per))
    return (lambda: step(reps)), opt


def timed(step, n: int) -> list[float]:
    out, t = [], time.perf_counter()
    for _ in range(n):
        step()
        now = time.perf_counter()
        out.append(now - t)
        t = now
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--block-steps", type=int, default=10)
    p.add_argument("--empty-steps", type=int, default=2000)
    args = p.parse_args()
    for var in [k for k in os.environ if k.startswith(("SLURM_", "SUBMITIT_", "TORCHELASTIC"))] + ["RANK", "WORLD_SIZE"]:
        os.environ.pop(var, None)
    from hpcprof.rank import auto
    from hpcprof.spec import JobSpec

    step, opt = make_step(args.step_ms)

    def empty():  # the optimizer's step alone (no gradients: nothing to update): the hook path, no work
        opt.step()

    bare_empty = statistics.median(timed(empty, args.empty_steps))
    bare: list[float] = []
    bare += timed(step, args.block_steps)  # warm-up
    with tempfile.TemporaryDirectory() as tmp:
        spec = JobSpec()
        spec.runs_dir, spec.name = tmp, "bench-zero-change"
        spec.profiler.wait = 10 * (args.blocks * args.block_steps + args.empty_steps)  # a window that never comes
        spec.profiler.enabled = os.environ.get("BENCH_PROFILER", "1") == "1"
        spec.train.steps = spec.profiler.wait + 10
        watcher = auto.install(spec, None, None, launched=False)
        ours: list[float] = []
        bare = []
        step()  # the first optimizer step joins the job (a one-rank process group)
        for _ in range(args.blocks):
            watcher._unhook()  # the bare blocks: no hook of hpcprof's anywhere
            bare += timed(step, args.block_steps)
            watcher.install_hooks()
            ours += timed(step, args.block_steps)
        ours_empty = statistics.median(timed(empty, args.empty_steps))
        watcher.close(None)
    med, base = statistics.median(ours), statistics.median(bare)
    own = (ours_empty - bare_empty) * 1e6
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} cores, load1 {os.getloadavg()[0]:.1f}, "
          f"torch {torch.__version__}, 1 rank, a {args.step_ms:.0f} ms step, {args.blocks} interleaved blocks of "
          f"{args.block_steps} steps per loop")
    print()
    print("| loop | median ms/step | bare blocks beside it, median ms/step | ratio to bare | own cost, us/step (empty step) | share of a 50 ms step |")
    print("|---|---|---|---|---|---|")
    print(f"| zero-change | {med * 1e3:.2f} | {base * 1e3:.2f} | {med / base:.4f} | {own:.1f} | {100 * own / 50e3:.3f}% |")


if __name__ == "__main__":
    main()
