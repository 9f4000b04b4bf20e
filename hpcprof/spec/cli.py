"""The job spec on the command line: one flag per field, generated from the schema, and the way back
from a spec to flags (how a resolved spec travels to ``python -m hpcprof.train`` in a job script).

Every field gets ``--<section>-<field>`` (``--data-num-workers``); resources fields and top-level
fields need no prefix (``--nodes``, ``--partition``, ``--name``); :data:`FLAG_ALIASES` is the one
table of flags that differ from that rule. ``--set section.field=value`` reaches any field too.
:func:`flag_of` and :func:`field_of_flag` are the only translations between flags and fields.
Other commands that take SLURM resources (the analysis array) add them with
:func:`add_resource_arguments` under their own flag names, parsed and checked the same way.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import fields
from typing import Any, Iterator

from .resources import SlurmResources
from .errors import SpecError
from .load import load_spec
from .schema import SECTIONS, JobSpec, field_docs
from .toml import coerce_value

#: Flags that a user types most, named for what they do rather than for their field.
FLAG_ALIASES: dict[str, str] = {
    "drills.straggler": "--inject-straggler",
    "drills.crash": "--inject-crash",
    "drills.hang": "--inject-hang",
    "drills.mismatch": "--inject-mismatch",
    "drills.clock_skew": "--inject-clock-skew",
    "workload.entry": "--entry",
    "workload.script": "--script",
}

#: The [resources] fields a rank reads itself (torch threads per rank). The other [resources] fields
#: describe the allocation, which a rank takes from SLURM or torchrun: ``python -m hpcprof.train``
#: accepts them (scripts rendered before keep working; they are recorded in spec.toml) but its
#: --help does not offer them, since ``--partition`` or ``--account`` mean nothing inside a rank.
RANK_RESOURCES = frozenset({"resources.cpus_per_task", "resources.pin_cores"})


def launch_only(dotted: str) -> bool:
    """True for a field only the launcher uses (a [resources] field outside :data:`RANK_RESOURCES`)."""
    return dotted.startswith("resources.") and dotted not in RANK_RESOURCES


def flag_of(dotted: str) -> str:
    """The command-line flag of a field given by its dotted name (``data.num_workers``)."""
    if dotted in FLAG_ALIASES:
        return FLAG_ALIASES[dotted]
    section, dot, name = dotted.rpartition(".")
    if section in ("", "resources"):
        return "--" + name.replace("_", "-")
    return f"--{section}-{name.replace('_', '-')}"


def _dotted_names() -> Iterator[str]:
    """The dotted name of every spec field, in schema order: the top-level fields, then each
    section's. No docstrings: they are read from the source (slow), which the flag table below,
    built at the start of every command, does not need."""
    for f in fields(JobSpec):
        if f.name not in SECTIONS:
            yield f.name
    for section, cls in SECTIONS.items():
        yield from (f"{section}.{f.name}" for f in fields(cls))


def iter_fields() -> Iterator[tuple[str, Any, str]]:
    """(dotted name, default, docstring) of every spec field, in schema order (`_dotted_names`)."""
    defaults = JobSpec()
    docs: dict[type, dict[str, str]] = {}
    for dotted in _dotted_names():
        section, _, name = dotted.rpartition(".")
        cls = SECTIONS[section] if section else JobSpec
        if cls not in docs:
            docs[cls] = field_docs(cls)
        owner = getattr(defaults, section) if section else defaults
        yield dotted, getattr(owner, name), docs[cls].get(name, "")


_FIELD_OF_FLAG = {flag_of(dotted): dotted for dotted in _dotted_names()}


def field_of_flag(flag: str) -> str | None:
    """The dotted field a flag sets (``--no-x`` is the flag ``--x``), or None for other flags."""
    if flag.startswith("--no-") and flag not in _FIELD_OF_FLAG:
        flag = "--" + flag[len("--no-"):]
    return _FIELD_OF_FLAG.get(flag)


def _get(spec: JobSpec, dotted: str) -> Any:
    section, dot, name = dotted.rpartition(".")
    return getattr(getattr(spec, section), name) if section else getattr(spec, name)


def add_field_argument(group, flag: str, dest: str, default: Any, doc: str, listed: bool = True) -> None:
    """One flag for one dataclass field: booleans as --x/--no-x, lists and tables repeatable, help =
    the field's docstring and default (none, and absent from --help, when not ``listed``). Values
    stay strings here: the schema's coercion converts them, so a flag and a TOML key are checked by
    the same code."""
    shown = json.dumps(default) if isinstance(default, (dict, list, str)) else default
    help_text = f"{doc} (default: {shown})".replace("%", "%%")
    if not listed:
        help_text = argparse.SUPPRESS
    if isinstance(default, bool):
        group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    elif isinstance(default, list):
        group.add_argument(flag, dest=dest, action="append", default=None, metavar="LINE",
                           help=help_text if not listed else help_text + " (repeatable)")
    elif isinstance(default, dict):
        group.add_argument(flag, dest=dest, action="append", default=None, metavar="KEY=VALUE",
                           help=help_text if not listed else help_text + " (repeatable)")
    else:
        group.add_argument(flag, dest=dest, default=None, metavar=type(default).__name__.upper(), help=help_text)


def _dest(dotted: str) -> str:
    section, dot, name = dotted.rpartition(".")
    return f"spec__{section}__{name}"


def add_spec_arguments(parser: argparse.ArgumentParser, rank_only: bool = False) -> None:
    """Add --job, --set and one flag per spec field (help = the field's docstring and default).
    ``rank_only`` (``python -m hpcprof.train``): the :func:`launch_only` fields are accepted but not
    listed in --help."""
    parser.add_argument("--job", metavar="FILE", help="job spec (TOML), e.g. jobs/demo-local.toml")
    parser.add_argument(
        "--set",
        metavar="SECTION.FIELD=VALUE",
        action="append",
        default=[],
        help="override any spec field, e.g. --set data.num_workers=4 (repeatable)",
    )
    groups: dict[str, Any] = {}  # argument groups by section (argparse names their type privately)
    for dotted, default, doc in iter_fields():
        section = dotted.rpartition(".")[0]
        group = groups.get(section)
        if group is None:
            group = groups[section] = parser.add_argument_group(f"[{section}] fields" if section else "run")
        add_field_argument(group, flag_of(dotted), _dest(dotted), default, doc,
                           listed=not (rank_only and launch_only(dotted)))


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The dotted overrides a command line asked for (only the flags actually given)."""
    out: dict[str, Any] = {}
    for key, value in vars(args).items():
        if not key.startswith("spec__") or value is None:
            continue
        _, section, name = key.split("__", 2)
        out[f"{section}.{name}" if section else name] = value
    for item in args.set or []:
        dotted, sep, value = item.partition("=")
        if not sep or not dotted.strip():
            raise SpecError(f"--set expects SECTION.FIELD=VALUE, got {item!r}")
        out[dotted.strip()] = value
    return out


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(hpcprof's arguments, the workload's) of a command line: everything after the first ``--``
    goes to the user's script or function (``--script train.py -- --lr 0.1``). None: no ``--``."""
    if "--" not in argv:
        return list(argv), None
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1:])


