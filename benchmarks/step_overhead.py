"""What does recording every step cost? Runs one rank's trainer (profiler off) two ways, interleaved,
and prints the ratio: ``Trainer.step`` as a real run does it (record_function regions, clock reads,
the step record of steps/rank-<r>.jsonl, CUDA events on a GPU) against the bare step (batch,
forward, backward, optimizer step through the same trainer, nothing else). Also times the
bookkeeping alone (clock reads, record, JSON line, flush; CUDA event record/query on a GPU).

    .venv/bin/python benchmarks/step_overhead.py [--steps 40] [--repeats 5] [--arch resnet18]

Uses the GPU when there is one (NCCL, CUDA events read back without a per-step synchronisation),
else the CPU (gloo). Prints a table; copy it into benchmarks/README.md with the date and machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hpcprof.rank.env import detect_rank_env
from hpcprof.rank.failures import FailureContext
from hpcprof.rank.trainer import StepTimer, Trainer
from hpcprof.rundir import RunDir, StepRecord, StepWriter
from hpcprof.spec import load_spec


def bare_step(trainer: Trainer) -> None:
    """The untimed baseline: the training work of Trainer.step, without regions, clocks or records."""
    x, y = next(trainer.source)
    trainer.backward(trainer.forward(x, y))
    trainer.optimizer_step()


def one_run(args, full_step: bool) -> float:
    """Seconds per step over args.steps steps of one single-rank trainer, after one warm-up step."""
    for var in [k for k in os.environ if k.startswith(("SLURM_", "SUBMITIT_"))] + ["RANK", "WORLD_SIZE", "MASTER_ADDR"]:
        os.environ.pop(var, None)
    with tempfile.TemporaryDirectory() as tmp:
        spec = load_spec(overrides={
            "model.arch": args.arch, "model.num_classes": 10, "model.image_size": args.image_size,
            "data.batch_size": args.batch, "train.steps": args.steps + 1, "profiler.enabled": False,
        })
        run = RunDir(Path(tmp) / "bench")
        run.create(spec)
        renv = detect_rank_env()
        trainer = Trainer(spec, run, renv, FailureContext(run, renv.rank, renv.node)).setup()
        try:
            trainer.step(0)
            if trainer.use_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for step in range(1, args.steps + 1):
                trainer.step(step) if full_step else bare_step(trainer)
            trainer.timer.flush(block=True)
            if trainer.use_cuda:
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / args.steps
        finally:
            trainer.close()


def bookkeeping_us(n: int, use_cuda: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        writer = StepWriter(RunDir(tmp).steps_path(0))
        timer = StepTimer(writer, use_cuda)
        t0 = time.perf_counter()
        for step in range(n):
            events = timer.start_gpu()
            p = [time.perf_counter() for _ in range(6)]
            record = StepRecord(step=step, epoch=0, rank=0, t_start=time.time(), t_end=time.time(),
                                step_s=p[5] - p[0], data_wait_s=p[1] - p[0], host_pre_forward_s=p[2] - p[0],
                                drill_sleep_s=0.0, forward_s=p[3] - p[2], backward_s=p[4] - p[3],
                                optimizer_s=p[5] - p[4], batch_size=16, profiled=False)
            timer.finish(record, events)
        timer.flush(block=True)
        writer.close()
        return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    use_cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if use_cuda else f"CPU ({os.cpu_count()} cores)"
    timed, untimed = [], []
    for i in range(args.repeats):
        order = (False, True) if i % 2 == 0 else (True, False)
        for record in order:
            (timed if record else untimed).append(one_run(args, record))
    base, rec = statistics.median(untimed), statistics.median(timed)
    book = bookkeeping_us(2000, use_cuda)
    print(f"# step-record overhead, {time.strftime('%Y-%m-%d')}, {platform.node()}, {device}, torch {torch.__version__}")
    print(f"# {args.arch}, {args.image_size}px, batch {args.batch}, {args.steps} steps x {args.repeats} repeats, 1 rank, profiler off")
    print(f"| loop | median ms/step | runs (ms/step) |")
    print(f"|---|---|---|")
    print(f"| bare step (baseline) | {base * 1e3:.2f} | {', '.join(f'{x * 1e3:.1f}' for x in untimed)} |")
    print(f"| Trainer.step (regions, clocks, record) | {rec * 1e3:.2f} | {', '.join(f'{x * 1e3:.1f}' for x in timed)} |")
    print(f"ratio with/without: {rec / base:.4f}")
    print(f"bookkeeping alone: {book:.1f} us/step = {book / (base * 1e6) * 100:.3f}% of the baseline step")


if __name__ == "__main__":
    main()
