"""Batches for the step loop: synthetic on the device, torchvision FakeData, or an ImageFolder, with a
DistributedSampler whose epoch is set at each pass.

Getting a batch (:meth:`BatchSource.__next__`, the step's ``data`` region: the input pipeline
alone) and moving it to the device (:meth:`BatchSource.to_device`, the ``copy`` region) are two
steps: on a GPU a copy from pageable memory waits for the GPU to finish the previous step's work, so
timing both as "data" would blame the input pipeline for a GPU-bound step."""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import DataLoader, DistributedSampler

from ..spec import Data, Model

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class BatchSource:
    """An endless iterator of (images, labels) already on the device, in the right memory format."""

    def __init__(self, data: Data, model: Model, device: torch.device, rank: int, world_size: int, seed: int):
        self.data, self.model, self.device = data, model, device
        self.epoch = 0
        self.loader: DataLoader | None = None
        self.sampler: DistributedSampler | None = None
        self._it: Iterator | None = None
        self._mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
        if data.source == "synthetic":
            g = torch.Generator(device="cpu").manual_seed(seed + rank)
            size = (data.batch_size, 3, model.image_size, model.image_size)
            x = torch.randn(size, generator=g).to(device)
            y = torch.randint(0, model.num_classes, (data.batch_size,), generator=g).to(device)
            if model.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            self._synthetic = (x, y)
            return
        dataset = self._dataset()
        self.sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
        kwargs = {}
        if data.num_workers > 0:
            kwargs["persistent_workers"] = data.persistent_workers
            if data.prefetch_factor:
                kwargs["prefetch_factor"] = data.prefetch_factor
        self.loader = DataLoader(
            dataset,
            batch_size=data.batch_size,
            sampler=self.sampler,
            num_workers=data.num_workers,
            pin_memory=data.pin_memory and device.type == "cuda",
            drop_last=True,
            **kwargs,
        )

    def _dataset(self):
        import torchvision
        from torchvision import transforms as T

        size = self.model.image_size
        if self.data.uint8_on_device:
            to_tensor = [T.PILToTensor()]  # uint8, converted and normalised on the device
        else:
            to_tensor = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        if self.data.source == "fakedata":
            raw = self.data.raw_image_size
            augment = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()] if raw else []
            return torchvision.datasets.FakeData(
                size=self.data.dataset_size,
                image_size=(3, raw or size, raw or size),
                num_classes=self.model.num_classes,
                transform=T.Compose([*augment, *to_tensor]),
                random_offset=0,
            )
        return torchvision.datasets.ImageFolder(
            self.data.path,
            transform=T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *to_tensor]),
        )

    def set_position(self, epoch: int) -> None:
        self.epoch = epoch
        self._it = None

    def __iter__(self):
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch as the loader gives it (on the host; synthetic batches already live on
        the device)."""
        if self.loader is None:
            return self._synthetic
        while True:
            if self._it is None:
                self.sampler.set_epoch(self.epoch)
                self._it = iter(self.loader)
            try:
                return next(self._it)
            except StopIteration:
                self.epoch += 1
                self._it = None

    def to_device(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch on the device, in the model's memory format (uint8 images are normalised there:
        put in channels_last first, while they are 1 byte per value, then converted, which keeps
        the format; the other order copied a float tensor of 4x the bytes)."""
        x, y = batch
        if self.loader is None:
            return x, y
        nb = self.data.non_blocking
        x = x.to(self.device, non_blocking=nb)
        y = y.to(self.device, non_blocking=nb)
        if self.model.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if self.data.uint8_on_device:
            x = (x.float().div_(255.0) - self._mean) / self._std
        return x, y

    @property
    def steps_per_epoch(self) -> int | None:
        return len(self.loader) if self.loader is not None else None