def spec_from_args(args: argparse.Namespace, workload_args: list[str] | None = None) -> JobSpec:
    """The validated spec for a parsed command line (job file, then flags, then `workload_args`: what
    followed ``--``, see :func:`split_passthrough`); its warnings (:meth:`JobSpec.warnings`) are
    printed to stderr, once, before anything runs."""
    overrides = overrides_from_args(args)
    if workload_args is not None:
        overrides["workload.args"] = list(workload_args)
    spec = load_spec(args.job, overrides)
    for w in spec.warnings():
        print(f"hpcprof: warning: {w}", file=sys.stderr)
    return spec


def override_items(spec: JobSpec, base: JobSpec | None = None) -> list[tuple[str, str, str | None]]:
    """(dotted field, flag, value or None for a bare flag) for every field where `spec` differs
    from `base` (defaults): what :func:`override_argv` flattens, and what sbatch rendering checks
    field by field."""
    base = base or JobSpec()
    items: list[tuple[str, str, str | None]] = []
    for dotted, _default, _doc in iter_fields():
        value, ref = _get(spec, dotted), _get(base, dotted)
        if value == ref:
            continue
        flag = flag_of(dotted)
        if isinstance(value, bool):
            items.append((dotted, flag if value else "--no-" + flag[2:], None))
        elif isinstance(value, list):
            items += [(dotted, flag, line) for line in value]
        elif isinstance(value, dict):
            items += [(dotted, flag, f"{k}={v}") for k, v in value.items()]
        else:
            items.append((dotted, flag, str(value)))
    return items


def override_argv(spec: JobSpec, base: JobSpec | None = None) -> list[str]:
    """Command-line flags that turn `base` (defaults) into `spec`. A value that starts with a dash is
    written ``--flag=value``, so that argparse cannot take it for a flag."""
    argv: list[str] = []
    for _dotted, flag, value in override_items(spec, base):
        if value is None:
            argv.append(flag)
        elif value.startswith("-"):
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, value]
    return argv


# --------------------------------------------------------------------------- other commands' flags
def add_resource_arguments(group, flags: dict[str, str], defaults: SlurmResources) -> None:
    """Flags for some fields of :class:`SlurmResources` under names of the caller's choosing (the
    analysis array's ``--slurm-partition``...): same help (the field's docstring, with
    ``defaults``' value), same parsing (:func:`resources_from_args`), same checks."""
    docs = field_docs(SlurmResources)
    for name, flag in flags.items():
        add_field_argument(group, flag, f"resources__{name}", getattr(defaults, name), docs.get(name, ""))


def resources_from_args(args: argparse.Namespace, flags: dict[str, str], defaults: SlurmResources) -> SlurmResources:
    """The validated :class:`SlurmResources` of flags added by :func:`add_resource_arguments`;
    errors (:class:`SpecError`, :class:`ResourcesError`) name the flag."""
    values = copy.deepcopy(defaults)
    for name, flag in flags.items():
        value = getattr(args, f"resources__{name}", None)
        if value is not None:
            setattr(values, name, coerce_value(flag, value, getattr(defaults, name)))
    return values.validate(name=lambda field: flags.get(field, field))
