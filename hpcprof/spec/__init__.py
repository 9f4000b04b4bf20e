"""The job spec: one object that describes a profiling job and flows through launch, rank side and
analysis.

Precedence: dataclass defaults < job file (``jobs/*.toml``) < command-line flags. The spec is
validated once, in :meth:`JobSpec.validate`, and every error names the key and says what is valid.

TOML layout::

    name = "demo"                # optional, run directory name
    runs_dir = "runs"
    [resources]  cluster = "local", nodes = 1, tasks_per_node = 2, ...
    [model]      arch = "resnet18", ...
    [data]       source = "synthetic", batch_size = 16, ...
    [train]      steps = 12, ...
    [profiler]   wait = 1, warmup = 1, active = 3, ...
    [drills]     straggler = "2:50", crash = "3:4"

Every field has a docstring (:mod:`.schema`, the built-in trainer's sections in :mod:`.builtin`, the
drills in :mod:`.drills`; the SLURM fields of ``[resources]`` are in
:mod:`hpcprof.spec.resources`; the checks across fields are :mod:`.checks`); ``python -m
hpcprof.submit --help`` shows them with their defaults, and each field can be overridden with
``--<section>-<field>`` (resources fields need no
prefix: ``--nodes``, ``--partition``), or with ``--set section.field=value`` (:mod:`.cli`).
Reading and writing TOML and coercing values is :mod:`.toml`; :mod:`.load` builds a spec from
defaults, a job file and overrides; :class:`SpecError` is in :mod:`.errors`.
"""

from .cli import (
    FLAG_ALIASES,
    add_field_argument,
    add_resource_arguments,
    add_spec_arguments,
    field_of_flag,
    flag_of,
    iter_fields,
    override_argv,
    override_items,
    overrides_from_args,
    resources_from_args,
    spec_from_args,
    split_passthrough,
)
from .builtin import AMP_MODES, ARCHS, DATA_SOURCES, Data, Model, builtin_only
from .drills import Drills
from .checks import RUN_NAME_RE, choices, validate_run_name
from .schema import (
    CLUSTERS,
    SECTIONS,
    JobSpec,
    Profiler,
    Resources,
    Train,
    field_docs,
)
from .errors import SpecError
from .load import apply_values, load_spec, set_value, spec_from_dict
from .toml import coerce_value, read_toml

__all__ = [
    "AMP_MODES", "ARCHS", "CLUSTERS", "DATA_SOURCES", "FLAG_ALIASES", "RUN_NAME_RE", "SECTIONS",
    "Data", "Drills", "JobSpec", "Model", "Profiler", "Resources", "SpecError", "Train",
    "add_field_argument", "add_resource_arguments", "add_spec_arguments", "apply_values", "builtin_only", "choices",
    "coerce_value", "field_docs", "field_of_flag", "flag_of", "iter_fields", "load_spec", "override_argv",
    "override_items", "overrides_from_args", "read_toml", "resources_from_args",
    "set_value", "spec_from_args", "spec_from_dict", "split_passthrough", "validate_run_name",
]
