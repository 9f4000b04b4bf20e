"""Data sources of the rank side, and the ladder's options running under DDP."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from helpers import FAST_FLAGS, run_cli
from hpcprof.rundir import RunDir
from hpcprof.spec import Data, Model
from hpcprof.rank.data import BatchSource

CPU = torch.device("cpu")


def test_synthetic_batches_live_on_device_and_repeat():
    src = BatchSource(Data(batch_size=4), Model(image_size=32, num_classes=10, channels_last=True), CPU, 0, 1, seed=0)
    x1, y1 = next(src)
    x2, _ = next(src)
    assert x1.shape == (4, 3, 32, 32) and y1.shape == (4,)
    assert x1.is_contiguous(memory_format=torch.channels_last)
    assert x1 is x2  # generated once: no input pipeline cost at all


def test_fakedata_uint8_is_normalised_on_device_like_cpu_path():
    model = Model(image_size=32, num_classes=10)
    cpu_norm = BatchSource(Data(source="fakedata", batch_size=4, dataset_size=8), model, CPU, 0, 1, seed=0)
    dev_norm = BatchSource(Data(source="fakedata", batch_size=4, dataset_size=8, uint8_on_device=True), model, CPU, 0, 1, seed=0)
    (a, ya), (b, yb) = cpu_norm.to_device(next(cpu_norm)), dev_norm.to_device(next(dev_norm))
    assert a.dtype == b.dtype == torch.float32
    assert torch.equal(ya, yb)
    assert torch.allclose(a, b, atol=1e-5)  # same images, normalised on the CPU vs on the device


def test_uint8_images_go_channels_last_before_conversion_and_stay_so(monkeypatch):
    """Issue 18 item 19: the uint8 rung converts to channels_last while the images are 1 byte per
    value (the other order copied a float tensor, 4x the bytes); the normalised result keeps the
    format and equals the CPU-normalised images."""
    model = Model(image_size=32, num_classes=10, channels_last=True)
    cpu_norm = BatchSource(Data(source="fakedata", batch_size=4, dataset_size=8), model, CPU, 0, 1, seed=0)
    dev_norm = BatchSource(Data(source="fakedata", batch_size=4, dataset_size=8, uint8_on_device=True), model, CPU, 0, 1, seed=0)
    raw = next(dev_norm)
    assert raw[0].dtype == torch.uint8  # the loader's batch, before the copy region
    formats = []
    original = torch.Tensor.contiguous

    def spy(self, *args, **kwargs):
        formats.append(self.dtype)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "contiguous", spy)
    b, _ = dev_norm.to_device(raw)
    monkeypatch.undo()
    assert formats == [torch.uint8]  # the channels_last copy was made of the uint8 images
    assert b.dtype == torch.float32 and b.is_contiguous(memory_format=torch.channels_last)
    a, _ = cpu_norm.to_device(next(cpu_norm))
    assert torch.allclose(a, b, atol=1e-5)


def test_sampler_splits_dataset_between_ranks_and_advances_epochs():
    model = Model(image_size=32, num_classes=10)
    data = Data(source="fakedata", batch_size=2, dataset_size=8)
    r0 = BatchSource(data, model, CPU, 0, 2, seed=0)
    r1 = BatchSource(data, model, CPU, 1, 2, seed=0)
    assert r0.steps_per_epoch == 2
    first0 = [next(r0)[0] for _ in range(2)]
    first1 = [next(r1)[0] for _ in range(2)]
    assert not any(torch.equal(a, b) for a in first0 for b in first1)  # disjoint shards
    next(r0)
    assert r0.epoch == 1  # wrapped into the next epoch, sampler.set_epoch called


def test_imagefolder_source(tmp_path):
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(tmp_path / cls / f"{i}.png")
    src = BatchSource(Data(source="imagefolder", path=str(tmp_path), batch_size=3), Model(image_size=32, num_classes=2), CPU, 0, 1, seed=0)
    x, y = src.to_device(next(src))
    assert x.shape == (3, 3, 32, 32) and set(y.tolist()) <= {0, 1}
    assert abs(float(x.mean())) < 3  # normalised


def test_ladder_options_run_under_ddp(runs_root):
    """FakeData through 1 worker, uint8 to the device, bf16 autocast, channels_last, and zero-filled
    gradients (set_to_none=False: the non-default path; every other run takes PyTorch's default)."""
    proc = run_cli(
        "hpcprof.submit", *FAST_FLAGS, "--runs-dir", str(runs_root), "--name", "ladder",
        "--data-source", "fakedata", "--data-num-workers", "1", "--data-dataset-size", "64",
        "--data-uint8-on-device", "--model-amp", "bf16", "--model-channels-last",
        "--no-train-zero-grad-set-to-none", "--train-steps", "6",
    )
    assert proc.returncode == 0, proc.stdout
    run = RunDir(runs_root / "ladder")
    for rank in (0, 1):
        records = run.read_steps(rank)
        assert [r["step"] for r in records] == list(range(6))
        assert all(r["data_wait_s"] >= 0 for r in records)
    assert run.read_manifest()["spec"]["model"]["amp"] == "bf16"
    assert run.read_manifest()["spec"]["train"]["zero_grad_set_to_none"] is False
