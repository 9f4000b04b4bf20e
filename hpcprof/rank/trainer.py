"""What every rank runs: set-up (device, process group, manifest entry with a clock sample), the
DDP ResNet step loop with ``record_function`` regions, per-step timings for every step, the profiler,
the drills, and cooperative preemption (checkpoint, requeue, resume with continuous step numbers).
"""

from __future__ import annotations

import collections
import importlib.metadata
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

from .. import __version__
from ..run import RunDir, StepWriter, atomic_write_text
from ..spec import JobSpec
from .data import BatchSource
from .distributed import RankEnv, detect_rank_env, init_process_group
from .model import build_model
from .profiling import make_profiler

REGION_DATA = "hpcprof.data"
REGION_FORWARD = "hpcprof.forward"
REGION_BACKWARD = "hpcprof.backward"
REGION_OPTIMIZER = "hpcprof.optimizer"
PREEMPT_SIGNAL = signal.SIGUSR2
# How long non-zero ranks wait for SLURM to kill them after rank 0 asked for a requeue.
REQUEUE_GRACE_S = 180


class DrillCrash(RuntimeError):
    """Raised on purpose by the --inject-crash drill."""


class Preempted(Exception):
    """All ranks agreed to stop for a preemption signal; the checkpoint is written."""


def _version(dist_name: str) -> str | None:
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_versions() -> dict[str, Any]:
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # pragma: no cover - no NCCL in this build
            nccl = None
    return {
        "hpcprof": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "hta": _version("HolisticTraceAnalysis"),
        "submitit": _version("submitit"),
    }


class PreemptionWatch:
    """Turns a preemption signal on any rank into a decision all ranks take at the same step.

    The signal handler only sets a flag. At every step boundary each rank starts an asynchronous
    MAX all-reduce of its flag on a small gloo group and reads the result of the previous one, so
    the ranks agree one step after the signal without a blocking collective on the hot path."""

    def __init__(self, group):
        self.group = group
        self.flag = False
        self.signal_time: float | None = None
        self._pending = None
        self.original_handler = signal.getsignal(PREEMPT_SIGNAL)
        signal.signal(PREEMPT_SIGNAL, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.flag = True
        self.signal_time = time.time()

    def agreed(self) -> bool:
        result = False
        if self._pending is not None:
            work, tensor = self._pending
            work.wait()
            result = bool(tensor.item())
        tensor = torch.tensor([1 if self.flag else 0], dtype=torch.int32)
        self._pending = (dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True), tensor)
        return result

    def drain(self) -> None:
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None


class StepTimer:
    """Per-step host timings, plus GPU time from CUDA events read back later without a sync."""

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

    def finish(self, record: dict[str, Any], events) -> None:
        if events is None:
            record["gpu_ms"] = None
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
            record["gpu_ms"] = start.elapsed_time(end)
            self.writer.write(record)
            self._pending.popleft()


def _device_for(renv: RankEnv) -> torch.device:
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        index = renv.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _cpu_threads(spec: JobSpec, renv: RankEnv) -> int:
    if spec.resources.cpus_per_task > 0:
        return spec.resources.cpus_per_task
    slurm_cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm_cpus and slurm_cpus.isdigit():
        return int(slurm_cpus)
    return max(1, (os.cpu_count() or 1) // max(renv.local_world_size, 1))


def _node_cpus() -> int:
    """CPU cores this job may use on this node: SLURM's allocation, else this process's affinity.
    The analysis needs it to know whether ranks shared cores (then a sleeping rank frees a core
    for the others, and the job loses less than the others' waiting time)."""
    on_node = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if on_node.isdigit():
        return int(on_node)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _record_failure(run: RunDir, renv: RankEnv, step: int | None, exc: BaseException) -> None:
    """Leave a small JSON note so the launcher can name the first rank that failed, and why."""
    text = f"{type(exc).__name__}: {exc}"
    peer = isinstance(exc, getattr(dist, "DistError", ())) or any(
        s in text for s in ("Connection closed", "Connection reset", "Broken pipe", "timed out", "Timeout", "NCCL")
    )
    import json

    note = {
        "rank": renv.rank,
        "node": renv.node,
        "pid": os.getpid(),
        "step": step,
        "time": time.time(),
        "error": text[:2000],
        "peer_failure": bool(peer) and not isinstance(exc, DrillCrash),
        "traceback": traceback.format_exc()[-8000:],
        "log": (os.environ.get("HPCPROF_LOG_HINT") or "").replace("%t", str(renv.rank)) or None,
    }
    try:
        atomic_write_text(run.failure_path(renv.rank), json.dumps(note, indent=2))
    except OSError:
        pass


def _save_checkpoint(run: RunDir, step: int, model, optimizer, scaler, epoch: int) -> None:
    path = run.checkpoint_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {
            "step": step,
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "time": time.time(),
        },
        tmp,
    )
    os.replace(tmp, path)


