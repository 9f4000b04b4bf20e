"""Issue 18 (the GPU path, checked without a GPU): each decision the rank side takes on a GPU is a
pure function or a small object, tested here with the values a GPU node would give it; the CUDA
events of the step timing are played by a fake GPU whose clock the test controls, so the step time
on the GPU's clock has a known answer.
"""

from __future__ import annotations

import json

import pytest
import torch

from hpcprof.rank.device import DeviceError, amp_plan, choose_device, gpus_requested, nccl_environment
from hpcprof.rank.failures import classify
from hpcprof.rank.drills import DrillCrash
from hpcprof.rundir import StepRecord, StepWriter


# ------------------------------------------------------------------ device choice (items 2, 15)
def _choose(**kw):
    args = dict(requested_gpus=4, cuda_available=True, device_count=4, local_rank=1, local_world_size=4,
                torch_version="2.3.0", torch_cuda="12.1")
    args.update(kw)
    return choose_device(**args)


def test_one_gpu_per_local_rank():
    assert _choose() == ("cuda", 1)
    assert _choose(requested_gpus=0) == ("cuda", 1)  # a torchrun on a GPU machine, no request: use them
    assert _choose(requested_gpus=0, cuda_available=False, device_count=0) == ("cpu", None)


def test_gpus_requested_but_cuda_unusable_stops_with_one_line_naming_torch_cuda_and_the_request():
    with pytest.raises(DeviceError) as e:
        _choose(cuda_available=False, device_count=0)  # driver older than the wheel's CUDA
    msg = str(e.value)
    assert "\n" not in msg and "4 GPU(s) requested" in msg and "CUDA 12.1" in msg and "torch 2.3.0" in msg
    with pytest.raises(DeviceError, match="CPU-only build"):
        _choose(cuda_available=False, device_count=0, torch_cuda=None)


def test_more_local_ranks_than_visible_gpus_is_refused_not_doubled_up():
    with pytest.raises(DeviceError, match="local rank 2 of 4 on this node, but only 2 GPU"):
        _choose(device_count=2, local_rank=2)
    # rank 0 of 4 would fit, but its node cannot run the job: refused on every rank alike
    with pytest.raises(DeviceError, match="only 2 GPU"):
        _choose(device_count=2, local_rank=0)


def test_what_slurm_allocated_counts_as_a_request():
    assert gpus_requested({"SLURM_GPUS_PER_NODE": "gpu:a100:8"}) == 8
    assert gpus_requested({"CUDA_VISIBLE_DEVICES": "0,1"}) == 0  # a desktop's setting is no request
    assert gpus_requested({}, spec_gpus_per_node=2) == 2


# ------------------------------------------------------------------ mixed precision (item 17)
def test_bf16_is_refused_on_a_v100_and_auto_takes_fp16_with_a_scaler_there():
    with pytest.raises(DeviceError, match="compute capability 7.0: bf16 needs sm80"):
        amp_plan("bf16", "cuda", (7, 0))
    assert amp_plan("auto", "cuda", (7, 0)).scaler and amp_plan("auto", "cuda", (7, 0)).dtype == "fp16"
    assert amp_plan("auto", "cuda", (9, 0)).dtype == "bf16" and not amp_plan("auto", "cuda", (9, 0)).scaler
    assert amp_plan("bf16", "cuda", (8, 0)).dtype == "bf16"
    assert amp_plan("auto", "cpu", None).dtype is None
    with pytest.raises(DeviceError, match="needs a GPU"):
        amp_plan("fp16", "cpu", None)


def test_the_ladder_amp_rung_runs_on_any_gpu():
    from hpcprof.spec import load_spec

    from helpers import REPO

    spec = load_spec(REPO / "jobs" / "ladder" / "06-amp.toml")
    for cap in ((7, 0), (8, 0), (9, 0)):
        assert amp_plan(spec.model.amp, "cuda", cap).dtype in ("fp16", "bf16")


