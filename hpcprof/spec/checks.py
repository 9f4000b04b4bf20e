"""The checks of a job spec (hpcprof.spec.schema.JobSpec) that need more than one field's type.

Guarantees: :func:`validate_spec` refuses every impossible spec before anything runs, with a
SpecError of one line naming the key and what is valid; :func:`spec_warnings` names settings that
are valid but probably unintended (the job still runs). A field typed ``Literal[...]`` is checked
against its annotation (:func:`choices`), so the type, the check and the message share one
definition. A run name is checked by :func:`validate_run_name` wherever one is given.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import fields
from functools import lru_cache
from typing import Literal

from .resources import ResourcesError
from .builtin import builtin_only
from .errors import SpecError

RUN_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@lru_cache(maxsize=None)
def choices(cls: type) -> dict[str, tuple[str, ...]]:
    """{field: valid values} for the fields of ``cls`` typed ``Literal[...]``."""
    hints = typing.get_type_hints(cls)
    return {f.name: typing.get_args(hints[f.name]) for f in fields(cls)
            if typing.get_origin(hints[f.name]) is Literal}


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise SpecError(f"{key} = {value!r} is not valid; valid values: {', '.join(valid)}")


def validate_run_name(name: str, what: str = "run name") -> str:
    """A run name is one folder name, never a path, and never starts with "-" (the sbatch scripts
    pass it to the ranks as ``--name "$RUN_NAME"``, where "-x" reads as an option, and every shell
    command on the folder would take it for one)."""
    if not RUN_NAME_RE.fullmatch(name or "") or name in (".", ".."):
        raise SpecError(
            f"{what} {name!r} is not valid: use letters, digits, '.', '_' and '-' only (a folder name, not a path)"
        )
    if name.startswith("-"):
        raise SpecError(f"{what} {name!r} is not valid: it must not start with '-' "
                        "(commands would take it for an option)")
    return name


def traced_epoch_boundaries(spec) -> list[tuple[int, int, int]]:
    """(cycle, first traced step, boundary step) for every step that starts a new epoch inside
    a traced window (the profiler's warm-up and active steps of each cycle).

    Why it matters: at an epoch boundary the DataLoader starts a new iterator (its workers and
    prefetch queue start over), so that one step waits for data far longer than any other
    (many times a usual step, as the ladder's ResNet-50 rungs show) and a trace holding it blames
    the data loader for a once-per-epoch cost. Steps per epoch use the spec's world size (tasks_per_node resolved)."""
    spe = spec.data.steps_per_epoch(spec.world_size)
    p = spec.profiler
    if not p.enabled or not spe:
        return []
    period = p.wait + p.warmup + p.active
    out = []
    for cycle in range(p.repeat):
        first, last = cycle * period + p.wait, cycle * period + period - 1
        b = -(-max(first, 1) // spe) * spe  # first multiple of spe >= max(first, 1)
        while b <= min(last, spec.train.steps - 1):
            out.append((cycle, first, b))
            b += spe
    return out


def spec_warnings(spec) -> list[str]:
    """Valid but probably unintended settings, said before the job runs (the job still runs)."""
    out = []
    t = spec.train
    if t.hang_timeout_s and t.hang_timeout_s >= t.pg_timeout_s:
        out.append(f"train.hang_timeout_s {t.hang_timeout_s:g} is not below train.pg_timeout_s {t.pg_timeout_s}: "
                   "a hung job fails at the process group's timeout, without the hang verdict; "
                   "lower the first or raise the second")
    if not spec.workload.builtin:
        base = type(spec)()  # the defaults
        ignored = [f"{section}.{f.name}" for section in ("model", "data", "train")
                   for f in fields(getattr(spec, section)) if builtin_only(f"{section}.{f.name}")
                   and getattr(getattr(spec, section), f.name) != getattr(getattr(base, section), f.name)]
        if ignored:
            what = f"--script {spec.workload.script}" if spec.workload.script else f"--entry {spec.workload.entry}"
            out.append(f"{', '.join(ignored)} set the built-in ResNet trainer only; your workload ({what}) ignores "
                       "them and the run directory does not record them (pass your settings after --)")
    crossings = traced_epoch_boundaries(spec)
    if crossings:
        d, p = spec.data, spec.profiler
        spe = d.steps_per_epoch(spec.world_size)
        steps = ", ".join(str(b) for _, _, b in crossings)
        need = spec.train.steps * d.batch_size * spec.world_size
        out.append(
            f"the profiled window crosses an epoch boundary at step(s) {steps}: data.dataset_size {d.dataset_size} / "
            f"(data.batch_size {d.batch_size} x {spec.world_size} rank(s)) = {spe} steps per epoch, and the profiler "
            f"traces steps {p.wait}-{p.wait + p.warmup + p.active - 1} of each cycle (profiler.wait {p.wait}, warmup "
            f"{p.warmup}, active {p.active}); a new epoch restarts the DataLoader, so that step waits for data and the "
            f"trace blames the data loader. Set data.dataset_size >= {need} (one epoch for all train.steps) "
            "or move the window with profiler.wait"
        )
    return out


def validate_spec(spec, world_size: int | None = None) -> None:
    """Refuse impossible values with the reason (SpecError, one line naming the key). `world_size`,
    when known, checks drill ranks."""
    r, m, d, t, p = spec.resources, spec.model, spec.data, spec.train, spec.profiler
    if spec.name:
        validate_run_name(spec.name, "name")
    for section in (f.name for f in fields(spec) if dataclasses.is_dataclass(getattr(spec, f.name))):
        for name, valid in choices(type(getattr(spec, section))).items():
            _choice(f"{section}.{name}", getattr(getattr(spec, section), name), valid)
    try:
        r.validate(name=lambda f: f"resources.{f}")
    except ResourcesError as exc:
        raise SpecError(str(exc)) from None
    for key, value, low in [
        ("model.num_classes", m.num_classes, 2),
        ("model.image_size", m.image_size, 32),
        ("data.batch_size", d.batch_size, 1),
        ("data.num_workers", d.num_workers, 0),
        ("data.prefetch_factor", d.prefetch_factor, 0),
        ("data.dataset_size", d.dataset_size, 1),
        ("data.raw_image_size", d.raw_image_size, 0),
        ("train.steps", t.steps, 1),
        ("train.pg_timeout_s", t.pg_timeout_s, 1),
        ("profiler.wait", p.wait, 0),
        ("profiler.warmup", p.warmup, 0),
        ("profiler.active", p.active, 1),
        ("profiler.repeat", p.repeat, 1),
        ("profiler.trigger_window", p.trigger_window, 0),
        ("profiler.trigger_windows", p.trigger_windows, 1),
        ("profiler.max_captures", p.max_captures, 0),
        ("profiler.min_gap_steps", p.min_gap_steps, 0),
    ]:
        if value < low:
            raise SpecError(f"{key} must be >= {low}, got {value}")
    if not 0 <= t.hang_timeout_s < float("inf"):  # also refuses NaN
        raise SpecError(f"train.hang_timeout_s must be a number of seconds >= 0 (0: off), got {t.hang_timeout_s}")
    if not t.lr > 0:  # also refuses NaN
        raise SpecError(f"train.lr must be > 0, got {t.lr}")
    if not t.momentum >= 0:  # also refuses NaN
        raise SpecError(f"train.momentum must be >= 0, got {t.momentum}")
    if r.cluster in ("local", "debug") and r.nodes != 1:
        raise SpecError(
            f"resources.nodes = {r.nodes} is impossible with cluster = {r.cluster!r}: it runs on this "
            "machine only; use cluster = 'slurm' for several nodes"
        )
    if d.source == "imagefolder" and not d.path:
        raise SpecError("data.path is required when data.source = 'imagefolder'")
    if d.source == "synthetic" and (d.num_workers or d.pin_memory or d.prefetch_factor):
        raise SpecError(
            "data.num_workers / pin_memory / prefetch_factor need a DataLoader: set data.source to "
            "'fakedata' or 'imagefolder' (synthetic batches already live on the device)"
        )
    if d.num_workers == 0 and (d.prefetch_factor or d.persistent_workers):
        raise SpecError("data.prefetch_factor and data.persistent_workers need data.num_workers > 0")
    if d.raw_image_size and d.source != "fakedata":
        raise SpecError("data.raw_image_size applies to data.source = 'fakedata' only")
    if d.batch_size * max(spec.world_size, 1) > d.dataset_size and d.source == "fakedata":
        raise SpecError(
            f"data.dataset_size = {d.dataset_size} is smaller than one global batch "
            f"(batch_size {d.batch_size} x {spec.world_size} ranks)"
        )
    for key, value in (("profiler.trigger_threshold_pct", p.trigger_threshold_pct),
                       ("profiler.trigger_min_ms", p.trigger_min_ms), ("profiler.trigger_job_pct", p.trigger_job_pct)):
        if not (value >= 0 and value < float("inf")):  # also refuses NaN
            raise SpecError(f"{key} must be a finite number >= 0, got {value}")
    if p.enabled and p.mode == "triggered" and p.repeat != 1:
        raise SpecError("profiler.repeat applies to mode 'schedule'; in mode 'triggered' the captures are "
                        "decided by the run (profiler.max_captures bounds them)")
    if p.enabled:
        needed = p.first_window_step + p.warmup + p.active
        if t.steps < needed * p.repeat:
            raise SpecError(
                f"train.steps = {t.steps} is fewer than the profiler schedule needs: (wait {p.wait} + "
                f"warmup {p.warmup} + active {p.active}) x repeat {p.repeat} = {needed * p.repeat}"
            )
    ws = world_size or (spec.world_size if r.tasks_per_node else None)
    for key, pair in (("drills.straggler", spec.drills.straggler_rank_ms),
                      ("drills.crash", spec.drills.crash_rank_step), ("drills.hang", spec.drills.hang_rank_step),
                      ("drills.mismatch", spec.drills.mismatch_rank_step)):
        if pair is None:
            continue
        rank, value = pair
        if rank < 0 or (ws is not None and rank >= ws):
            raise SpecError(f"{key}: rank {rank} does not exist (world size {ws})")
        if value < 0:
            raise SpecError(f"{key}: {value} must be >= 0")
    spec.drills.clock_skew_node_ms  # refused here, before anything runs, when malformed
    w = spec.workload
    if w.entry and w.script:
        raise SpecError("workload.entry and workload.script are exclusive: give one (--entry or --script)")
    if w.entry and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", w.entry):
        raise SpecError(f"workload.entry must look like package.module:function, got {w.entry!r}")
    if not isinstance(w.args, list) or not all(isinstance(a, str) for a in w.args):
        raise SpecError("workload.args must be a list of strings")
    if w.args and w.builtin:
        raise SpecError("workload.args are for --entry or --script; the built-in trainer takes spec flags")
    for key, pair in (("drills.crash", spec.drills.crash_rank_step), ("drills.hang", spec.drills.hang_rank_step),
                      ("drills.mismatch", spec.drills.mismatch_rank_step)):
        if pair and pair[1] >= t.steps:
            raise SpecError(f"{key}: step {pair[1]} is never reached (train.steps = {t.steps})")
