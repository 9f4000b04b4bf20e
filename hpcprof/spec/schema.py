"""The job spec's schema: one dataclass per section, a docstring under every field, and the checks
that need several fields at once (:meth:`JobSpec.validate`).

Fields with a fixed set of values are typed ``Literal[...]``: the valid values are read from the
annotation (:func:`choices`), so the type, the validation and the error message ("valid values:
...") share one definition. TOML and value coercion are :mod:`.toml`, applying them to a spec
:mod:`.load`; the command-line flags are :mod:`.cli`. The ``[resources]`` section is :class:`hpcprof.slurm.resources.SlurmResources`
(shared with the analysis job array) plus the executor choice; the built-in trainer's own sections
(``[model]``, ``[data]``) are :mod:`.builtin`, the ``[drills]`` section :mod:`.drills`.

Over 300 lines on purpose: most of it is the docstring under each field (the user-facing
documentation that ``--help`` shows), and the cross-field checks belong next to the fields.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import typing
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Literal

from ..slurm.resources import ResourcesError, SlurmResources
from .builtin import BUILTIN_SECTIONS, Data, Model, builtin_only
from .drills import Drills
from .errors import SpecError
from .toml import to_toml

Cluster = Literal["auto", "slurm", "local", "debug"]
ProfilerMode = Literal["schedule", "triggered"]
TRIGGER_BASELINE_MIN_STEP = 10
"""Profiler mode "triggered": the baseline window starts at profiler.wait, but not before this step
(the first steps of a run are start-up: allocator, caches, DDP's bucket rebuild, the profiler's own)."""

CLUSTERS: tuple[str, ...] = typing.get_args(Cluster)
RUN_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass
class Resources(SlurmResources):
    """Where and on how much hardware the job runs: the SLURM resources, plus the executor."""

    cluster: Cluster = "auto"
    """Executor: "slurm" (submitit on a SLURM cluster), "local" (ranks as processes on this machine),
    "debug" (one rank inside the submitting process), or "auto": slurm when the SLURM client
    commands answer, else local."""
    pin_cores: bool = True
    """CPU ranks started by an hpcprof launcher outside SLURM (which binds tasks itself): each rank on
    its own slice of the cores (said on the console). --no-pin-cores leaves the placement to the
    scheduler, as torchrun does: step times then compare with the script's usual runs."""


@dataclass
class Train:
    """The step loop. lr, momentum, zero_grad_set_to_none, seed and gradient_as_bucket_view are the
    built-in trainer's own (hpcprof.spec.builtin.BUILTIN_TRAIN_FIELDS); steps, pg_timeout_s and
    hang_timeout_s apply to every workload."""

    steps: int = 20
    """Total training steps (global step count; a resumed run continues up to this number)."""
    lr: float = 0.1
    """SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum."""
    zero_grad_set_to_none: bool = True
    """optimizer.zero_grad(set_to_none=...): True (PyTorch's default since 2.0) frees the gradients
    between steps; False zero-fills them, one memset kernel per parameter tensor every step."""
    seed: int = 0
    """Random seed (model init and synthetic data)."""
    pg_timeout_s: int = 300
    """Process-group timeout in seconds (the training group and the CPU control group alike): a rank
    waiting longer than this for a dead or stuck peer fails instead of hanging until the job's time
    limit. A rank whose peer left a failure note stops within seconds anyway (hpcprof watches the
    run directory's failures/)."""
    hang_timeout_s: float = 60.0
    """The hang watchdog: a rank that has not completed a step for max(this, 20 x the median step time
    so far) seconds (zero-change mode: nor run a forward pass of the model) dumps every thread's Python
    stack and a hang note into hangs/, and so does every other rank as soon as it sees that note;
    then each ends (exit code 124) and submit names the rank the others waited for. The job ends
    within this timeout plus a few seconds, not the process-group timeout. Why a floor and 20 x the
    median: a healthy job's slowest steps (an evaluation, a checkpoint, a trace export, a loaded
    machine) stay well under 20 median steps, and the floor keeps jobs with quick steps from
    taking a pause for a hang. The median is sampled once a second from the step loop's own
    step-start time (nothing is added per step). Set train.pg_timeout_s above it, or the process
    group's timeout fires first. 0: off. PyTorch's flight recorder has no public dump call (only
    private names), so the watchdog does not dump it; on NCCL it is dumped by PyTorch at its
    own timeout (nccl-flight-recorder/)."""
    gradient_as_bucket_view: bool = True
    """DDP's gradient_as_bucket_view: gradients are views into the all-reduce buckets (no copy in and
    out of the buckets, less memory)."""


