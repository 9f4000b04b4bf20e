"""What every rank runs: a small trainer for the DDP ResNet of the spec.

:meth:`Trainer.setup` starts the process group, samples the clocks of all ranks after a barrier
(rank 0 records them in the manifest with this attempt), builds model, optimizer and data, and
resumes from the checkpoint if a requeued job left one. :meth:`Trainer.step` runs one step cut into
the ``record_function`` regions of hpcprof.rundir.records and writes its step record (every step,
not only profiled ones). :meth:`Trainer.fit` is the step loop with the profiler and cooperative
preemption: the ranks agree on a step, rank 0 writes :meth:`Trainer.state_dict` as the checkpoint,
the launcher requeues, and the step numbers continue.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

from ..rundir import REGION_BACKWARD, REGION_DATA, REGION_FORWARD, REGION_OPTIMIZER, RunDir, StepRecord, StepWriter
from ..rundir.manifest import Clock, RankEntry, record_attempt
from ..spec import JobSpec
from .data import BatchSource
from .drills import RankDrills
from .env import (RankEnv, collect_versions, cpu_threads, device_for, device_name, init_process_group, node_cpus,
                  pin_to_own_cores)
from .failures import FailureContext
from .model import build_model
from .preemption import PreemptionWatch, requeue
from .profiling import make_profiler


class StepTimer:
    """Writes step records; on a GPU, adds the step's GPU time from CUDA events read back later,
    without a synchronisation on the hot path."""

    def __init__(self, writer: StepWriter, use_cuda: bool):
        self.writer = writer
        self.use_cuda = use_cuda
        self._pending: collections.deque = collections.deque()

    def start_gpu(self):
        if not self.use_cuda:
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        return start, end

    def finish(self, record: StepRecord, events) -> None:
        if events is None:
            self.writer.write(record)
            return
        events[1].record()
        self._pending.append((record, events))
        self.flush(block=False)

    def flush(self, block: bool) -> None:
        while self._pending:
            record, (start, end) = self._pending[0]
            if not block and not end.query():
                break
            end.synchronize()
            record.gpu_ms = start.elapsed_time(end)
            self.writer.write(record)
            self._pending.popleft()


class Trainer:
    """One rank's training: :meth:`setup`, then :meth:`fit` (or :meth:`step` by step)."""

    def __init__(self, spec: JobSpec, run: RunDir, renv: RankEnv, failure: FailureContext):
        self.spec, self.run, self.renv, self.failure = spec, run, renv, failure
        self.start_step = 0

    # ------------------------------------------------------------------ set-up
    def setup(self) -> "Trainer":
        spec, renv = self.spec, self.renv
        self.device = device_for(renv)
        self.use_cuda = self.device.type == "cuda"
        self.backend = "nccl" if self.use_cuda else "gloo"
        self.node_cpus = node_cpus()  # before pinning narrows this process's affinity
        if not self.use_cuda:
            pin_to_own_cores(renv)
        torch.set_num_threads(cpu_threads(spec.resources.cpus_per_task, renv))
        torch.manual_seed(spec.train.seed)
        init_process_group(renv, self.backend, spec.train.pg_timeout_s)
        # A small CPU-side group for control messages (preemption agreement, final barrier), so they
        # never queue behind NCCL kernels and keep their own sequence numbers apart from training's.
        self.ctrl_group = dist.new_group(backend="gloo")
        entries = self._gather_rank_entries()

        checkpoint = None
        if self.run.checkpoint_path.exists():
            checkpoint = torch.load(self.run.checkpoint_path, map_location=self.device, weights_only=False)
        self.start_step = checkpoint["step"] + 1 if checkpoint else 0
        if renv.rank == 0:
            record_attempt(self.run, spec, world_size=renv.world_size, launcher=renv.launcher, job_id=renv.job_id,
                           backend=self.backend, device=self.device.type, versions=collect_versions(), ranks=entries,
                           resumed_from_step=self.start_step if checkpoint else None)

        self._build()
        if checkpoint:
            self.load_state_dict(checkpoint)
        self.drills = RankDrills.for_rank(spec.drills, renv.rank, renv.node)
        self.writer = StepWriter(self.run.steps_path(renv.rank), keep_until_step=self.start_step)
        self.timer = StepTimer(self.writer, self.use_cuda)
        self.watch = PreemptionWatch(self.ctrl_group)
        self.prof = make_profiler(spec.profiler, self.run, renv.rank, self.use_cuda, self.start_step, self.drills.clock_skew_ms)
        return self

    def _gather_rank_entries(self) -> list[RankEntry]:
        """Every rank reads its clocks right after the same barrier; rank 0 gets all entries."""
        dist.barrier()
        clock = Clock(wall_ns=time.time_ns(), monotonic_ns=time.monotonic_ns(), after_barrier=True)
        renv = self.renv
        entry = RankEntry(rank=renv.rank, local_rank=renv.local_rank, node=renv.node, device=str(self.device),
                          device_name=device_name(self.device), pid=os.getpid(), launcher=renv.launcher,
                          slurm=renv.slurm, clock=clock, cpu_threads=torch.get_num_threads(), node_cpus=self.node_cpus)
        entries: list[Any] = [None] * renv.world_size
        dist.all_gather_object(entries, entry, group=self.ctrl_group)
        return entries

    def _build(self) -> None:
        spec, device = self.spec, self.device
        self.model = build_model(spec.model, device)
        self.ddp = DDP(self.model, device_ids=[device.index] if self.use_cuda else None)
        if spec.model.compile:
            self.ddp = torch.compile(self.ddp)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=spec.train.lr, momentum=spec.train.momentum)
        self.scaler = torch.amp.GradScaler(device.type, enabled=spec.model.amp == "fp16")
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.model.amp)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.source = BatchSource(spec.data, spec.model, device, self.renv.rank, self.renv.world_size, spec.train.seed)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.source.epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.source.set_position(state.get("epoch", 0))

    def save_checkpoint(self, step: int) -> None:
        """checkpoint/latest.pt: the state after `step`, written under a temporary name then renamed."""
        path = self.run.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"step": step, **self.state_dict(), "time": time.time()}, tmp)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ one step
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            return self.criterion(self.ddp(x), y)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def optimizer_step(self) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=self.spec.train.zero_grad_set_to_none)

    def step(self, step: int) -> StepRecord:
        """Run global step `step`, timed region by region on the host, and write its record."""
        self.failure.step = step
        self.drills.before_step(step)
        profiled = self.prof.is_active_step(step)
        t_start = time.time()
        p0 = time.perf_counter()
        events = self.timer.start_gpu()
        with record_function(REGION_DATA):
            x, y = next(self.source)
        p_data = time.perf_counter()
        self.drills.straggle(step)
        p_fwd = time.perf_counter()
        with record_function(REGION_FORWARD):
            loss = self.forward(x, y)
        p_bwd = time.perf_counter()
        with record_function(REGION_BACKWARD):
            self.backward(loss)
        p_opt = time.perf_counter()
        with record_function(REGION_OPTIMIZER):
            self.optimizer_step()
        p_end = time.perf_counter()
        record = StepRecord(
            step=step, epoch=self.source.epoch, rank=self.renv.rank, t_start=t_start, t_end=t_start + (p_end - p0),
            step_s=p_end - p0, data_wait_s=p_data - p0, host_pre_forward_s=p_fwd - p0,
            drill_sleep_s=p_fwd - p_data if self.drills.sleeps_at(step) else 0.0, forward_s=p_bwd - p_fwd,
            backward_s=p_opt - p_bwd, optimizer_s=p_end - p_opt, batch_size=self.spec.data.batch_size,
            profiled=profiled,
        )
        self.timer.finish(record, events)
        self.prof.step()
        return record

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Steps start_step .. train.steps-1 under the profiler; returns a small outcome (rank, node,
        steps done, loop wall time). On an agreed preemption: checkpoint, then requeue (no return)."""
        renv = self.renv
        step = self.start_step
        preempted = False
        loop_start = time.perf_counter()
        try:
            with self.prof:
                for step in range(self.start_step, self.spec.train.steps):
                    self.failure.step = step
                    if self.watch.agreed():
                        preempted = True
                        break
                    self.step(step)
            self.watch.drain()
            self.timer.flush(block=True)
            loop_s = time.perf_counter() - loop_start
            if preempted:
                if renv.rank == 0:
                    self.save_checkpoint(step - 1)
                dist.barrier(group=self.ctrl_group)
                self.writer.close()
                requeue(renv, self.watch)
            dist.barrier(group=self.ctrl_group)
        except BaseException as exc:
            if not isinstance(exc, SystemExit):
                try:
                    self.timer.flush(block=True)  # keep the records of the steps that finished
                except Exception:
                    pass
            raise
        finally:
            self.writer.close()
        self.close()
        return {"rank": renv.rank, "node": renv.node, "last_step": self.spec.train.steps - 1,
                "resumed_from": self.start_step, "loop_s": loop_s, "steps_run": self.spec.train.steps - self.start_step}

    def close(self) -> None:
        self.writer.close()
        dist.destroy_process_group()
