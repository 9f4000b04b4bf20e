"""What the step loop saves for a requeue and restores after it: ``checkpoint/latest.pt`` in the run
directory, ``{"step", "epoch", "time", "state"}``, where ``state`` is what the user's saver returned
(hpcprof.rank.session.Run.checkpoint).

It is read back with ``torch.load(weights_only=True)``: tensors, containers and plain values (the state
dicts of models, optimizers and scalers), and types the user registered with
``torch.serialization.add_safe_globals``. Never with arbitrary unpickling: a file planted in the run
directory (a pickle whose ``__reduce__`` calls ``os.system``) would run its code as soon as
``hpcprof.run()`` started.

Every rank calls the saver (it may use collectives, e.g. FSDP's full state dict); rank 0 writes the
file under a temporary name, then renames it (readers never see half a checkpoint).
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from ..rundir import RunDir, RunDirError


class Saver:
    """The state to save and how to restore it, from ``run.checkpoint(...)``'s arguments."""

    def __init__(self, save: Callable[[], Any], load: Callable[[Any], None] | None):
        self.save = save
        self.load = load

    @classmethod
    def of(cls, obj: Any = None, save=None, load=None, named: dict[str, Any] | None = None,
           error=ValueError) -> "Saver":
        """From one object with ``state_dict()``/``load_state_dict()``, ``save=``/``load=`` callables, or
        named objects (``model=``, ``optimizer=``, ...: saved together as a dict of their state dicts)."""
        named = {k: v for k, v in (named or {}).items() if v is not None}
        given = sum(x is not None and x != {} for x in (obj, save or load, named))
        if given != 1:
            raise error("run.checkpoint(): give one object, or named objects (model=..., optimizer=...), "
                        "or save=/load= callables")
        for key, o in ([("", obj)] if obj is not None else []) + list(named.items()):
            if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")):
                where = f"{key}=" if key else ""
                raise error(f"run.checkpoint({where}{type(o).__name__}): the object needs state_dict() and "
                            "load_state_dict(state); or pass save= and load= callables")
        if obj is not None:
            return cls(obj.state_dict, obj.load_state_dict)
        if named:
            return cls(lambda: {k: o.state_dict() for k, o in named.items()},
                       lambda state: [o.load_state_dict(state[k]) for k, o in named.items()])
        if save is None:
            raise error("run.checkpoint() needs save= (and load= to restore)")
        return cls(save, load)


def load_checkpoint(path: Path) -> dict | None:
    """checkpoint/latest.pt as :func:`write_checkpoint` writes it ({"step", "epoch", "time",
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


def write_checkpoint(run: RunDir, rank: int, saver: Saver | None, last_step: int, epoch: int) -> None:
    """Every rank calls the saver; rank 0 writes checkpoint/latest.pt (temporary name, then rename)."""
    state = saver.save() if saver else None
    if rank != 0:
        return
    path = run.checkpoint_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    payload = {"step": last_step, "epoch": epoch, "time": time.time()}
    if saver is not None:
        payload["state"] = state
    torch.save(payload, tmp)
    os.replace(tmp, path)