def _requeue(renv: RankEnv, watch: PreemptionWatch) -> None:
    """Hand over to the launcher's requeue mechanism; does not return."""
    if renv.launcher.startswith("submitit"):
        if renv.rank == 0 and callable(watch.original_handler):
            # submitit's own handler: calls TrainTask.checkpoint(), rewrites the submission, requeues, exits.
            watch.original_handler(PREEMPT_SIGNAL, None)
            sys.exit(0)  # pragma: no cover - the handler exits
        if renv.launcher == "submitit-local":
            from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

            sys.exit(LOCAL_REQUEUE_RETURN_CODE)
    elif renv.launcher == "srun" and renv.rank == 0:
        subprocess.run(["scontrol", "requeue", str(renv.job_id)], check=False, timeout=60)
    elif renv.launcher not in ("srun",) and not renv.launcher.startswith("submitit"):
        raise Preempted("preempted: checkpoint written; run the same command again to resume")
    # Other ranks: wait for SLURM to stop this job for its requeue.
    deadline = time.time() + REQUEUE_GRACE_S
    while time.time() < deadline:
        time.sleep(1.0)
    sys.exit(0)


def run_rank(spec: JobSpec, run_root: str, record_steps: bool = True) -> dict[str, Any]:
    """Train on this rank; returns a small outcome (rank, node, steps done, loop wall time).

    `record_steps=False` skips the per-step timing records: the untimed baseline of
    benchmarks/step_overhead.py, never used by a real run."""
    run = RunDir(run_root)
    run.ensure_layout()
    renv = detect_rank_env()
    step: int | None = None
    try:
        return _run(spec, run, renv, record_steps)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        _record_failure(run, renv, getattr(exc, "hpcprof_step", step), exc)
        raise