# ------------------------------------------------------------------ NCCL settings (item 13)
def test_nccl_environment_keeps_pytorchs_error_handling_and_adds_the_flight_recorder(tmp_path):
    env = nccl_environment(tmp_path / "run", {}, "2.11.0+cu130")
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in env  # PyTorch's default (3) stays
    # torch 2.11 warns on every process group that the old name of the buffer size is deprecated
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_FR_BUFFER_SIZE"]) > 0
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(str(tmp_path / "run" / "nccl-flight-recorder"))
    assert env["NCCL_DEBUG"] == "WARN"
    old = nccl_environment(tmp_path / "run", {}, "2.5.1")  # before 2.8: the old name only
    assert int(old["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0 and "TORCH_FR_BUFFER_SIZE" not in old
    assert "NCCL_DEBUG" not in nccl_environment(tmp_path, {"NCCL_DEBUG": "INFO"}, "2.11.0")  # the user's setting wins
    mine = nccl_environment(tmp_path, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}, "2.11.0")
    assert "TORCH_FR_BUFFER_SIZE" not in mine  # the user's size, under either name, is left alone


# ------------------------------------------------------------------ failure classification (item 16)
@pytest.mark.parametrize("exc, kind, peer", [
    (DrillCrash("hpcprof crash drill: rank 1 raised at step 4"), "drill", False),
    (RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO), "
                  "NCCL version 2.20.5 ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
                  "NET/IB : Got completion from peer with error 12"), "nccl", False),
    (RuntimeError("NCCL error: remote process exited or there was a network error, NCCL version 2.20.5 "
                  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."),
     "nccl_remote", True),
    (RuntimeError("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for "
                  "300000 milliseconds before timing out."), "peer_timeout", True),
    (RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234"),
     "peer_closed", True),
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", False),
    (ValueError("shapes (3,) and (4,) not aligned"), "error", False),
])
def test_failures_are_classified_by_kind_not_by_the_word_nccl(exc, kind, peer):
    assert classify(exc) == (kind, peer)


# ------------------------------------------------------------------ the GPU clock (items 4, 7)
class FakeGPU:
    """One CUDA stream: events complete in order, each at the GPU time the work queued before it
    finishes. The test advances `now` (the GPU's progress) and queues work of known durations."""

    def __init__(self):
        self.queued_until = 0.0  # GPU time at which the work queued so far completes
        self.now = 0.0
        self.synchronized = 0

    def work(self, ms: float) -> None:
        self.queued_until = max(self.queued_until, self.now) + ms

    def event_class(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                self.at = max(gpu.queued_until, gpu.now)

            def query(self):
                return self.at is not None and gpu.now >= self.at

            def synchronize(self):
                gpu.synchronized += 1
                gpu.now = max(gpu.now, self.at)

            def elapsed_time(self, other):
                assert self.query() and other.query(), "elapsed_time of an event that has not completed"
                return other.at - self.at

        return Event


def _record(step: int) -> StepRecord:
    return StepRecord(step=step, epoch=0, rank=0, t_start=0.0, t_end=0.0, step_s=0.001, data_wait_s=0.0,
                      host_pre_forward_s=0.0, drill_sleep_s=0.0, forward_s=None, backward_s=None, optimizer_s=None,
                      batch_size=8, profiled=False)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_step_time_is_the_gpus_own_period_and_nothing_synchronises_in_the_loop(tmp_path, monkeypatch):
    from hpcprof.rank.timing import StepTimer

    gpu = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    path = tmp_path / "rank-0.jsonl"
    timer = StepTimer(StepWriter(path), use_cuda=True)
    durations = [30.0, 45.0, 25.0, 60.0, 40.0]
    for step, ms in enumerate(durations):
        timer.begin()
        gpu.work(ms)  # the step's kernels, issued in 1 ms of host time: the host runs ahead
        timer.end()
        timer.finish(_record(step))
    assert gpu.synchronized == 0
    assert path.read_text() == ""  # the GPU has not run anything yet: no record can be complete
    gpu.now = sum(durations[:3])  # the GPU finished three steps
    timer.flush_ready()
    done = _lines(path)
    assert [r["step"] for r in done] == [0, 1, 2]
    assert [r["gpu_ms"] for r in done] == pytest.approx(durations[:3])
    timer.close(block=True)  # the normal end waits for the last boundary, once
    assert gpu.synchronized == 1
    assert [r["gpu_ms"] for r in _lines(path)] == pytest.approx(durations)


def test_the_failure_path_never_waits_for_the_gpu(tmp_path, monkeypatch):
    """Item 4: a collective behind a dead peer never finishes; the records of the steps whose GPU
    time is unknown are written with gpu_ms null, and nothing synchronises."""
    from hpcprof.rank.timing import StepTimer

    gpu = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    path = tmp_path / "rank-0.jsonl"
    timer = StepTimer(StepWriter(path), use_cuda=True)
    for step in range(4):
        timer.begin()
        gpu.work(20.0)
        timer.end()
        timer.finish(_record(step))
    gpu.now = 45.0  # two steps done; the third is stuck forever
    timer.close(block=False)
    recs = _lines(path)
    assert gpu.synchronized == 0
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    assert [r["gpu_ms"] for r in recs] == [20.0, 20.0, None, None]


def test_a_host_pause_after_the_step_lands_in_the_next_steps_gpu_time(tmp_path, monkeypatch):
    """The trace export at the end of a profiling window happens after a step's boundary: the GPU
    idles during it, and that idle time is the next step's (which the analysis leaves out)."""
    from hpcprof.rank.timing import StepTimer

    gpu = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    path = tmp_path / "rank-0.jsonl"
    timer = StepTimer(StepWriter(path), use_cuda=True)
    timer.begin()
    gpu.work(20.0)
    timer.end()
    timer.finish(_record(0))
    gpu.now = 20.0 + 150.0  # the GPU drained the queue, then the host exported a trace for 150 ms
    timer.begin()
    gpu.work(20.0)
    timer.end()
    timer.finish(_record(1))
    timer.close(block=True)
    assert [r["gpu_ms"] for r in _lines(path)] == pytest.approx([20.0, 170.0])


# ------------------------------------------------------------------ the straggler drill on a GPU (item 9)
def test_the_straggler_drill_waits_for_the_gpu_queue_before_sleeping(monkeypatch):
    """A host sleep alone would be absorbed by the host's lead over the GPU; the drill first drains
    the queue, so the GPU idles for the whole sleep (its truth is then on the GPU's clock)."""
    from hpcprof.rank import drills as drills_mod
    from hpcprof.rank.drills import RankDrills

    calls = []

    class Stream:
        def synchronize(self):
            calls.append("synchronize")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: Stream())
    monkeypatch.setattr(drills_mod.time, "sleep", lambda s: calls.append(("sleep", s)))
    d = RankDrills(rank=1, sleep_s=0.06, sleep_every=2, sleep_from=10, sleep_to=20)
    assert d.straggle(8, use_cuda=True) == 0.0 and calls == []  # before the range
    d.straggle(12, use_cuda=True)
    assert calls == ["synchronize", ("sleep", 0.06)]
    calls.clear()
    d.straggle(13, use_cuda=True)  # not a multiple of EVERY
    d.straggle(22, use_cuda=True)  # after the range
    d.straggle(14, use_cuda=False)  # on CPU there is no queue to drain
    assert calls == [("sleep", 0.06)]


