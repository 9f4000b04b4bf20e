"""The SLURM resources of a job: ONE type, its validation and its submitit parameters.

Both jobs this tool submits ask SLURM for resources the same way: the training job (the job spec's
``[resources]`` section, :class:`hpcprof.spec.Resources`, which adds the executor choice) and the
analysis job array (``python -m hpcprof.analyze --executor slurm``). Each takes this type, so a
partition, an account or an ``--slurm-extra`` option is parsed, checked and handed to submitit by
the same code, with the same error wording; only the name shown in an error differs (a spec key
such as ``resources.partition``, or an analysis flag such as ``--slurm-partition``), which is why
:meth:`SlurmResources.validate` takes a ``name`` function.

It lives in :mod:`hpcprof.spec` (which imports nothing else of hpcprof) so that the spec, the
sbatch renderer (:mod:`hpcprof.slurm`) and the analysis array can all use it without importing
each other.

The allowed characters are whitelists (:class:`Charset`): these values end up on ``#SBATCH`` lines
and in rendered job scripts, so nothing a user types may carry shell syntax, quotes or newlines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


class ResourcesError(ValueError):
    """A SLURM resource value that cannot be used; the message names it and says what is valid."""


@dataclass(frozen=True)
class Charset:
    """The characters a kind of value may hold (a whitelist: anything else is refused)."""

    chars: str
    """Regex character-class body."""
    description: str
    """The same set in words, for error messages."""

    def bad(self, value: str, allow_space: bool = False) -> list[str]:
        """The characters of ``value`` outside the set, sorted, each once."""
        ok = re.compile(f"[{self.chars}]")
        return sorted({c for c in value if not (ok.fullmatch(c) or (allow_space and c == " "))})


#: A plain word: module names, paths, spec values, sbatch option values. No shell syntax, quotes,
#: globbing or control characters of any kind.
WORD = Charset(r"A-Za-z0-9._@:,+=/%-", "letters, digits and . _ @ : , + = / % -")
#: A SLURM name: partition, account, QoS, job name.
SLURM_NAME = Charset(r"A-Za-z0-9._@:,+-", "letters, digits and . _ @ : , + -")
#: A constraint may use SLURM's operators: "v100-16g|v100-32g", "a100&ib".
CONSTRAINT = Charset(r"A-Za-z0-9._@:,+|&-", "letters, digits and . _ @ : , + | & -")
#: An sbatch option name (``hint``, ``mail-user``; underscores are written as dashes).
OPTION = Charset(r"A-Za-z0-9_-", "letters, digits, _ and -")

#: The sbatch option each field sets (``#SBATCH --<option>``); sbatch rendering and error messages
#: use it to name the field an option came from. ``gres`` is the other way to ask for GPUs.
SBATCH_OPTION = {
    "nodes": "nodes",
    "tasks_per_node": "ntasks-per-node",
    "gpus_per_node": "gpus-per-node",
    "cpus_per_task": "cpus-per-task",
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "constraint": "constraint",
    "time_min": "time",
    "mem_gb": "mem",
    "job_name": "job-name",
}


@dataclass
class SlurmResources:
    """What a job asks SLURM for. Zero or empty means "the cluster's default"."""

    nodes: int = 1
    """Number of nodes (local and debug: 1)."""
    tasks_per_node: int = 0
    """Ranks per node. 0 means one per GPU (gpus_per_node, or the GPUs found by a local run), or 2
    CPU ranks when there is no GPU."""
    gpus_per_node: int = 0
    """GPUs requested per node (SLURM --gpus-per-node). 0 on a CPU-only cluster or machine."""
    cpus_per_task: int = 0
    """CPU cores per task (SLURM --cpus-per-task): per rank for training, where it also sets torch's
    CPU threads. 0: let the executor decide (local: cores divided by ranks)."""
    partition: str = ""
    """SLURM partition, e.g. "gpu_p13" on Jean Zay. Empty: the cluster default."""
    account: str = ""
    """SLURM account, e.g. "abc@v100". Empty: your default account."""
    qos: str = ""
    """SLURM QoS, e.g. "qos_gpu-dev". Empty: the default QoS."""
    constraint: str = ""
    """SLURM constraint, e.g. "v100-32g", "a100", "h100", or with SLURM's operators "v100-16g|v100-32g"."""
    time_min: int = 30
    """Time limit in minutes, of the job (local runs are stopped at this limit too) or of each task of
    the analysis array."""
    mem_gb: int = 0
    """Memory per node in GB (SLURM --mem). 0: the cluster default."""
    job_name: str = "hpcprof"
    """SLURM job name."""
    slurm_extra: dict = field(default_factory=dict)
    """Extra sbatch options as KEY=VALUE, e.g. hint=nomultithread (an empty VALUE gives a bare flag:
    exclusive=)."""
    setup: list = field(default_factory=list)
    """Shell lines run on the cluster before the tasks start, e.g. "module load pytorch-gpu/py3/2.3.0"."""

    # ------------------------------------------------------------------ validation
    def validate(self, name: Callable[[str], str] = lambda f: f"resources.{f}") -> "SlurmResources":
        """Refuse impossible or unsafe values; ``name(field)`` is how an error names the field."""
        for key, low in (("nodes", 1), ("tasks_per_node", 0), ("gpus_per_node", 0),
                         ("cpus_per_task", 0), ("time_min", 1), ("mem_gb", 0)):
            value = getattr(self, key)
            if value < low:
                raise ResourcesError(f"{name(key)} must be >= {low}, got {value}")
        for key in ("partition", "account", "qos", "constraint", "job_name"):
            value = getattr(self, key)
            charset = CONSTRAINT if key == "constraint" else SLURM_NAME
            bad = charset.bad(value)
            if bad:
                raise ResourcesError(
                    f"{name(key)} = {value!r} holds {', '.join(map(repr, bad))}, characters a SLURM value "
                    f"never needs (allowed: {charset.description})")
        self.slurm_extra = parse_extra(self.slurm_extra, name("slurm_extra"))
        if not isinstance(self.setup, list) or not all(isinstance(line, str) for line in self.setup):
            raise ResourcesError(f"{name('setup')} must be a list of strings (shell lines)")
        for i, line in enumerate(self.setup):
            if any(ord(c) < 32 or ord(c) == 127 for c in line):
                raise ResourcesError(f"{name('setup')}[{i}] = {line!r} holds a newline or control "
                                     "character; give one line per entry")
        return self

    # ------------------------------------------------------------------ srun
    def srun_options(self) -> list[str]:
        """The options of the ``srun`` that starts the tasks, the one definition for both launch
        paths: ``python -m hpcprof.submit`` hands them to submitit (``slurm_srun_args``) and
        ``python -m hpcprof.sbatch`` writes them into the script (``SRUN_OPTIONS``, with the
        template's ``--cpus-per-task`` when the spec leaves it open).

        - ``--kill-on-bad-exit=1``: a task that exits non-zero ends the step at once; otherwise its
          peers wait in their next collective until the process-group timeout.
        - ``--cpus-per-task=N`` when set: SLURM 22.05 to 23.02 no longer pass the job's
          ``--cpus-per-task`` on to ``srun``, whose tasks then get one core each (a rank and all its
          DataLoader workers on one core)."""
        options = ["--kill-on-bad-exit=1"]
        if self.cpus_per_task:
            options.append(f"--cpus-per-task={self.cpus_per_task}")
        return options

    # ------------------------------------------------------------------ submitit
    def submitit_parameters(self, cluster: str = "slurm") -> dict[str, Any]:
        """The keyword arguments of ``submitit.AutoExecutor.update_parameters`` for these resources.

        ``cluster`` is submitit's executor ("slurm", "local", "debug"): the SLURM-only keys
        (partition, CPUs, memory, extra options, setup lines) go to SLURM only; empty values are
        left out so the cluster's defaults apply; ``srun``'s options are :meth:`srun_options`.
        ``tasks_per_node`` must be resolved (non-zero)."""
        params: dict[str, Any] = {
            "timeout_min": self.time_min,
            "nodes": self.nodes,
            "tasks_per_node": self.tasks_per_node,
            "name": self.job_name,
        }
        if self.gpus_per_node:
            params["gpus_per_node"] = self.gpus_per_node
        if cluster != "slurm":
            return params
        if self.cpus_per_task:
            params["cpus_per_task"] = self.cpus_per_task
        if self.mem_gb:
            params["mem_gb"] = self.mem_gb
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(self, key):
                params[f"slurm_{key}"] = getattr(self, key)
        if self.slurm_extra:
            # submitit writes True as a bare flag (#SBATCH --exclusive), anything else as --key=value
            params["slurm_additional_parameters"] = {
                k: True if v in ("", "true") else v for k, v in self.slurm_extra.items()}
        if self.setup:
            params["slurm_setup"] = list(self.setup)
        params["slurm_srun_args"] = self.srun_options()
        return params


