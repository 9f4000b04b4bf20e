"""The job spec as TOML: loading a job file, coercing each value to its field's type, and writing a
spec back (``spec.toml`` in every run directory).

Precedence: dataclass defaults < job file (``jobs/*.toml``) < overrides (command-line flags,
``--set``). Unknown keys are refused with the closest valid key and the list of valid ones; the
whole spec is validated once at the end (:meth:`JobSpec.validate`).
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..slurm.resources import ResourcesError, parse_extra
from .schema import SECTIONS, JobSpec, SpecError

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def coerce_value(key: str, value: Any, default: Any) -> Any:
    """Convert a TOML or command-line value to the type of the field's default; errors name ``key``
    (a dotted field, or a flag for the analysis array's resources)."""
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
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"{key} must be an integer, got {value!r}") from None
    if kind is float:
        if isinstance(value, bool):
            raise SpecError(f"{key} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{key} must be a number, got {value!r}") from None
        if not math.isfinite(number):  # NaN or infinity would also make manifest.json invalid JSON
            raise SpecError(f"{key} must be a finite number, got {value!r}")
        return number
    if kind is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise SpecError(f"{key} must be a string, got {value!r}")
        return str(value)
    if kind is dict:  # resources.slurm_extra, the only table-valued field
        try:
            return parse_extra(value, key)
        except ResourcesError as exc:
            raise SpecError(str(exc)) from None
    if kind is list:
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{key} must be a list of strings, got {value!r}")
        return list(value)
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
    """The spec a run directory's ``spec.toml`` holds, validated."""
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
