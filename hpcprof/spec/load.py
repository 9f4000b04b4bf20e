"""Building a job spec: defaults, then a job file, then overrides (flags, ``--set``), validated once.

Precedence: dataclass defaults < job file (``jobs/*.toml``) < overrides. Unknown keys are refused
with the closest valid key and the list of valid ones; every value goes through
:func:`.toml.coerce_value`; the whole spec is validated once at the end (:meth:`JobSpec.validate`).
"""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any

from .errors import SpecError
from .schema import SECTIONS, JobSpec
from .toml import coerce_value, read_toml


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
                setattr(section, sub, coerce_value(f"{key}.{sub}", subvalue, default))
        elif key in top_fields:
            setattr(spec, key, coerce_value(key, value, getattr(spec, key)))
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
        apply_values(spec, read_toml(path), where=f"{path}: ")
    for dotted, value in (overrides or {}).items():
        set_value(spec, dotted, value, where="command line: ")
    return spec.validate()


def spec_from_dict(data: dict[str, Any]) -> JobSpec:
    """Rebuild a spec from :meth:`JobSpec.to_dict` output (manifest, spec.toml)."""
    return apply_values(JobSpec(), data).validate()
