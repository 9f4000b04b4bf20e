"""Reading back the preemption checkpoint (checkpoint/latest.pt) when a requeued job starts again.

It is read with ``torch.load(weights_only=True)``: tensors, containers and plain values (the state
dicts of models, optimizers and scalers), and types the user registered with
``torch.serialization.add_safe_globals``. Never with arbitrary unpickling: a file planted in the run
directory (a pickle whose ``__reduce__`` calls ``os.system``) would run its code as soon as
``hpcprof.run()`` started. The writer is hpcprof.rank.session.Run._save_checkpoint.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ..rundir import RunDirError


def load_checkpoint(path: Path) -> dict | None:
    """checkpoint/latest.pt as ``Run._save_checkpoint`` writes it ({"step", "epoch", "time",
    "state"}), or None when there is none. Read with ``torch.load(weights_only=True)``: a pickle
    that would call a function (``os.system`` in a ``__reduce__``) is refused, never run. A file
    that cannot be read, or is not such a checkpoint, is a one-line RunDirError naming it."""
    if not path.exists():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about unusual pickle protocols before it refuses them
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        why = _load_error(exc)
    else:
        step, epoch = (ckpt.get("step"), ckpt.get("epoch", 0)) if isinstance(ckpt, dict) else (None, None)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (step, epoch)) and step >= -1 and epoch >= 0:
            return ckpt
        why = "not a checkpoint hpcprof wrote: no whole-number step and epoch"
    raise RunDirError(f"checkpoint {path} cannot be resumed from ({why}); hpcprof loads checkpoints with "
                      "torch.load(weights_only=True): register the state's own types with "
                      "torch.serialization.add_safe_globals, or move the file away to start from step 0")


def _load_error(exc: Exception) -> str:
    """torch.load's reason in one short line (its weights-only refusal is a paragraph whose first line
    is generic advice)."""
    generic = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    said = next((ln for ln in lines if not ln.startswith(generic)), lines[0] if lines else "")
    text = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
