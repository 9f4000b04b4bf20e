"""The built-in workload's own sections of the job spec: what the built-in ResNet trainer
(hpcprof.rank.resnet) trains (``[model]``) and where its batches come from (``[data]``), and the
``[train]`` fields only that trainer reads.

Why apart from the rest of the schema: a user's own training code (``workload.script`` or
``workload.entry``) has its own model, data and optimizer, so these settings mean nothing for it.
Its spec.toml and manifest carry none of them (:func:`builtin_only`, used by
``JobSpec.to_dict``), so a user's job never reads as "resnet50, batch 32". They are still read from
any job file (older run directories of user scripts hold them: their defaults).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

Arch = Literal["resnet18", "resnet34", "resnet50", "resnet101"]
DataSource = Literal["synthetic", "fakedata", "imagefolder"]
AmpMode = Literal["off", "auto", "bf16", "fp16"]
ARCHS: tuple[str, ...] = typing.get_args(Arch)
DATA_SOURCES: tuple[str, ...] = typing.get_args(DataSource)
AMP_MODES: tuple[str, ...] = typing.get_args(AmpMode)

BUILTIN_SECTIONS = ("model", "data")
"""Sections only the built-in trainer reads (every field)."""
BUILTIN_TRAIN_FIELDS = ("lr", "momentum", "zero_grad_set_to_none", "seed", "gradient_as_bucket_view")
"""The [train] fields only the built-in trainer reads (its SGD optimizer, its seed, its DDP wrapper);
train.steps, train.pg_timeout_s and train.hang_timeout_s apply to every workload."""


def builtin_only(dotted: str) -> bool:
    """Whether the field ``section.name`` is read by the built-in trainer alone."""
    section, _, name = dotted.partition(".")
    return section in BUILTIN_SECTIONS or (section == "train" and name in BUILTIN_TRAIN_FIELDS)


@dataclass
class Model:
    """What is trained."""

    arch: Arch = "resnet50"
    """torchvision ResNet: resnet18, resnet34, resnet50 or resnet101 (random weights)."""
    num_classes: int = 1000
    """Number of output classes."""
    image_size: int = 224
    """Square input image size in pixels."""
    channels_last: bool = False
    """Use the channels_last memory format for model and inputs."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    amp: AmpMode = "off"
    """Automatic mixed precision: "off", "bf16" (autocast), "fp16" (autocast with GradScaler), or
    "auto": bf16 on GPUs of compute capability 8.0+ (A100, H100), fp16 with GradScaler below (V100,
    whose bf16 convolutions fall back to slow kernels), off on CPU. "bf16" on a GPU below 8.0 is
    refused with that reason."""
    cudnn_benchmark: bool = True
    """torch.backends.cudnn.benchmark: let cuDNN time its convolution algorithms on the first steps
    and keep the fastest (fixed input shapes, as here). GPU only."""


@dataclass
class Data:
    """Where batches come from and how they reach the device."""

    source: DataSource = "synthetic"
    """"synthetic": random batches created once on the device (the compute upper bound);
    "fakedata": torchvision FakeData decoded on the CPU through a DataLoader; "imagefolder": an
    ImageFolder at `path`, through a DataLoader."""
    path: str = ""
    """Dataset root for source = "imagefolder"."""
    batch_size: int = 32
    """Batch size per rank."""
    num_workers: int = 0
    """DataLoader worker processes per rank."""
    pin_memory: bool = False
    """Pin host memory in the DataLoader (faster host-to-device copies)."""
    non_blocking: bool = False
    """Copy batches to the device with non_blocking=True."""
    prefetch_factor: int = 0
    """Batches prefetched per worker (needs num_workers > 0). 0: the DataLoader default."""
    persistent_workers: bool = False
    """Keep DataLoader workers alive across epochs (needs num_workers > 0)."""
    uint8_on_device: bool = False
    """Ship images as uint8 and convert/normalise them on the device instead of on the CPU."""
    dataset_size: int = 2048
    """Number of samples in the FakeData dataset (per epoch, all ranks together)."""
    raw_image_size: int = 0
    """FakeData only: generate images of this size and augment them on the CPU as ImageNet
    training does with decoded photos (RandomResizedCrop to model.image_size, horizontal flip)
    before ToTensor/Normalize: a slow input pipeline with real CPU work. 0: images are generated
    at model.image_size, no augmentation."""

    def steps_per_epoch(self, world_size: int) -> int | None:
        """Steps in one pass over the data (the DistributedSampler and the DataLoader both drop the
        last partial batch). None where it is not known before the job reads the data (imagefolder)
        or where there are no epochs (synthetic)."""
        if self.source != "fakedata":
            return None
        return (self.dataset_size // max(world_size, 1)) // max(self.batch_size, 1)
