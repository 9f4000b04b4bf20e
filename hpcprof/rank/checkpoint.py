"""What the step loop saves for a requeue and restores after it: ``checkpoint/latest.pt`` in the run
directory, ``{"step", "epoch", "time", "state"}``, where ``state`` is what the user's saver returned
(hpcprof.rank.session.Run.checkpoint).

Every rank calls the saver (it may use collectives, e.g. FSDP's full state dict); rank 0 writes the
file under a temporary name, then renames it (readers never see half a checkpoint).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch

from ..rundir import RunDir


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


def read_checkpoint(run: RunDir) -> dict | None:
    """The checkpoint of an earlier attempt, or None. Loaded with ``weights_only=True``: a checkpoint
    holds tensors, numbers, strings and containers of them (what model and optimizer state dicts
    hold); anything else (an arbitrary pickled object) is refused, so that nobody who can write
    into a run directory can make a rank run code. Raises ValueError with one line naming the file
    when it cannot be read."""
    path = run.checkpoint_path
    if not path.exists():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several kinds for a corrupt or refused file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"checkpoint {path}: cannot be loaded ({first[:300]}); remove it to start afresh") from None
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        raise ValueError(f"checkpoint {path}: not an hpcprof checkpoint (no step); remove it to start afresh")
    return data


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