def parse_extra(value: Any, name: str = "resources.slurm_extra") -> dict[str, str]:
    """The one parser of extra sbatch options: a TOML table, a list of "KEY=VALUE" items (one per
    ``--slurm-extra`` flag) or one "KEY=VALUE,KEY2=VALUE2" string (``--set``), to {key: value}.

    Keys lose leading dashes (``--hint=x`` and ``hint=x`` are the same option); every key and value
    is checked against a whitelist because it ends up on an ``#SBATCH`` line."""
    if isinstance(value, str):
        items: list[Any] = [item for item in value.split(",") if item]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, Mapping):
        items = [(k, v) for k, v in value.items()]
    else:
        raise ResourcesError(f"{name} must be a table of key = value, got {value!r}")
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, tuple):
            key, val = item
        elif isinstance(item, str):
            key, sep, val = item.partition("=")
            if not sep:
                raise ResourcesError(f"{name} entries must look like KEY=VALUE (an sbatch option without "
                                     f"the dashes, e.g. hint=nomultithread), got {item!r}")
        else:
            raise ResourcesError(f"{name} entries must look like KEY=VALUE, got {item!r}")
        key = str(key).strip().lstrip("-")
        if isinstance(val, bool):
            val = "true" if val else "false"
        if not isinstance(val, (str, int, float)):
            raise ResourcesError(f"{name}[{key!r}] = {val!r}: a value must be a string or a number")
        val = str(val).strip()
        if not key or OPTION.bad(key):
            raise ResourcesError(f"{name} key {key!r} is not a valid sbatch option name "
                                 f"(allowed: {OPTION.description})")
        bad = WORD.bad(val)
        if bad:
            raise ResourcesError(f"{name}[{key!r}] = {val!r} holds {', '.join(map(repr, bad))} "
                                 f"(allowed: {WORD.description}); it goes on an #SBATCH line")
        out[key] = val
    return out