@dataclass
class Profiler:
    """torch.profiler settings, the same on every rank."""

    enabled: bool = True
    """Profile at all (False: step timings only)."""
    mode: ProfilerMode = "schedule"
    """"schedule": the fixed wait/warmup/active/repeat windows. "triggered": a baseline window early
    (its first warm-up step is `wait`, at least 10), then a window on every rank at once whenever the
    step records show that a rank has turned slow, or the whole job has (hpcprof.rank.trigger):
    the ranks share their step timings in the control rounds, and each capture (warm-up + active
    steps) goes to traces/capture-<k>/, with why it was taken in the manifest and steps/triggers.jsonl."""
    wait: int = 1
    """Schedule: steps skipped before warm-up (triggered: the baseline window's first step, at least 10)."""
    warmup: int = 1
    """Schedule: warm-up steps (traced, then discarded); triggered: of every capture."""
    active: int = 3
    """Schedule: steps recorded in the trace; triggered: of every capture."""
    repeat: int = 1
    """Schedule: number of wait/warmup/active cycles. Cycle 0 goes to traces/, cycle k > 0 to
    traces/cycle-<k>/, so each folder stays one trace per rank."""
    record_shapes: bool = False
    """Record operator input shapes."""
    profile_memory: bool = False
    """Record tensor allocations and frees."""
    with_stack: bool = False
    """Record Python stacks (large traces)."""
    with_flops: bool = False
    """Estimate FLOPs of matrix operators."""
    memory_snapshot: bool = False
    """GPU only: record the CUDA caching allocator's history from the start and write a memory
    snapshot per rank (memory/rank-<r>.pickle, for https://pytorch.org/memory_viz) when the first
    profiling window ends."""
    trigger_window: int = 0
    """Triggered: steps per window: at the end of every window, every rank's lateness is scored over
    the last trigger_windows windows. 0: chosen from the step time, about half a second (at least 4
    steps, at most 200)."""
    trigger_windows: int = 2
    """Triggered: windows scored together (the evidence a slowdown needs), and healthy scores running
    before a slowdown counts as over."""
    trigger_threshold_pct: float = 10.0
    """Triggered: a rank has turned slow when its lateness (its own time in the step, waits for the
    others left out, minus the others' median) exceeds max(trigger_min_ms, this % of the step), and
    exceeds its own lateness in its recent history by as much."""
    trigger_min_ms: float = 1.0
    """Triggered: the smallest lateness that can count, in ms."""
    trigger_job_pct: float = 50.0
    """Triggered: the whole job has turned slow when its step time (the slowest rank's) rose by this
    % over its own recent median, in trigger_windows windows running."""
    max_captures: int = 3
    """Triggered: captures after the baseline window, at most, per job."""
    min_gap_steps: int = 50
    """Triggered: steps at least between the end of a capture and the start of the next."""


@dataclass
class Workload:
    """What every rank runs: the built-in ResNet trainer (the [model] and [data] sections), or your
    own training code, which uses the step-loop API (``hpcprof.run()``, README: "Your own training
    script") and so gets step records, drills, the profiler and requeue like the built-in trainer."""

    entry: str = ""
    """Your training function as "package.module:function", called with no arguments on every rank
    (importable there: installed, or on PYTHONPATH). Empty (with script empty): the built-in trainer."""
    script: str = ""
    """Your training script (a .py file), run on every rank as ``python SCRIPT ARGS`` would run it
    (as __main__, with sys.argv = [SCRIPT, *args]). Every node must see the file."""
    args: list = field(default_factory=list)
    """Arguments for the script or the function (its sys.argv[1:]): on the command line, everything
    after ``--``."""

    @property
    def builtin(self) -> bool:
        """The built-in ResNet trainer runs (no entry, no script)."""
        return not self.entry and not self.script

    @property
    def label(self) -> str:
        """A short name for run names: the script's stem, the function's name, or "resnet"."""
        if self.script:
            stem = self.script.replace("\\", "/").rsplit("/", 1)[-1]
            return stem[:-3] if stem.endswith(".py") else stem
        if self.entry:
            return self.entry.rsplit(":", 1)[-1]
        return "resnet"


