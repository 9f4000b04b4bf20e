"""manifest.json, typed: what was launched (written by the launcher, or by rank 0 when a plain
``srun``/``torchrun`` started the ranks) and what each attempt found when it started (written by
rank 0 at every start, also after a requeue). :func:`write` is the only code that writes the file;
the launch side builds a :class:`Manifest` with :meth:`Manifest.at_launch`, the rank side appends an
:class:`Attempt` with :func:`record_attempt`.

Readers get the file back with :meth:`Manifest.from_dict`, which accepts manifests of older runs
(missing fields take their defaults, fields this version does not know are kept in ``extra`` and
written back unchanged), or as a plain dict through ``RunDir.read_manifest``.

Every manifest field is declared here once, with the docstring saying what it holds (docs/contract.md
is checked against these types by tests/test_contract.py); how the records map to JSON and back is
:mod:`.manifest_codec`.
"""

from __future__ import annotations

import json
import sys
import time
import typing
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from .layout import RunDir, atomic_write_text
from .manifest_codec import fields_of, from_json, json_type, to_json
from .manifest_drills import ClockSkewDrill, CrashDrill, Drills, HangDrill, MismatchDrill, StragglerDrill



def now_iso() -> str:
    """Local time with its UTC offset, the format of ``created`` and ``Attempt.started``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Replicate:
    """This run is one of `count` runs of one spec launched together (``submit --repeat N``, ``ladder
    --repeat N``): ``compare`` groups the runs of one `group` (and one `spec_sha256`) into an arm."""

    group: str
    """The name given to the set (``--name``, the ladder rung's name); the runs are ``<group>-r<k>``."""
    index: int
    """1 .. count: the order of launch (a ladder interleaves rungs: rung A r1, rung B r1, A r2, ...)."""
    count: int
    """Runs in the set (--repeat N)."""
    spec_sha256: str
    """spec_hash() of the spec: runs of one group must share it."""


SPEC_HASH_IGNORES = (("name",), ("runs_dir",), ("resources", "slurm_extra", "dependency"))
"""Spec fields that name or place a run, or chain it after another, without changing what it runs."""


def spec_hash(spec: dict[str, Any]) -> str:
    """SHA-256 of the spec as a dict (JobSpec.to_dict(), the manifest's `spec`) less SPEC_HASH_IGNORES:
    two runs with the same hash ran the same configuration (the code itself is not in the spec)."""
    import copy
    import hashlib

    d = copy.deepcopy(spec) if isinstance(spec, dict) else {}
    for path in SPEC_HASH_IGNORES:
        node = d
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Clock:
    """Clocks read by a rank right after a barrier all ranks passed: aligns the ranks' traces."""

    wall_ns: int
    monotonic_ns: int
    after_barrier: bool = True


@dataclass
class RankEntry:
    """One rank as it found itself at the start of the latest attempt (gathered by rank 0)."""

    rank: int
    local_rank: int
    node: str
    """Host name."""
    device: str
    """"cpu" or "cuda:<i>"."""
    device_name: str
    pid: int
    launcher: str
    """How the rank was started: submitit-local/slurm/debug, torchrun, srun or single."""
    slurm: dict[str, str]
    """The SLURM_* environment variables of the rank."""
    clock: Clock
    cpu_threads: int | None = None
    """torch threads of the rank."""
    node_cpus: int | None = None
    """Cores the job may use on the node (SLURM_CPUS_ON_NODE, else the CPU affinity): tells the
    analysis whether ranks shared cores."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FirstFailure:
    """The rank the launcher holds responsible for a failed job."""

    rank: int | None
    """None: the job timed out waiting for a rank, and which one did not answer is not known."""
    step: int | None
    """The step it was in (None: before the step loop)."""
    error: str
    """Its error, or how it died (a signal) when it left no failure note."""


@dataclass
class Outcome:
    """How the launcher saw the job end (``submit`` when it waited, or when the job never started).
    Absent while the job runs and for jobs nobody waited for: hpcprof.rundir.state then reads the
    step files, failures/ and liveness instead."""

    state: str
    """completed, failed, hung (the ranks' hang watchdog ended the job: first_failure names the rank
    the others waited for, error holds the verdict, hpcprof.rundir.hangs), interrupted (the launcher
    got SIGINT/SIGTERM/SIGHUP and stopped the job, or, killed itself, was outlived by its local ranks,
    which then stopped and wrote this), cancelled (SLURM says CANCELLED: scancel) or never_started
    (the submission was refused). A job SLURM ended for a time limit, memory or a lost node is
    failed, with SLURM's state as error."""
    time: str
    """When the launcher wrote it (ISO 8601 with offset)."""
    signal: str | None = None
    """SIGINT, SIGTERM or SIGHUP for interrupted (null when the launcher was killed)."""
    error: str | None = None
    """The one-line error of a refused submission, or of the failure."""
    first_failure: FirstFailure | None = None


@dataclass
class Attempt:
    """One start of the job: the first, then one per requeue."""

    started: str
    resumed_from_step: int | None
    """The checkpoint's step + 1, None for a fresh start."""
    job_id: str | None
    process_group: str | None = None
    """Who made the job's default process group: "hpcprof", "script" (the training code's own
    init_process_group) or "none" (more than one rank, and the code never made one: the ranks
    trained alone). None: unknown (older runs)."""
    steps_source: str | None = None
    """What a step is: "api" (the step loop of hpcprof.run(): run.steps()/run.step()), "optimizer"
    (zero-change mode: one step per optimizer step, hpcprof.rank.auto), "builtin" (the built-in
    trainer). None: older runs."""
    steps_done: int | None = None
    """The job's step count when this attempt's step loop ended cleanly (its last global step + 1: the
    script's own loop length, as it happened), written by rank 0; None while it runs or when it did
    not end cleanly."""


@dataclass
class Capture:
    """A profiler window of mode "triggered" (hpcprof.rank.trigger): why it was taken and where it is."""

    index: int
    """0: the baseline (traces/); k > 0: traces/capture-<k>/."""
    kind: str
    """baseline, rank (a rank turned slow) or job (the job's step time rose)."""
    steps: list[int]
    """[first warm-up step, last active step]."""
    folder: str
    """Its traces, relative to the run directory."""
    rank: int | None = None
    score_ms: float | None = None
    threshold_ms: float | None = None
    history_ms: float | None = None
    window: list[int] | None = None
    """[first, last] step of the scoring window that completed the evidence."""


@dataclass
class Versions:
    hpcprof: str | None = None
    python: str | None = None
    torch: str | None = None
    torchvision: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    hta: str | None = None  # the HTA distribution and its version, e.g. "traceinsight 0.6.1"
    submitit: str | None = None


@dataclass
class Manifest:
    """Launch fields first (known before any rank runs), then the fields of the latest attempt."""

    hpcprof_version: str | None = None
    name: str | None = None
    created: str | None = None
    """When the run directory was created (ISO 8601 with offset)."""
    executor: str | None = None
    """local, slurm, debug (python -m hpcprof.submit), sbatch (srun in an sbatch script) or torchrun."""
    job_id: str | None = None
    command_line: list[str] = field(default_factory=list)
    launcher_host: str | None = None
    """Host of the process that launched the job (``submit``, ``ladder``); null for sbatch and torchrun."""
    launcher_pid: int | None = None
    """Its pid: while it lives and no outcome is written, the job counts as running; local ranks die
    with it (hpcprof.rank.lifeline)."""
    spec: dict[str, Any] = field(default_factory=dict)
    """The resolved spec (JobSpec.to_dict())."""
    world_size: int | None = None
    drills: Drills = field(default_factory=Drills)
    replicate: Replicate | None = None
    """Set when the run is one of several runs of one spec launched together (--repeat); else null."""
    # ---- written by rank 0 at each attempt
    launcher: str | None = None
    nodes: list[str] = field(default_factory=list)
    backend: str | None = None
    """gloo or nccl."""
    device: str | None = None
    """cpu or cuda."""
    versions: Versions = field(default_factory=Versions)
    ranks: list[RankEntry] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    captures: list[Capture] = field(default_factory=list)
    """Profiler mode "triggered": the windows captured so far (rank 0 appends each as it is decided)."""
    outcome: Outcome | None = None
    """Written by the launcher at the end (see :class:`Outcome`); null while running."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """Fields of an older or newer hpcprof that this one does not know: kept, written back as they were."""

    @classmethod
    def at_launch(cls, spec, name: str, executor: str, world_size: int, command_line: list[str],
                  job_id: str | None = None, replicate: Replicate | None = None) -> "Manifest":
        """What the launcher knows before the job starts."""
        return cls(hpcprof_version=__version__, name=name, created=now_iso(), executor=executor, job_id=job_id,
                   command_line=list(command_line), spec=spec.to_dict(), world_size=world_size,
                   drills=Drills.from_spec(spec.drills), replicate=replicate)

    # ------------------------------------------------------------------ conversion
    def to_dict(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        return from_json(cls, data, "manifest")


MANIFEST_TYPES = (Manifest, Drills, StragglerDrill, CrashDrill, HangDrill, MismatchDrill, ClockSkewDrill, Replicate,
                  Versions, RankEntry, Clock, Attempt, Outcome, FirstFailure, Capture)
"""Every record type of manifest.json (docs/contract.md is checked against their fields)."""


def checked(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The manifest as read (a plain dict), less the top-level fields whose value is not of their
    declared type, and one problem per field left out, naming it. Why: readers use the fields as
    they find them; `world_size: "two"` made the analysis skip every trace as "from another job"
    (issue 23, item 15). Fields this version does not know are kept as they are."""
    hints = typing.get_type_hints(Manifest)
    ok, problems = dict(data), []
    for name in fields_of(Manifest):
        if name not in data or data[name] is None:
            continue
        value, want = data[name], json_type(hints[name])
        accepted = (str, int, float) if want is str else want  # a number where text is expected still reads
        good = isinstance(value, accepted) and not (want is int and isinstance(value, bool))
        if good and want is int and name == "world_size":
            good = value > 0
        if not good:
            del ok[name]
            what = {int: "a positive integer" if name == "world_size" else "an integer", str: "a string",
                    list: "a list", dict: "an object"}.get(want, want.__name__)
            problems.append(f"manifest.json: {name} = {value!r} is not {what}; ignored")
    return ok, problems


# ------------------------------------------------------------------ the one writer
def load(run: RunDir) -> Manifest | None:
    """The run's manifest, typed; None when the run has none yet."""
    data = run.read_manifest()
    return Manifest.from_dict(data) if data else None


def write(run: RunDir, manifest: Manifest) -> None:
    """Write manifest.json atomically: the only code that writes it."""
    atomic_write_text(run.manifest_path, json.dumps(manifest.to_dict(), indent=2, default=str) + "\n")


def record_outcome(run: RunDir, outcome: Outcome) -> Manifest:
    """The launcher, at the end: how the job ended. Re-read first (rank 0 wrote its attempt)."""
    manifest = load(run) or Manifest(name=run.name)
    manifest.outcome = outcome
    write(run, manifest)
    return manifest


def record_job_id(run: RunDir, job_id: str) -> Manifest:
    """The launcher learns the job id after submitting; re-read first (rank 0 may have started)."""
    manifest = load(run) or Manifest()
    manifest.job_id = job_id
    write(run, manifest)
    return manifest


def record_attempt(run: RunDir, spec, *, world_size: int, launcher: str, job_id: str | None, backend: str,
                   device: str, versions: Versions, ranks: list[RankEntry], resumed_from_step: int | None,
                   process_group: str | None = None, steps_source: str | None = None) -> Manifest:
    """Rank 0, at every start: what this attempt found, and one more :class:`Attempt`.

    Without a manifest (ranks started by hand with torchrun and no launcher) the launch fields are
    built here from the spec, as the launcher would have."""
    manifest = load(run) or Manifest.at_launch(spec, run.name, launcher, world_size, sys.argv, job_id)
    if manifest.job_id is None:
        manifest.job_id = job_id  # submit writes the id after submission; the job may start first
    manifest.hpcprof_version = __version__
    manifest.world_size = world_size
    manifest.launcher = launcher
    manifest.nodes = sorted({e.node for e in ranks})
    manifest.backend = backend
    manifest.device = device
    manifest.versions = versions
    manifest.ranks = ranks
    manifest.attempts.append(Attempt(started=now_iso(), resumed_from_step=resumed_from_step, job_id=job_id,
                                     process_group=process_group, steps_source=steps_source))
    write(run, manifest)
    return manifest


def record_steps_done(run: RunDir, steps_done: int) -> Manifest | None:
    """Rank 0, at a clean end of the step loop: the steps the latest attempt ran (re-read first)."""
    manifest = load(run)
    if manifest is None or not manifest.attempts:
        return manifest
    manifest.attempts[-1].steps_done = int(steps_done)
    write(run, manifest)
    return manifest


def record_capture(run: RunDir, capture: Capture) -> Manifest:
    """Rank 0, during a triggered run: one more capture (re-read first, written atomically)."""
    manifest = load(run) or Manifest(name=run.name)
    manifest.captures = [c for c in manifest.captures if c.index != capture.index] + [capture]
    write(run, manifest)
    return manifest
