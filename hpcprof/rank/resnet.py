"""The built-in workload: DDP over a torchvision ResNet (the spec's [model] and [data] sections), on
the step-loop API like any user's training code. Only what is ResNet-specific lives here: the model
and its DDP wrapper, mixed precision, the optimizer, the batches; records, drills, profiler,
preemption and the failure path are hpcprof.rank.session's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from .data import BatchSource
from .device import amp_plan
from .model import build_model
from .api import run as hpcprof_run


class ResNetState:
    """What a checkpoint holds for the built-in trainer (model, optimizer, scaler, data position)."""

    def __init__(self, model, optimizer, scaler, source: BatchSource):
        self.model, self.optimizer, self.scaler, self.source = model, optimizer, scaler, source

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(), "epoch": self.source.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.source.set_position(state.get("epoch", 0))


def train() -> dict[str, Any]:
    """Train the spec's ResNet on this rank; returns a small outcome (rank, node, steps, loop time)."""
    import time

    session = hpcprof_run()
    session.steps_source = "builtin"
    with session as run:
        spec, device = run.spec, run.device
        run.batch_size = spec.data.batch_size
        torch.manual_seed(spec.train.seed)
        if run.use_cuda:
            torch.backends.cudnn.benchmark = spec.model.cudnn_benchmark
        capability = torch.cuda.get_device_capability(device) if run.use_cuda else None
        plan = amp_plan(spec.model.amp, device.type, capability)
        model = build_model(spec.model, device)
        ddp = DDP(model, device_ids=[device.index] if run.use_cuda else None,
                  gradient_as_bucket_view=spec.train.gradient_as_bucket_view)
        net = torch.compile(ddp) if spec.model.compile else ddp
        optimizer = torch.optim.SGD(ddp.parameters(), lr=spec.train.lr, momentum=spec.train.momentum)
        scaler = torch.amp.GradScaler(device.type, enabled=plan.scaler)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(plan.dtype or "")
        criterion = torch.nn.CrossEntropyLoss()
        source = BatchSource(spec.data, spec.model, device, run.rank, run.world_size, spec.train.seed)
        run.checkpoint(ResNetState(model, optimizer, scaler, source))
        loop_start = time.perf_counter()
        for batch in run.steps(source, total=spec.train.steps):
            run.epoch = source.epoch
            with run.region("copy"):
                x, y = source.to_device(batch)
            with run.region("forward"):
                with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                    loss = criterion(net(x), y)
            with run.region("backward"):
                scaler.scale(loss).backward()
            with run.region("optimizer"):
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=spec.train.zero_grad_set_to_none)
        loop_s = time.perf_counter() - loop_start
        return {"rank": run.rank, "node": run.node, "last_step": spec.train.steps - 1, "resumed_from": run.start_step,
                "loop_s": loop_s, "steps_run": spec.train.steps - run.start_step}
