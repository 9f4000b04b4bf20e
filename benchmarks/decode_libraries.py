"""One trace's decode: hpcprof's event table against what the JSON libraries at hand can do at best.

Why it exists: issue 34's fresh-analysis floors were set while a hand-written C decoder built the
event table; the issue asked for a decode on a maintained library instead. This prints, for one
trace, the CPU seconds (one thread, garbage collector off, as in the analysis' map) of:

- ``hpcprof``: `decode.stream.split_table`, the bytes of the trace to the event table every per-rank
  analysis reads (what a rank's decode costs in the map);
- ``msgspec, records``: msgspec alone, the events into hpcprof's typed records (the kept fields
  only), no table: a lower bound for any decode that goes through msgspec's Python objects;
- ``msgspec, no args``: the same without the events' `args` (the issue's own "events without
  args" figure), for scale;
- ``pyarrow.json + to_pandas``: Arrow's columnar JSON reader on the same events written one per
  line, with an explicit schema of the kept fields (their Arrow types taken from the trace's own
  values; fields of more than one JSON type, such as Kineto's `pid`, are left out: Arrow has no
  type for "a number or a text"), then `Table.to_pandas()`. Writing the lines is not counted.

Each is run `--repeats` times, interleaved; the best and the median are printed. Numbers and the
command that repeats them: benchmarks/README.md.

    .venv/bin/python benchmarks/decode_libraries.py TRACE.json[.gz] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections import defaultdict

import msgspec
import pyarrow as pa
import pyarrow.json as pa_json

from hpcprof.analysis.decode import events as ev
from hpcprof.analysis.decode.load import read_bytes
from hpcprof.analysis.decode.stream import split_table


def _arrow_schema(events: list[dict]) -> tuple[pa.Schema, list[str]]:
    """An explicit Arrow schema of the fields hpcprof keeps, typed from the values in the trace; the
    fields whose values have no one Arrow type are left out (returned by name)."""
    top: dict[str, list] = defaultdict(list)
    args: dict[str, list] = defaultdict(list)
    kept_args = {raw for _n, raw, _d in ev.HTA_ARGS} | {raw for _n, raw in ev.OWN_ARGS}
    for e in events:
        for k, v in e.items():
            if k in ev.TOP_LEVEL:
                top[k].append(v)
        for k, v in (e.get("args") or {}).items():
            if k in kept_args:
                args[k].append(v)
    left_out: list[str] = []

    def typed(values: dict[str, list], where: str) -> list[tuple[str, pa.DataType]]:
        fields = []
        for k, v in values.items():
            try:
                fields.append((k, pa.array(v).type))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                left_out.append(f"{where}{k}")
        return fields

    fields = typed(top, "") + [("args", pa.struct(typed(args, "args.")))]
    return pa.schema(fields), left_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeats", type=int, default=5)
    opts = ap.parse_args()
    raw = read_bytes(opts.trace)  # the JSON text (.gz inflated, not timed)
    if split_table(raw) is None:
        raise SystemExit(f"{opts.trace}: a layout hpcprof decodes whole, not in blocks: nothing to compare")
    generic = msgspec.json.decode(raw)["traceEvents"]
    schema, left_out = _arrow_schema(generic)
    lines = b"\n".join(msgspec.json.encode(e) for e in generic)
    del generic
    no_args = msgspec.defstruct("NoArgs", [(k, object, None) for k in ev.TOP_LEVEL], gc=False)
    records = msgspec.json.Decoder(msgspec.defstruct("Doc", [("traceEvents", list[ev._BlockEvent])]))
    bare = msgspec.json.Decoder(msgspec.defstruct("Doc", [("traceEvents", list[no_args])]))
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pa_json.ReadOptions(use_threads=False, block_size=1 << 26)
    runs = {
        "hpcprof (split_table)": lambda: split_table(raw)[1],
        "msgspec, records": lambda: records.decode(raw),
        "msgspec, no args": lambda: bare.decode(raw),
        "pyarrow.json + to_pandas": lambda: pa_json.read_json(pa.BufferReader(lines), read_options=read,
                                                              parse_options=parse).to_pandas(),
    }
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    gc.disable()
    for _ in range(opts.repeats):
        for name, fn in runs.items():
            t = time.process_time()
            out = fn()
            cpu[name].append(time.process_time() - t)
            del out
            gc.collect()
    print(f"{opts.trace}: {len(raw) / 1e6:.1f} MB; Arrow schema without {', '.join(left_out) or 'nothing'}; "
          f"{opts.repeats} runs each, interleaved, CPU seconds")
    for name, v in cpu.items():
        print(f"  {name:26s} best {min(v):.3f}  median {statistics.median(v):.3f}")


if __name__ == "__main__":
    main()
