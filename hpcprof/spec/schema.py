"""The job spec's schema: one dataclass per section, a docstring under every field (the user-facing
documentation that ``--help`` shows, read by :func:`field_docs`).

Fields with a fixed set of values are typed ``Literal[...]``: the valid values are read from the
annotation (:func:`.checks.choices`), so the type, the validation and the error message ("valid
values: ...") share one definition. The checks that need several fields at once are :mod:`.checks`
(:meth:`JobSpec.validate`, :meth:`JobSpec.warnings`). TOML and value coercion are :mod:`.toml`, applying them to a spec
:mod:`.load`; the command-line flags are :mod:`.cli`. The ``[resources]`` section is
:class:`hpcprof.spec.resources.SlurmResources`
(shared with the analysis job array) plus the executor choice; the built-in trainer's own sections
(``[model]``, ``[data]``) are :mod:`.builtin`, the ``[drills]`` section :mod:`.drills`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from .resources import SlurmResources
from .builtin import BUILTIN_SECTIONS, Data, Model, builtin_only
from .checks import spec_warnings, traced_epoch_boundaries, validate_spec
from .drills import Drills

Cluster = Literal["auto", "slurm", "local", "debug"]
ProfilerMode = Literal["schedule", "triggered"]
TRIGGER_BASELINE_MIN_STEP = 10
"""Profiler mode "triggered": the baseline window starts at profiler.wait, but not before this step
(the first steps of a run are start-up: allocator, caches, DDP's bucket rebuild, the profiler's own)."""

CLUSTERS: tuple[str, ...] = typing.get_args(Cluster)


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
    profiling window ends, and memory/rank-<r>.oom.pickle at an out-of-memory failure; `analyze`
    names the blocks live at each snapshot's peak and the lines that allocated them."""
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

    @property
    def first_window_step(self) -> int:
        """The first step of the first profiled window: `wait`, in mode "triggered" at least
        TRIGGER_BASELINE_MIN_STEP."""
        return max(self.wait, TRIGGER_BASELINE_MIN_STEP) if self.mode == "triggered" else self.wait


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
        """The spec as a TOML job file (what ``spec.toml`` in a run directory holds): each section a
        table, resources.slurm_extra a sub-table; :func:`.load.load_spec` reads back the same spec."""
        import tomli_w  # here, not at the top: importing the spec needs the standard library only (the sbatch
        # renderer runs from a bare install: tests/test_sbatch.py)

        return tomli_w.dumps(self.to_dict())

    @property
    def world_size(self) -> int:
        """Ranks in the job; tasks_per_node must be resolved (non-zero) for this to be exact."""
        return self.resources.nodes * max(self.resources.tasks_per_node, 1)

    # ----------------------------------------------------------------- checks (.checks)
    def traced_epoch_boundaries(self) -> list[tuple[int, int, int]]:
        """(cycle, first traced step, boundary step) for every step that starts a new epoch inside
        a traced window (:func:`.checks.traced_epoch_boundaries`)."""
        return traced_epoch_boundaries(self)

    def warnings(self) -> list[str]:
        """Valid but probably unintended settings, said before the job runs (:func:`.checks.spec_warnings`)."""
        return spec_warnings(self)

    def validate(self, world_size: int | None = None) -> "JobSpec":
        """Refuse impossible values with the reason (:func:`.checks.validate_spec`); `world_size`,
        when known, checks drill ranks. Returns the spec."""
        validate_spec(self, world_size)
        return self


# --------------------------------------------------------------------------- helpers
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
