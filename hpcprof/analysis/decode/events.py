"""The records one Kineto trace is decoded into (parsing only; no analysis here).

Why: HTA's loader spends most of its time in per-row pandas `apply` calls after `json.loads`, and
our own timeline used to walk the raw dicts a second time. Here the JSON is decoded with msgspec
straight into small typed records that keep only the fields any analysis reads (the event's
top-level keys and the handful of `args` HTA's default parser config keeps, plus the ones the
straggler analysis needs); decode/columns.py turns them into the one event table (one column per
field) from which HTA's per-rank frame (`analysis/hta/frame.py`) and our timeline (`timeline.py`)
are built.

Missing keys: a top-level key an event does not have is NaN in its column, exactly as in
`pandas.DataFrame(traceEvents)` (what HTA builds); an `args` key an event does not have holds the
default HTA's parser gives it (for example `stream` -1), or None for our own keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import pandas as pd

NAN = math.nan

# HTA's default ParserConfig args (name in HTA's frame, key in the trace, default): checked against
# the installed HTA by hta/frame.fast_path_problem(), which falls back to HTA's own loader if they differ.
HTA_ARGS = (
    ("stream", "stream", -1),
    ("correlation", "correlation", -1),
    ("bytes", "bytes", -1),
    ("memory_bw_gbps", "memory bandwidth (GB/s)", 0.0),
    ("wait_on_stream", "wait_on_stream", -1),
    ("wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_record_corr_id", -1),
    ("input_dims", "Input Dims", "-1"),
    ("input_type", "Input type", "-1"),
    ("input_strides", "Input Strides", "-1"),
    ("external_id", "External id", -1),
)
# args the straggler analysis and the memory figure read (column name, key in the trace)
OWN_ARGS = (
    ("pg_name", "Process Group Name"),
    ("seq_upper", "Seq"),
    ("seq_lower", "seq"),
    ("total_allocated", "Total Allocated"),
    ("device_type", "Device Type"),
    # collective metadata (ranks/comm_kernels.py): on record_param_comms, and on kernels since PyTorch 2.2
    ("coll_name", "Collective name"),
    ("comms_id", "Comms Id"),
    ("in_nelems", "In msg nelems"),
    ("msg_dtype", "dtype"),
    # kernel launch figures the GPU summary reads (ranks/gpu_summary.py)
    ("blocks_per_sm", "blocks per SM"),
    ("occupancy_pct", "est. achieved occupancy %"),
    ("device", "device"),
    ("external_id_lc", "external id"),  # older Kineto's spelling of "External id"
    # scalar and list arguments of operators (PyTorch 2.x record_shapes): conv stride/padding, is_causal
    ("concrete_inputs", "Concrete Inputs"),
    # a kernel's launch configuration: identical work across ranks (ranks/kernel_work.py)
    ("grid", "grid"),
    ("block", "block"),
    # `[memory]` instant events and module nodes the memory view reads (ranks/memory_view.py)
    ("mem_bytes", "Bytes"),
    ("mem_addr", "Addr"),
    ("total_reserved", "Total Reserved"),
    ("device_id", "Device Id"),
    ("module_id", "Python module id"),
)
TOP_LEVEL = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s")
# top-level trace keys kept as metadata (everything Kineto writes besides traceEvents)
META_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "record_shapes",
    "with_stack",
    "with_modules",
    "with_flops",
    "profile_memory",
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "trace_id",
    "host_name",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceName",
)


# args whose values are lists (an operator's input dims, types, strides and scalars; a kernel's grid
# and block), repeated through the trace: the block decoders (stream.py) keep each one's JSON text
# (msgspec.Raw, absent keys the text of their default) and columns.py decodes each distinct text
# once, instead of msgspec building the same nested lists for every event
TEXT_ARGS = frozenset(("input_dims", "input_type", "input_strides", "concrete_inputs", "grid", "block"))


def _record_types(prefix: str, text_args=frozenset()):
    """(args type, event type) of the records, generated from the tables above, so the field lists
    live in one place and every pair of types has the same fields in the same order. `text_args`:
    the args kept as their JSON text."""

    def arg(name: str, raw: str, default):
        if name in text_args:
            return (name, msgspec.Raw, msgspec.field(default=msgspec.Raw(msgspec.json.encode(default)), name=raw))
        return (name, Any, msgspec.field(default=default, name=raw))

    args = msgspec.defstruct(f"{prefix}Args", [arg(name, raw, default) for name, raw, default in HTA_ARGS]
                             + [arg(name, raw, None) for name, raw in OWN_ARGS], gc=False)
    # a top-level key an event lacks is NaN (as in pandas.DataFrame(traceEvents)); args None: no args
    event = msgspec.defstruct(f"{prefix}Event", [(k, Any, NAN) for k in TOP_LEVEL] + [("args", args | None, None)], gc=False)
    return args, event


_Args, _Event = _record_types("_")  # the whole-file decode: every value as the Python object it is
_BlockArgs, _BlockEvent = _record_types("_Block", TEXT_ARGS)  # the block decoders (stream.py)
_NO_ARGS, _NO_BLOCK_ARGS = _Args(), _BlockArgs()
_Doc = msgspec.defstruct("_Doc", [("traceEvents", list[_Event])] + [(k, Any, None) for k in META_KEYS])
_TYPED = msgspec.json.Decoder(_Doc)

_EVENT_FIELDS = _Event.__struct_fields__
_ARGS_FIELDS = _Args.__struct_fields__


class DecodeError(ValueError):
    """The bytes are not a JSON document (message from the decoder, with its position)."""


class ShapeError(ValueError):
    """Valid JSON but not a Kineto/Chrome trace (no traceEvents list of objects)."""


def raise_if_not_utf8(data: bytes, exc: msgspec.DecodeError) -> None:
    """Raise Python's UnicodeDecodeError, which names the offending byte, where msgspec refused
    `data` for not being UTF-8. msgspec 0.23 checks UTF-8 itself and says only "Invalid UTF-8
    encoded string", with no position; earlier releases left it to Python's decoder. Returns for
    any other DecodeError."""
    if "UTF-8" in str(exc):
        bytes(data).decode("utf-8")


@dataclass
class DecodedTrace:
    """One trace, decoded: its metadata (top-level keys) and its events as typed records."""

    meta: dict[str, Any]
    events: list  # of _Event
    skipped: int = 0  # entries of traceEvents that are not JSON objects (dropped)

    def __len__(self) -> int:
        return len(self.events)


def decode(raw: bytes) -> DecodedTrace:
    """Decode a trace's JSON bytes. Raises DecodeError (not JSON) or ShapeError (not a trace)."""
    try:
        doc = _TYPED.decode(raw)
    except msgspec.ValidationError:
        return _decode_loose(raw)
    except msgspec.DecodeError as exc:
        raise_if_not_utf8(raw, exc)
        raise DecodeError(str(exc)) from None
    meta = {k: getattr(doc, k) for k in META_KEYS if getattr(doc, k) is not None}
    return DecodedTrace(meta=meta, events=doc.traceEvents)


