"""How the manifest's record types (hpcprof.rundir.manifest) map to JSON and back.

Guarantees: :func:`to_json` writes a record's declared fields, then the fields kept in its
``extra`` unchanged; :func:`from_json` reads any manifest an hpcprof ever wrote: a missing field
takes its default (None where it has none), a field this version does not know goes to ``extra``
where the type has one, and a value of the wrong JSON shape (an object or list where a record is
declared) raises :class:`RunDirError` with one line naming the field. Scalars are taken as found;
:func:`hpcprof.rundir.manifest.checked` is the check of their types, by :func:`json_type`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .layout import RunDirError


def fields_of(cls) -> list[str]:
    """The JSON keys of a manifest record type (its dataclass fields, less ``extra``)."""
    return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]


def to_json(obj: Any) -> Any:
    """A record (or a list or dict of them) as plain JSON values: its fields, then its ``extra``."""
    if dataclasses.is_dataclass(obj):
        out = {name: to_json(getattr(obj, name)) for name in fields_of(type(obj))}
        out.update(getattr(obj, "extra", {}))
        return out
    if isinstance(obj, list):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def from_json(cls, data: Any, where: str):
    """Build a record from JSON, leniently: missing fields take their defaults (None when the field has
    none: older runs lack fields added since), unknown ones go to ``extra`` where the type has one."""
    if not isinstance(data, dict):
        raise RunDirError(f"manifest.json: {where} should be an object, found {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        if name == "extra":
            continue
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[name] = None
    rest = {k: v for k, v in data.items() if k not in known or k == "extra"}
    if "extra" in known:
        kwargs["extra"] = rest
    return cls(**kwargs)


def _convert(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        if not isinstance(value, list):
            raise RunDirError(f"manifest.json: {where} should be a list, found {type(value).__name__}")
        return [from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def json_type(hint: Any) -> type:
    """The JSON type a field's annotation asks for (a record type is an object)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    origin = typing.get_origin(hint) or hint
    if dataclasses.is_dataclass(origin):
        return dict
    return origin if origin in (int, str, list, dict, float, bool) else object