def test_the_peer_watch_finds_a_peer_that_died_in_native_code(tmp_path):
    """A rank killed by the NCCL watchdog's abort leaves no note, only faulthandler's record: its
    peers, stuck in a collective on their GPUs, must still stop."""
    from hpcprof.rank.failures import FailureContext, PeerWatch
    from hpcprof.rundir import RunDir

    run = RunDir(tmp_path)
    run.ensure_layout()
    watch = PeerWatch(FailureContext(run, rank=0, node="n1"))
    assert watch.root_failure() is None
    run.fatal_path(0).write_text("")  # this rank's own (empty) record is not a failure
    run.fatal_path(2).write_text("")  # nor another's empty one: that rank is alive or ended cleanly
    assert watch.root_failure() is None
    run.fatal_path(1).write_text("Fatal Python error: Aborted\n\nThread 0x01 (most recent call first):\n")
    root = watch.root_failure()
    assert root["rank"] == 1 and "Aborted" in root["error"]


# ------------------------------------------------------------------ process groups (items 12, 14)
class _Env:
    def export(self):  # RankEnv.export sets MASTER_ADDR/PORT, RANK...: not needed with the call faked
        pass


def test_nccl_gets_the_ranks_device_and_gloo_does_not(monkeypatch):
    import torch.distributed as dist

    from hpcprof.rank.env import init_process_group

    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    init_process_group(_Env(), "nccl", 77, torch.device("cuda", 3))
    init_process_group(_Env(), "gloo", 77, torch.device("cpu"))
    assert calls[0]["device_id"] == torch.device("cuda", 3) and calls[0]["backend"] == "nccl"
    assert "device_id" not in calls[1] and calls[1]["backend"] == "gloo"
    assert all(c["timeout"].total_seconds() == 77 for c in calls)


_GROUPS = """
import json, sys, tempfile
import torch.distributed as dist
seen = []
real = dist.new_group
def new_group(*a, **kw):
    seen.append(kw.get("timeout").total_seconds() if kw.get("timeout") is not None else None)
    return real(*a, **kw)
dist.new_group = new_group
import hpcprof
with tempfile.TemporaryDirectory() as tmp:
    with hpcprof.run(batch_size=1, steps=2, runs_dir=tmp, name="g", train={"pg_timeout_s": 77},
                     profiler={"enabled": False}) as run:
        for _ in run.steps(total=2):
            pass
print(json.dumps(seen))
"""


def test_the_control_groups_have_the_jobs_timeout_not_gloos_30_minutes(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_", "TORCHELASTIC"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-c", _GROUPS], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(seen) >= 2 and seen == [77.0] * len(seen), seen