def _run(spec: JobSpec, run: RunDir, renv: RankEnv, record_steps: bool = True) -> dict[str, Any]:
    device = _device_for(renv)
    use_cuda = device.type == "cuda"
    backend = "nccl" if use_cuda else "gloo"
    torch.set_num_threads(_cpu_threads(spec, renv))
    torch.manual_seed(spec.train.seed)

    init_process_group(renv, backend, spec.train.pg_timeout_s)
    # A small CPU-side group for control messages (preemption agreement, final barrier), so they
    # never queue behind NCCL kernels and keep their own sequence numbers apart from training's.
    ctrl_group = dist.new_group(backend="gloo")

    # Clock sample: every rank reads its wall clock right after the same barrier.
    dist.barrier()
    clock = {"wall_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns(), "after_barrier": True}
    entry = {
        "rank": renv.rank,
        "local_rank": renv.local_rank,
        "node": renv.node,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if use_cuda else platform.processor() or "cpu",
        "pid": os.getpid(),
        "launcher": renv.launcher,
        "slurm": renv.slurm,
        "clock": clock,
        "cpu_threads": torch.get_num_threads(),
        "node_cpus": _node_cpus(),
    }
    entries: list[Any] = [None] * renv.world_size
    dist.all_gather_object(entries, entry, group=ctrl_group)

    checkpoint = None
    if run.checkpoint_path.exists():
        checkpoint = torch.load(run.checkpoint_path, map_location=device, weights_only=False)
    start_step = checkpoint["step"] + 1 if checkpoint else 0

    if renv.rank == 0:
        manifest = run.read_manifest()
        attempts = manifest.get("attempts", [])
        attempts.append({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "resumed_from_step": start_step if checkpoint else None,
                         "job_id": renv.job_id})
        run.update_manifest(
            name=manifest.get("name", run.name),
            hpcprof_version=__version__,
            job_id=manifest.get("job_id") or renv.job_id,
            executor=manifest.get("executor") or renv.launcher,
            launcher=renv.launcher,
            spec=manifest.get("spec") or spec.to_dict(),
            world_size=renv.world_size,
            nodes=sorted({e["node"] for e in entries}),
            backend=backend,
            device="cuda" if use_cuda else "cpu",
            versions=collect_versions(),
            drills=_drills(spec),
            ranks=entries,
            attempts=attempts,
        )

    model = build_model(spec.model, device)
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None)
    if spec.model.compile:
        ddp = torch.compile(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=spec.train.lr, momentum=spec.train.momentum)
    scaler = torch.amp.GradScaler(device.type, enabled=spec.model.amp == "fp16")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.model.amp)
    criterion = torch.nn.CrossEntropyLoss()

    source = BatchSource(spec.data, spec.model, device, renv.rank, renv.world_size, spec.train.seed)
    if checkpoint:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scaler.load_state_dict(checkpoint["scaler"])
        source.set_position(checkpoint.get("epoch", 0))

    straggler = spec.drills.straggler_rank_ms
    sleep_s = straggler[1] / 1000.0 if straggler and straggler[0] == renv.rank else 0.0
    crash = spec.drills.crash_rank_step
    crash_step = crash[1] if crash and crash[0] == renv.rank else None

    writer = StepWriter(run, renv.rank, keep_until_step=start_step)
    timer = StepTimer(writer, use_cuda)
    watch = PreemptionWatch(ctrl_group)
    prof = make_profiler(spec.profiler, run, renv.rank, use_cuda, start_step)
    step = start_step
    preempted = False
    loop_start = time.perf_counter()
    try:
        with prof:
            for step in range(start_step, spec.train.steps):
                if watch.agreed():
                    preempted = True
                    break
                if crash_step is not None and step == crash_step:
                    err = DrillCrash(f"hpcprof crash drill: rank {renv.rank} raised at step {step} (--inject-crash)")
                    err.hpcprof_step = step  # type: ignore[attr-defined]
                    raise err
                profiled = prof.is_active_step(step)
                t_start = time.time()
                p0 = time.perf_counter()
                events = timer.start_gpu() if record_steps else None
                with record_function(REGION_DATA):
                    x, y = next(source)
                p_data = time.perf_counter()
                if sleep_s:
                    time.sleep(sleep_s)  # the straggler drill: an unexplained host-side delay
                p_fwd = time.perf_counter()
                with record_function(REGION_FORWARD):
                    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        loss = criterion(ddp(x), y)
                p_bwd = time.perf_counter()
                with record_function(REGION_BACKWARD):
                    scaler.scale(loss).backward()
                p_opt = time.perf_counter()
                with record_function(REGION_OPTIMIZER):
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=spec.train.zero_grad_set_to_none)
                p_end = time.perf_counter()
                if not record_steps:
                    prof.step()
                    continue
                record = {
                    "step": step,
                    "epoch": source.epoch,
                    "rank": renv.rank,
                    "t_start": t_start,
                    "t_end": t_start + (p_end - p0),
                    "step_s": p_end - p0,
                    "data_wait_s": p_data - p0,
                    "host_pre_forward_s": p_fwd - p0,
                    "drill_sleep_s": p_fwd - p_data if sleep_s else 0.0,
                    "forward_s": p_bwd - p_fwd,
                    "backward_s": p_opt - p_bwd,
                    "optimizer_s": p_end - p_opt,
                    "batch_size": spec.data.batch_size,
                    "profiled": profiled,
                }
                timer.finish(record, events)
                prof.step()
        watch.drain()
        timer.flush(block=True)
        loop_s = time.perf_counter() - loop_start
        if preempted:
            last_done = step - 1
            if renv.rank == 0:
                _save_checkpoint(run, last_done, model, optimizer, scaler, source.epoch)
            dist.barrier(group=ctrl_group)
            writer.close()
            _requeue(renv, watch)
        dist.barrier(group=ctrl_group)
    except BaseException as exc:
        if not isinstance(exc, SystemExit):
            exc.hpcprof_step = getattr(exc, "hpcprof_step", step)  # type: ignore[attr-defined]
            try:
                timer.flush(block=True)
            except Exception:
                pass
        raise
    finally:
        writer.close()
    dist.destroy_process_group()
    return {"rank": renv.rank, "node": renv.node, "last_step": spec.train.steps - 1, "resumed_from": start_step,
            "loop_s": loop_s, "steps_run": spec.train.steps - start_step}


def _drills(spec: JobSpec) -> dict[str, Any]:
    s, c = spec.drills.straggler_rank_ms, spec.drills.crash_rank_step
    return {
        "straggler": {"rank": s[0], "ms": s[1]} if s else None,
        "crash": {"rank": c[0], "step": c[1]} if c else None,
    }
