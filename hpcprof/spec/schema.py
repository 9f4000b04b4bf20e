"""The job spec: one object that describes a profiling job and flows through launch, rank side and
analysis.

Precedence: dataclass defaults < job file (``jobs/*.toml``) < command-line flags. The spec is
validated once, in :func:`JobSpec.validate`, and every error names the key and says what is valid.

TOML layout::

    name = "demo"                # optional, run directory name
    runs_dir = "runs"
    [resources]  cluster = "local", nodes = 1, tasks_per_node = 2, ...
    [model]      arch = "resnet18", ...
    [data]       source = "synthetic", batch_size = 16, ...
    [train]      steps = 12, ...
    [profiler]   wait = 1, warmup = 1, active = 3, ...
    [drills]     straggler = "2:50", crash = "3:4"

Every field below has a docstring; ``python -m hpcprof.submit --help`` shows them with their
defaults, and each field can be overridden with ``--<section>-<field>`` (resources fields need no
prefix: ``--nodes``, ``--partition``), or with ``--set section.field=value``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101")
CLUSTERS = ("auto", "slurm", "local", "debug")
DATA_SOURCES = ("synthetic", "fakedata", "imagefolder")
AMP_MODES = ("off", "bf16", "fp16")
RUN_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


class SpecError(ValueError):
    """A job spec value or key that cannot be used; the message names it and says what is valid."""


@dataclass
class Resources:
    """Where and on how much hardware the job runs."""

    cluster: str = "auto"
    """Executor: "slurm" (submitit on a SLURM cluster), "local" (ranks as processes on this machine),
    "debug" (one rank inside the submitting process), or "auto": slurm when the SLURM client
    commands answer, else local."""
    nodes: int = 1
    """Number of nodes (local and debug: 1)."""
    tasks_per_node: int = 0
    """Ranks per node. 0 means one per GPU (gpus_per_node, or the GPUs found by a local run), or 2
    CPU ranks when there is no GPU."""
    gpus_per_node: int = 0
    """GPUs requested per node (SLURM --gpus-per-node). 0 on a CPU-only cluster or machine."""
    cpus_per_task: int = 0
    """CPU cores per rank (SLURM --cpus-per-task; also sets torch's CPU threads per rank). 0: let the
    executor decide (local: cores divided by ranks)."""
    partition: str = ""
    """SLURM partition, e.g. "gpu_p13" on Jean Zay. Empty: the cluster default."""
    account: str = ""
    """SLURM account, e.g. "abc@v100". Empty: your default account."""
    qos: str = ""
    """SLURM QoS, e.g. "qos_gpu-dev". Empty: the default QoS."""
    constraint: str = ""
    """SLURM constraint, e.g. "v100-32g", "a100", "h100"."""
    time_min: int = 30
    """Time limit of the job in minutes (local runs are stopped at this limit too)."""
    mem_gb: int = 0
    """Memory per node in GB (SLURM --mem). 0: the cluster default."""
    job_name: str = "hpcprof"
    """SLURM job name."""
    slurm_extra: dict = field(default_factory=dict)
    """Extra sbatch parameters as key = value, e.g. {hint = "nomultithread"}."""
    setup: list = field(default_factory=list)
    """Shell lines run before the ranks start on the cluster, e.g. ["module load pytorch-gpu/py3/2.3.0"]."""


@dataclass
class Model:
    """What is trained."""

    arch: str = "resnet50"
    """torchvision ResNet: resnet18, resnet34, resnet50 or resnet101 (random weights)."""
    num_classes: int = 1000
    """Number of output classes."""
    image_size: int = 224
    """Square input image size in pixels."""
    channels_last: bool = False
    """Use the channels_last memory format for model and inputs."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    amp: str = "off"
    """Automatic mixed precision: "off", "bf16" (autocast), or "fp16" (autocast with GradScaler)."""


@dataclass
class Data:
    """Where batches come from and how they reach the device."""

    source: str = "synthetic"
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


@dataclass
class Train:
    """The step loop."""

    steps: int = 20
    """Total training steps (global step count; a resumed run continues up to this number)."""
    lr: float = 0.1
    """SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum."""
    zero_grad_set_to_none: bool = False
    """optimizer.zero_grad(set_to_none=True): frees gradients instead of zero-filling them."""
    seed: int = 0
    """Random seed (model init and synthetic data)."""
    pg_timeout_s: int = 300
    """Process-group timeout in seconds: a rank waiting longer than this for a dead or stuck peer
    fails instead of hanging until the job's time limit."""


@dataclass
class Profiler:
    """torch.profiler settings, the same on every rank."""

    enabled: bool = True
    """Profile at all (False: step timings only)."""
    wait: int = 1
    """Schedule: steps skipped before warm-up."""
    warmup: int = 1
    """Schedule: warm-up steps (traced, then discarded)."""
    active: int = 3
    """Schedule: steps recorded in the trace."""
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


@dataclass
class Drills:
    """Known faults injected on purpose, to check that the analysis finds them."""

    straggler: str = ""
    """"RANK:MS": that rank sleeps MS milliseconds on the host before each step's forward pass
    (a slow input pipeline on one node). Empty: off."""
    crash: str = ""
    """"RANK:STEP": that rank raises at that step. Empty: off."""

    @property
    def straggler_rank_ms(self) -> tuple[int, float] | None:
        return _parse_pair(self.straggler, "drills.straggler", "RANK:MS", float) if self.straggler else None

    @property
    def crash_rank_step(self) -> tuple[int, int] | None:
        return _parse_pair(self.crash, "drills.crash", "RANK:STEP", int) if self.crash else None


SECTIONS: dict[str, type] = {
    "resources": Resources,
    "model": Model,
    "data": Data,
    "train": Train,
    "profiler": Profiler,
    "drills": Drills,
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

    # ----------------------------------------------------------------- conversion
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        return to_toml(self.to_dict())

    @property
    def world_size(self) -> int:
        """Ranks in the job; tasks_per_node must be resolved (non-zero) for this to be exact."""
        return self.resources.nodes * max(self.resources.tasks_per_node, 1)

    # ----------------------------------------------------------------- validation
    def validate(self, world_size: int | None = None) -> "JobSpec":
        """Refuse impossible values with the reason. `world_size`, when known, checks drill ranks."""
        r, m, d, t, p = self.resources, self.model, self.data, self.train, self.profiler
        if self.name:
            validate_run_name(self.name, "name")
        _choice("resources.cluster", r.cluster, CLUSTERS)
        _choice("model.arch", m.arch, ARCHS)
        _choice("model.amp", m.amp, AMP_MODES)
        _choice("data.source", d.source, DATA_SOURCES)
        for key, value, low in [
            ("resources.nodes", r.nodes, 1),
            ("resources.tasks_per_node", r.tasks_per_node, 0),
            ("resources.gpus_per_node", r.gpus_per_node, 0),
            ("resources.cpus_per_task", r.cpus_per_task, 0),
            ("resources.time_min", r.time_min, 1),
            ("resources.mem_gb", r.mem_gb, 0),
            ("model.num_classes", m.num_classes, 2),
            ("model.image_size", m.image_size, 32),
            ("data.batch_size", d.batch_size, 1),
            ("data.num_workers", d.num_workers, 0),
            ("data.prefetch_factor", d.prefetch_factor, 0),
            ("data.dataset_size", d.dataset_size, 1),
            ("train.steps", t.steps, 1),
            ("train.pg_timeout_s", t.pg_timeout_s, 1),
            ("profiler.wait", p.wait, 0),
            ("profiler.warmup", p.warmup, 0),
            ("profiler.active", p.active, 1),
            ("profiler.repeat", p.repeat, 1),
        ]:
            if value < low:
                raise SpecError(f"{key} must be >= {low}, got {value}")
        if t.lr <= 0:
            raise SpecError(f"train.lr must be > 0, got {t.lr}")
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
        if d.batch_size * max(self.world_size, 1) > d.dataset_size and d.source == "fakedata":
            raise SpecError(
                f"data.dataset_size = {d.dataset_size} is smaller than one global batch "
                f"(batch_size {d.batch_size} x {self.world_size} ranks)"
            )
        if p.enabled:
            needed = p.wait + p.warmup + p.active
            if t.steps < needed * p.repeat:
                raise SpecError(
                    f"train.steps = {t.steps} is fewer than the profiler schedule needs: (wait {p.wait} + "
                    f"warmup {p.warmup} + active {p.active}) x repeat {p.repeat} = {needed * p.repeat}"
                )
        for key in ("partition", "account", "qos", "constraint", "job_name"):
            value = getattr(r, key)
            if value and not re.fullmatch(r"[A-Za-z0-9._@:,+|-]+", value):
                raise SpecError(
                    f"resources.{key} = {value!r} holds characters a SLURM value never needs "
                    "(allowed: letters, digits and . _ @ : , + | -)"
                )
        for k, v in r.slurm_extra.items():
            if not re.fullmatch(r"[A-Za-z0-9_-]+", str(k)):
                raise SpecError(f"resources.slurm_extra key {k!r} is not a valid sbatch option name")
        if not all(isinstance(line, str) for line in r.setup):
            raise SpecError("resources.setup must be a list of strings (shell lines)")
        ws = world_size or (self.world_size if r.tasks_per_node else None)
        for key, pair in (("drills.straggler", self.drills.straggler_rank_ms), ("drills.crash", self.drills.crash_rank_step)):
            if pair is None:
                continue
            rank, value = pair
            if rank < 0 or (ws is not None and rank >= ws):
                raise SpecError(f"{key}: rank {rank} does not exist (world size {ws})")
            if value < 0:
                raise SpecError(f"{key}: {value} must be >= 0")
        crash = self.drills.crash_rank_step
        if crash and crash[1] >= t.steps:
            raise SpecError(f"drills.crash: step {crash[1]} is never reached (train.steps = {t.steps})")
        return self


# --------------------------------------------------------------------------- helpers
_EXAMPLES = {"RANK:MS": "2:50", "RANK:STEP": "3:4"}


def _parse_pair(text: str, key: str, form: str, conv) -> tuple[int, Any]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*([0-9.]+)\s*", str(text))
    if not m:
        raise SpecError(f"{key} must look like {form} (e.g. {_EXAMPLES[form]}), got {text!r}")
    try:
        return int(m.group(1)), conv(m.group(2))
    except ValueError:
        raise SpecError(f"{key} must look like {form} (e.g. {_EXAMPLES[form]}), got {text!r}") from None


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise SpecError(f"{key} = {value!r} is not valid; valid values: {', '.join(valid)}")


def validate_run_name(name: str, what: str = "run name") -> str:
    """A run name is one folder name, never a path."""
    if not RUN_NAME_RE.fullmatch(name or "") or name in (".", ".."):
        raise SpecError(
            f"{what} {name!r} is not valid: use letters, digits, '.', '_' and '-' only (a folder name, not a path)"
        )
    return name


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field (the torchtitan convention)."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):  # pragma: no cover - source not available
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Convert a TOML or command-line value to the type of the field's default."""
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise SpecError(f"{key} must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise SpecError(f"{key} must be an integer, got {value!r}")
        try:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise SpecError(f"{key} must be an integer, got {value!r}") from None
    if kind is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{key} must be a number, got {value!r}") from None
    if kind is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise SpecError(f"{key} must be a string, got {value!r}")
        return str(value)
    if kind is dict:
        if isinstance(value, str):  # "k=v,k2=v2" from the command line
            out = {}
            for item in filter(None, value.split(",")):
                k, sep, v = item.partition("=")
                if not sep:
                    raise SpecError(f"{key} entries must look like key=value, got {item!r}")
                out[k.strip()] = v.strip()
            return out
        if not isinstance(value, dict):
            raise SpecError(f"{key} must be a table of key = value, got {value!r}")
        return {str(k): str(v) for k, v in value.items()}
    if kind is list:
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list):
            raise SpecError(f"{key} must be a list of strings, got {value!r}")
        return [str(v) for v in value]
    return value  # pragma: no cover


def _unknown(key: str, valid: list[str], where: str) -> SpecError:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SpecError(f"{where}unknown key {key!r}{hint}; valid keys: {', '.join(valid)}")


def apply_values(spec: JobSpec, values: dict[str, Any], where: str = "") -> JobSpec:
    """Apply a nested dict (as read from TOML) onto `spec`, refusing unknown keys."""
    top_fields = [f.name for f in fields(JobSpec) if f.name not in SECTIONS]
    valid_top = top_fields + [f"[{s}]" for s in SECTIONS]
    for key, value in values.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise SpecError(f"{where}[{key}] must be a table")
            section = getattr(spec, key)
            valid = [f.name for f in fields(section)]
            for sub, subvalue in value.items():
                if sub not in valid:
                    raise _unknown(f"{key}.{sub}", valid, where)
                default = getattr(section, sub)
                setattr(section, sub, _coerce(f"{key}.{sub}", subvalue, default))
        elif key in top_fields:
            setattr(spec, key, _coerce(key, value, getattr(spec, key)))
        else:
            raise _unknown(key, valid_top, where)
    return spec


def set_value(spec: JobSpec, dotted: str, value: Any, where: str = "") -> JobSpec:
    """Set one field by its dotted name, e.g. ``data.num_workers``."""
    section, dot, name = dotted.partition(".")
    nested = {section: {name: value}} if dot else {section: value}
    return apply_values(spec, nested, where)


def load_spec(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> JobSpec:
    """Defaults, then the TOML file at `path`, then dotted `overrides`; validated."""
    spec = JobSpec()
    if path:
        path = Path(path)
        if not path.is_file():
            raise SpecError(f"job file {str(path)!r} does not exist")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: not valid TOML: {exc}") from None
        apply_values(spec, data, where=f"{path}: ")
    for dotted, value in (overrides or {}).items():
        set_value(spec, dotted, value, where="command line: ")
    return spec.validate()


def spec_from_dict(data: dict[str, Any]) -> JobSpec:
    """Rebuild a spec from :meth:`JobSpec.to_dict` output (manifest, spec.toml)."""
    return apply_values(JobSpec(), data).validate()


def read_spec_toml(path: str | Path) -> JobSpec:
    return load_spec(path)


def to_toml(data: dict[str, Any]) -> str:
    """Minimal TOML writer for the spec's value types (str, int, float, bool, list[str], dict)."""

    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {fmt(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = [f"{k} = {fmt(v)}" for k, v in data.items() if not isinstance(v, dict) or k not in SECTIONS]
    for section in SECTIONS:
        if section in data:
            lines.append(f"\n[{section}]")
            lines += [f"{k} = {fmt(v)}" for k, v in data[section].items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- command line
# Flags that a user types most; every other field gets --<section>-<field>.
_ALIASES = {
    "drills.straggler": "--inject-straggler",
    "drills.crash": "--inject-crash",
}


def _flag(section: str | None, name: str) -> str:
    dotted = f"{section}.{name}" if section else name
    if dotted in _ALIASES:
        return _ALIASES[dotted]
    if section in (None, "resources"):
        return "--" + name.replace("_", "-")
    return f"--{section}-{name.replace('_', '-')}"


def _iter_fields():
    defaults = JobSpec()
    for f in fields(JobSpec):
        if f.name not in SECTIONS:
            yield None, f.name, getattr(defaults, f.name), field_docs(JobSpec).get(f.name, "")
    for section, cls in SECTIONS.items():
        docs = field_docs(cls)
        for f in fields(cls):
            yield section, f.name, getattr(getattr(defaults, section), f.name), docs.get(f.name, "")


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --job, --set and one flag per spec field (help = the field's docstring and default)."""
    parser.add_argument("--job", metavar="FILE", help="job spec (TOML), e.g. jobs/demo-local.toml")
    parser.add_argument(
        "--set",
        metavar="SECTION.FIELD=VALUE",
        action="append",
        default=[],
        help="override any spec field, e.g. --set data.num_workers=4 (repeatable)",
    )
    groups: dict[str | None, argparse._ArgumentGroup] = {}
    for section, name, default, doc in _iter_fields():
        group = groups.get(section)
        if group is None:
            title = f"[{section}] fields" if section else "run"
            group = groups[section] = parser.add_argument_group(title)
        dest = f"spec__{section}__{name}" if section else f"spec____{name}"
        shown = json.dumps(default) if isinstance(default, (dict, list, str)) else default
        help_text = f"{doc} (default: {shown})".replace("%", "%%")
        flag = _flag(section, name)
        if isinstance(default, bool):
            group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif isinstance(default, list):
            group.add_argument(flag, dest=dest, action="append", default=None, metavar="LINE", help=help_text + " (repeatable)")
        elif isinstance(default, dict):
            group.add_argument(flag, dest=dest, action="append", default=None, metavar="KEY=VALUE", help=help_text + " (repeatable)")
        else:
            group.add_argument(flag, dest=dest, default=None, metavar=type(default).__name__.upper(), help=help_text)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The dotted overrides a command line asked for (only the flags actually given)."""
    out: dict[str, Any] = {}
    for key, value in vars(args).items():
        if not key.startswith("spec__") or value is None:
            continue
        _, section, name = key.split("__", 2)
        dotted = f"{section}.{name}" if section else name
        if isinstance(value, list) and dotted == "resources.slurm_extra":
            value = ",".join(value)
        out[dotted] = value
    for item in args.set or []:
        dotted, sep, value = item.partition("=")
        if not sep or not dotted.strip():
            raise SpecError(f"--set expects SECTION.FIELD=VALUE, got {item!r}")
        out[dotted.strip()] = value
    return out


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    """The validated spec for a parsed command line (job file, then flags)."""
    return load_spec(args.job, overrides_from_args(args))


def override_argv(spec: JobSpec, base: JobSpec | None = None) -> list[str]:
    """Command-line flags that turn `base` (defaults) into `spec`: how a resolved spec travels to
    ``python -m hpcprof.train`` (used by sbatch rendering)."""
    base = base or JobSpec()
    argv: list[str] = []
    for section, name, _default, _doc in _iter_fields():
        value = getattr(getattr(spec, section), name) if section else getattr(spec, name)
        ref = getattr(getattr(base, section), name) if section else getattr(base, name)
        if value == ref:
            continue
        flag = _flag(section, name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            for line in value:
                argv += [flag, line]
        elif isinstance(value, dict):
            for k, v in value.items():
                argv += [flag, f"{k}={v}"]
        else:
            argv += [flag, str(value)]
    return argv
