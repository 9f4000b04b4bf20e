"""The job spec's values as TOML: reading a job file (errors name the file) and coercing each value to
its field's type (TOML, flags and ``--set`` go through the same :func:`coerce_value`). A spec is
written back (``spec.toml`` in every run directory) by :meth:`JobSpec.to_toml`, with tomli-w.

No spec class is imported here; :mod:`.load` applies what is read to a :class:`JobSpec`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .resources import ResourcesError, parse_extra
from .errors import SpecError

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


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML file at ``path`` as a dict; a missing or malformed file is a SpecError naming it."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"job file {str(path)!r} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"job file {str(path)!r} cannot be read: {exc}") from None