SECTIONS: dict[str, type] = {
    "resources": Resources,
    "model": Model,
    "data": Data,
    "train": Train,
    "profiler": Profiler,
    "drills": Drills,
    "workload": Workload,
}


@dataclass
class JobSpec:
    """A whole job: top-level fields plus one object per section."""

    name: str = ""
    """Run directory name ([A-Za-z0-9._-]+). Empty: derived from the spec and the time."""
    runs_dir: str = "runs"
    """Folder holding run directories."""
    resources: Resources = field(default_factory=Resources)
    model: Model = field(default_factory=Model)
    data: Data = field(default_factory=Data)
    train: Train = field(default_factory=Train)
    profiler: Profiler = field(default_factory=Profiler)
    drills: Drills = field(default_factory=Drills)
    workload: Workload = field(default_factory=Workload)

    # ----------------------------------------------------------------- conversion
    def to_dict(self) -> dict[str, Any]:
        """The spec as a dict (the manifest's `spec`, spec.toml). A user's own workload (script or
        entry) leaves out the built-in trainer's settings (:func:`.builtin.builtin_only`): its model,
        data and optimizer are the user's, and a default such as model.arch = "resnet50" would
        describe a job that never ran."""
        d = dataclasses.asdict(self)
        if not self.workload.builtin:
            for section in list(d):
                if isinstance(d[section], dict):
                    d[section] = {k: v for k, v in d[section].items() if not builtin_only(f"{section}.{k}")}
                    if not d[section] and section in BUILTIN_SECTIONS:
                        del d[section]
        return d

    def to_toml(self) -> str:
        """The spec as a TOML job file (what ``spec.toml`` in a run directory holds)."""
        return to_toml(self.to_dict())

    @property
    def world_size(self) -> int:
        """Ranks in the job; tasks_per_node must be resolved (non-zero) for this to be exact."""
        return self.resources.nodes * max(self.resources.tasks_per_node, 1)

    # ----------------------------------------------------------------- validation
    def traced_epoch_boundaries(self) -> list[tuple[int, int, int]]:
        """(cycle, first traced step, boundary step) for every step that starts a new epoch inside
        a traced window (the profiler's warm-up and active steps of each cycle).

        Why it matters: at an epoch boundary the DataLoader starts a new iterator (its workers and
        prefetch queue start over), so that one step waits for data far longer than any other (a
        ResNet-50 rung: 784.6 ms against 1-12 ms) and a trace holding it blames the data loader for
        a once-per-epoch cost. Steps per epoch use the spec's world size (tasks_per_node resolved)."""
        spe = self.data.steps_per_epoch(self.world_size)
        p = self.profiler
        if not p.enabled or not spe:
            return []
        period = p.wait + p.warmup + p.active
        out = []
        for cycle in range(p.repeat):
            first, last = cycle * period + p.wait, cycle * period + period - 1
            b = -(-max(first, 1) // spe) * spe  # first multiple of spe >= max(first, 1)
            while b <= min(last, self.train.steps - 1):
                out.append((cycle, first, b))
                b += spe
        return out

    def warnings(self) -> list[str]:
        """Valid but probably unintended settings, said before the job runs (the job still runs)."""
        out = []
        t = self.train
        if t.hang_timeout_s and t.hang_timeout_s >= t.pg_timeout_s:
            out.append(f"train.hang_timeout_s {t.hang_timeout_s:g} is not below train.pg_timeout_s {t.pg_timeout_s}: a hung "
                       "job fails at the process group's timeout, without the hang verdict; lower the first or raise the second")
        if not self.workload.builtin:
            base = JobSpec()
            ignored = [f"{section}.{f.name}" for section in ("model", "data", "train")
                       for f in fields(getattr(self, section)) if builtin_only(f"{section}.{f.name}")
                       and getattr(getattr(self, section), f.name) != getattr(getattr(base, section), f.name)]
            if ignored:
                what = f"--script {self.workload.script}" if self.workload.script else f"--entry {self.workload.entry}"
                out.append(f"{', '.join(ignored)} set the built-in ResNet trainer only; your workload ({what}) ignores "
                           "them and the run directory does not record them (pass your settings after --)")
        crossings = self.traced_epoch_boundaries()
        if crossings:
            d, p = self.data, self.profiler
            spe = d.steps_per_epoch(self.world_size)
            steps = ", ".join(str(b) for _, _, b in crossings)
            need = self.train.steps * d.batch_size * self.world_size
            out.append(
                f"the profiled window crosses an epoch boundary at step(s) {steps}: data.dataset_size {d.dataset_size} / "
                f"(data.batch_size {d.batch_size} x {self.world_size} rank(s)) = {spe} steps per epoch, and the profiler "
                f"traces steps {p.wait}-{p.wait + p.warmup + p.active - 1} of each cycle (profiler.wait {p.wait}, warmup "
                f"{p.warmup}, active {p.active}); a new epoch restarts the DataLoader, so that step waits for data and the "
                f"trace blames the data loader. Set data.dataset_size >= {need} (one epoch for all train.steps) or move the "
                "window with profiler.wait"
            )
        return out

    def validate(self, world_size: int | None = None) -> "JobSpec":
        """Refuse impossible values with the reason. `world_size`, when known, checks drill ranks."""
        r, m, d, t, p = self.resources, self.model, self.data, self.train, self.profiler
        if self.name:
            validate_run_name(self.name, "name")
        for section, cls in SECTIONS.items():
            for name, valid in choices(cls).items():
                _choice(f"{section}.{name}", getattr(getattr(self, section), name), valid)
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
        if d.batch_size * max(self.world_size, 1) > d.dataset_size and d.source == "fakedata":
            raise SpecError(
                f"data.dataset_size = {d.dataset_size} is smaller than one global batch "
                f"(batch_size {d.batch_size} x {self.world_size} ranks)"
            )
        for key, value in (("profiler.trigger_threshold_pct", p.trigger_threshold_pct),
                           ("profiler.trigger_min_ms", p.trigger_min_ms), ("profiler.trigger_job_pct", p.trigger_job_pct)):
            if not (value >= 0 and value < float("inf")):  # also refuses NaN
                raise SpecError(f"{key} must be a finite number >= 0, got {value}")
        if p.enabled and p.mode == "triggered" and p.repeat != 1:
            raise SpecError("profiler.repeat applies to mode 'schedule'; in mode 'triggered' the captures are "
                            "decided by the run (profiler.max_captures bounds them)")
        if p.enabled:
            needed = (max(p.wait, TRIGGER_BASELINE_MIN_STEP) if p.mode == "triggered" else p.wait) + p.warmup + p.active
            if t.steps < needed * p.repeat:
                raise SpecError(
                    f"train.steps = {t.steps} is fewer than the profiler schedule needs: (wait {p.wait} + "
                    f"warmup {p.warmup} + active {p.active}) x repeat {p.repeat} = {needed * p.repeat}"
                )
        ws = world_size or (self.world_size if r.tasks_per_node else None)
        for key, pair in (("drills.straggler", self.drills.straggler_rank_ms), ("drills.crash", self.drills.crash_rank_step),
                          ("drills.hang", self.drills.hang_rank_step),
                          ("drills.mismatch", self.drills.mismatch_rank_step)):
            if pair is None:
                continue
            rank, value = pair
            if rank < 0 or (ws is not None and rank >= ws):
                raise SpecError(f"{key}: rank {rank} does not exist (world size {ws})")
            if value < 0:
                raise SpecError(f"{key}: {value} must be >= 0")
        self.drills.clock_skew_node_ms  # refused here, before anything runs, when malformed
        w = self.workload
        if w.entry and w.script:
            raise SpecError("workload.entry and workload.script are exclusive: give one (--entry or --script)")
        if w.entry and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", w.entry):
            raise SpecError(f"workload.entry must look like package.module:function, got {w.entry!r}")
        if not isinstance(w.args, list) or not all(isinstance(a, str) for a in w.args):
            raise SpecError("workload.args must be a list of strings")
        if w.args and w.builtin:
            raise SpecError("workload.args are for --entry or --script; the built-in trainer takes spec flags")
        for key, pair in (("drills.crash", self.drills.crash_rank_step), ("drills.hang", self.drills.hang_rank_step),
                          ("drills.mismatch", self.drills.mismatch_rank_step)):
            if pair and pair[1] >= t.steps:
                raise SpecError(f"{key}: step {pair[1]} is never reached (train.steps = {t.steps})")
        return self


# --------------------------------------------------------------------------- helpers
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
        raise SpecError(f"{what} {name!r} is not valid: it must not start with '-' (commands would take it for an option)")
    return name


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field (the torchtitan convention), base classes
    included (``Resources`` inherits the SLURM fields)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):  # pragma: no cover - source not available
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                    docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs
