"""The model: a torchvision ResNet with random weights, moved to the rank's device and wrapped."""

from __future__ import annotations

import torch
import torchvision

from ..spec import Model


def build_model(cfg: Model, device: torch.device) -> torch.nn.Module:
    model = getattr(torchvision.models, cfg.arch)(weights=None, num_classes=cfg.num_classes)
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model