def _decode_loose(raw: bytes) -> DecodedTrace:
    """Slow path for documents the typed decoder refuses: generic decode, then keep what is usable."""
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:  # the typed decoder refuses a type before it reads the rest
        raise_if_not_utf8(raw, exc)
        raise DecodeError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ShapeError("no 'traceEvents' list")
    events, skipped = loose_events(doc["traceEvents"])
    meta = {k: doc[k] for k in META_KEYS if doc.get(k) is not None}
    return DecodedTrace(meta=meta, events=events, skipped=skipped)


def loose_events(items: list) -> tuple[list, int]:
    """Events from already-decoded JSON elements the typed decoder refused (the whole file here, a
    block in stream.py): objects kept, anything else counted as skipped."""
    events, skipped = [], 0
    for e in items:
        if not isinstance(e, dict):
            skipped += 1
            continue
        a = e.get("args")
        # HTA gives every kept arg its default when args is not a dict; keep "the event has args"
        args = msgspec.convert(a, _Args, strict=False) if isinstance(a, dict) else (_NO_ARGS if a is not None else None)
        events.append(_Event(**{k: e[k] for k in TOP_LEVEL if k in e}, args=args))
    return events, skipped


# top-level keys HTA drops before any analysis and no analysis of ours reads: not materialised
DROPPED_KEYS = ("id", "bp", "s")
# kept as the Python objects they are (no type inferred): only compared with literals (HTA drops
# it too); stored as a pandas Categorical (`categories`), so that each comparison tests the few
# distinct values, not every row
OBJECT_KEYS = ("ph",)


def categories(col: pd.Series) -> pd.Series:
    """An object column as a Categorical of its values (missing values, None or NaN, become NaN);
    unchanged where a value cannot be a category (not hashable)."""
    try:
        return col.astype("category")
    except TypeError:
        return col


_INT, _NUM = frozenset((int,)), frozenset((int, float))


def number_kind(values, types: set | None = None) -> str | None:
    """"int" when every value is an int (or there is none), "num" when every value is an int or a
    float, else None: a column's dtype decision (decode/columns.py), in one pass over the values'
    types in C (an `all(type(v) is int ...)` generator was a third of the table's time). Exact
    types, so bools, int or float subclasses, None and texts are not numbers here, as in pandas'
    inference.
    `types`: the set of the values' types, where the caller has it already."""
    if types is None:
        types = set(map(type, values))
    if types <= _INT:
        return "int"
    if types <= _NUM:
        return "num"
    return None
