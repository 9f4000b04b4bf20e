"""CUDA memory snapshots in a run directory (``profiler.memory_snapshot``), and what held the memory
at their peak.

A rank with the option on records the caching allocator's history from its start and writes it,
with ``torch.cuda.memory._dump_snapshot`` (a documented PyTorch API that carries an underscore),
to ``memory/rank-<r>.pickle`` after its first trace, and to ``memory/rank-<r>.oom.pickle`` when
it fails with CUDA out of memory (hpcprof.rank.failures). The format is the one
``torch.cuda.memory._snapshot`` documents: ``segments`` (the allocator's state at the dump: each
cudaMalloc'd segment with its blocks, their state and the frames that allocated them) and
``device_traces`` (per device, the allocator's actions in order: alloc, free_requested,
free_completed, segment_alloc, segment_free, oom, ...). https://pytorch.org/memory_viz draws it.

What is read here (:func:`peak_blocks`): per device, the memory in use over the recorded history,
its peak, and the blocks live at the peak, largest first, with the frames that allocated them. In
use: from an ``alloc`` to the ``free_completed`` of its address (a block awaiting its free on
another stream still holds its memory). The history keeps only the last entries
(``max_entries``): blocks allocated before it began are known from the end state, as
memory_viz knows them: a block freed in the history without its ``alloc``, or active at the dump
and never allocated in the history, was live from the start of the history.

The files are pickles written by the job, read as plain values only (:mod:`.plain_pickle`): no code
in a run directory ever runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .plain_pickle import PlainPickleError, load_plain

MEMORY_DIR = "memory"
SNAPSHOT_TEMPLATE = "rank-{rank}{kind}.pickle"
"""memory/rank-<r>.pickle after the first trace; memory/rank-<r>.oom.pickle at an out-of-memory failure."""
MAX_BYTES = 1 << 30
"""Larger files are not read (a snapshot of 100,000 entries with frames is tens of MB)."""
TOP_BLOCKS = 10
FRAMES_KEPT = 6


class SnapshotError(ValueError):
    """A snapshot file that cannot be read as one (the message names the file)."""


def snapshot_path(root: str | Path, rank: int, oom: bool = False) -> Path:
    return Path(root) / MEMORY_DIR / SNAPSHOT_TEMPLATE.format(rank=rank, kind=".oom" if oom else "")


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """The snapshot in `path`, or SnapshotError naming the file and why."""
    try:
        data = load_plain(path, MAX_BYTES, "a CUDA memory snapshot")
    except PlainPickleError as exc:
        raise SnapshotError(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("segments", []), list) \
            or not isinstance(data.get("device_traces", []), list):
        raise SnapshotError(f"{path}: not a CUDA memory snapshot (no segments and device_traces lists)")
    return data


RECORDING_FRAMES = ("torch::unwind::", "torch::CapturedTraceback::", "torch::cuda::(anonymous namespace)::gather",
                    "c10::cuda::CUDACachingAllocator::")
"""Name prefixes of the C++ frames of the recording itself (the unwinder and the caching allocator), which a
snapshot taken with C++ stacks (PyTorch's default, stacks="all") puts first on every block: left out."""


def _frames(frames: Any, keep: int | None = FRAMES_KEPT) -> list[str]:
    """'file:line name' of the first `keep` frames (innermost first; None: all), as memory_viz lists
    them, past the frames of the recording itself (RECORDING_FRAMES)."""
    out = []
    for f in frames if isinstance(frames, list) else []:
        if not isinstance(f, dict) or str(f.get("name", "")).startswith(RECORDING_FRAMES):
            continue
        out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}")
        if len(out) == keep:
            break
    return out


def _where(frames: list[str]) -> str | None:
    """The innermost Python frame outside PyTorch and the standard library (the user's line); else
    the innermost frame: as it is when it is Python's, its function alone when it is C++'s (memory
    that C++ alone allocated: the autograd engine's thread, cuDNN's workspaces)."""
    for f in frames:
        path = f.split(":", 1)[0]
        if path.endswith(".py") and "/torch/" not in path and "site-packages" not in path and "/lib/python" not in path:
            return f
    if not frames or frames[0].split(":", 1)[0].endswith(".py"):
        return frames[0] if frames else None
    name = frames[0].split(" ", 1)[-1]  # past 'file:line ', which C++ frames mostly lack ('??:0', ':0')
    return name.split("(", 1)[0] or name


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def peak_blocks(snapshot: dict[str, Any], top: int = TOP_BLOCKS) -> list[dict[str, Any]]:
    """Per device with a recorded history: the peak of the memory in use over it, the live blocks
    at the peak (count, and the `top` largest with their frames), the OOM entries, and the memory
    reserved and allocated at the dump. Devices are those of ``device_traces`` (its index)."""
    segments = [s for s in snapshot.get("segments", []) if isinstance(s, dict)]
    out = []
    for device, trace in enumerate(snapshot.get("device_traces", [])):
        if not isinstance(trace, list):
            continue
        entries = [e for e in trace if isinstance(e, dict)]
        allocated_in_trace = {_int(e.get("addr")) for e in entries if e.get("action") == "alloc"}
        live: dict[int, tuple[int, list]] = {}
        # live before the history began: freed in it without its alloc first ...
        seen: set[int] = set()
        for e in entries:
            addr, act = _int(e.get("addr")), e.get("action")
            if addr is None:
                continue
            if act == "alloc":
                seen.add(addr)
            elif act == "free_completed" and addr not in seen:
                live[addr] = (_int(e.get("size")) or 0, e.get("frames") or [])
                seen.add(addr)
        # ... or active at the dump and never allocated in it
        for s in segments:
            if _int(s.get("device")) not in (None, device):
                continue
            for b in s.get("blocks", []) if isinstance(s.get("blocks"), list) else []:
                if not isinstance(b, dict) or not str(b.get("state", "")).startswith("active"):
                    continue
                addr = _int(b.get("address"))
                if addr is not None and addr not in allocated_in_trace and addr not in live:
                    live[addr] = (_int(b.get("size")) or 0, b.get("frames") or [])
        used = sum(size for size, _ in live.values())
        peak, peak_at, peak_live = used, -1, dict(live)
        ooms = []
        for i, e in enumerate(entries):
            act, addr, size = e.get("action"), _int(e.get("addr")), _int(e.get("size")) or 0
            if act == "alloc" and addr is not None:
                old = live.pop(addr, None)
                used += size - (old[0] if old else 0)
                live[addr] = (size, e.get("frames") or [])
                if used > peak:
                    peak, peak_at, peak_live = used, i, dict(live)
            elif act == "free_completed" and addr is not None and addr in live:
                used -= live.pop(addr)[0]
            elif act == "oom":
                ooms.append({"entry": i, "requested_bytes": size, "device_free_bytes": _int(e.get("device_free")),
                             "in_use_bytes": used, "frames": _frames(e.get("frames"))})
        if not entries and not peak_live:
            continue
        largest = sorted(peak_live.values(), key=lambda v: -v[0])[:top]
        mine = [s for s in segments if _int(s.get("device")) in (None, device)]
        out.append({
            "device": device, "entries": len(entries), "peak_bytes": peak, "peak_entry": peak_at,
            "live_blocks_at_peak": len(peak_live),
            "largest_blocks": [{"bytes": size, "where": _where(_frames(fr, None)), "frames": _frames(fr)} for size, fr in largest],
            "oom": ooms,
            "reserved_bytes_at_dump": sum(_int(s.get("total_size")) or 0 for s in mine),
            "allocated_bytes_at_dump": sum(_int(s.get("allocated_size")) or 0 for s in mine),
        })
    return out
