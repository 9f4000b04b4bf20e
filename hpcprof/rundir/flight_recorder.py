"""PyTorch flight-recorder dumps in a run directory, and the hang verdict they give on their own.

PyTorch's flight recorder keeps each rank's last collectives. A NCCL job launched by hpcprof has it
on (:func:`hpcprof.rank.device.nccl_environment`): when the NCCL watchdog times out, each rank dumps
it to ``nccl-flight-recorder/rank-<r>`` (PyTorch's format, version 2.x: a pickle of ``entries``,
``pg_config`` and ``pg_status``). An entry is one collective call: its process group
(``process_group``: name, description), its number in that group (``collective_seq_id``, from 1),
``profiling_name`` (``nccl:all_reduce``), the tensors' sizes and dtypes, its state, and the Python
frames that called it. A gloo job's dumps have the same form (tests/data/flight_recorder holds real
ones), but PyTorch writes those only through a private call, which hpcprof does not make: a gloo
job's hang is read from hpcprof's own hang notes (:mod:`.hangs`).

The verdict (:func:`fr_verdict`), per process group: the collective the job hung in is the highest
number any rank called in the group, when some rank has not completed it. A rank whose last call in
the group has a lower number never entered it; the ranks that did waited for it. When every rank
reached that number but the calls differ (name or sizes), the job hung on a mismatch: the ranks
whose call differs from the one most ranks made are named with both calls (without a majority, both
calls and no rank). When every rank made the same call and none completed it, the collective itself
hung (the network, NCCL): no rank is blamed. Point-to-point calls (``is_p2p``) are numbered apart and
left out.

Dumps are read as plain values only (:mod:`.plain_pickle`): nothing in them runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .frames import Frame, where_and_caller
from .plain_pickle import PlainPickleError, load_plain

FR_DIR = "nccl-flight-recorder"
FR_PREFIX = "rank-"
"""PyTorch's dump file is this prefix (TORCH_NCCL_DEBUG_INFO_TEMP_FILE) followed by the rank."""
MAX_BYTES = 256 << 20
"""Larger files are not read (a dump of 2,000 entries with their frames is about a megabyte)."""
_DUMP_NAME = re.compile(re.escape(FR_PREFIX) + r"(\d+)")


@dataclass
class Call:
    """One collective call of one rank, as its dump recorded it."""

    rank: int
    seq: int
    name: str
    """The collective without the backend's prefix: ``all_reduce`` for ``nccl:all_reduce``."""
    sizes: list
    dtypes: list
    completed: bool
    where: str | None
    """The innermost calling frame outside torch and hpcprof: ``function (folder/file.py:line)``."""

    def label(self) -> str:
        return f"{self.name} #{self.seq}"

    def shape(self) -> str:
        return f"{self.sizes} {'/'.join(map(str, self.dtypes))}".strip()


def dump_folder(root: str | Path) -> Path:
    """Where the ranks of the run directory `root` dump their flight recorders."""
    return Path(root) / FR_DIR


def read_dumps(folder: str | Path) -> tuple[dict[int, dict], list[str]]:
    """The dumps ``rank-<r>`` in `folder`, by rank, and one warning naming each file that is not a
    dump (({}, []) without the folder)."""
    folder = Path(folder)
    dumps: dict[int, dict] = {}
    warnings: list[str] = []
    if not folder.is_dir():
        return dumps, warnings
    for path in sorted(folder.iterdir()):
        m = _DUMP_NAME.fullmatch(path.name)
        if m is None or not path.is_file():
            continue
        try:
            data = load_plain(path, MAX_BYTES, "a flight-recorder dump")
        except PlainPickleError as exc:
            warnings.append(str(exc))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            warnings.append(f"{path}: not a flight-recorder dump (no entries list)")
            continue
        dumps[int(m.group(1))] = data
    return dumps, warnings


WATCHDOG_LINE = re.compile(r"[^\n]*Watchdog caught collective operation timeout[^\n]*")
"""ProcessGroupNCCL's message when a collective timed out (it names the rank, the collective's SeqNum
and OpType), as the rank's log holds it."""
LOG_TAIL_BYTES = 1 << 20


def watchdog_message(logs: str | Path) -> str | None:
    """The first NCCL watchdog timeout message in the run's logs (the last megabyte of each file
    under `logs`, files in name order), without its leading timestamp noise; None without one."""
    folder = Path(logs)
    if not folder.is_dir():
        return None
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        m = WATCHDOG_LINE.search(text)
        if m:
            line = m.group(0).strip()
            start = line.find("[PG ")
            return (line[start:] if start >= 0 else line)[:400]
    return None


def _where(frames: Any) -> str | None:
    """The training code's frame among an entry's frames (innermost first)."""
    kept = [Frame(str(f.get("filename", "")), f.get("line"), str(f.get("name"))) for f in frames or [] if isinstance(f, dict)]
    return where_and_caller(kept)[1]


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def calls_by_group(rank: int, dump: dict) -> dict[tuple[str, str], list[Call]]:
    """The rank's collective calls per process group (name, description), in number order."""
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    out: dict[tuple[str, str], list[Call]] = {}
    for e in dump["entries"]:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        seq, pg = _int(e.get("collective_seq_id")), e.get("process_group")
        if seq is None or seq <= 0 or not isinstance(pg, (list, tuple)) or len(pg) < 2:
            continue
        done_upto = _int((status.get(str(e.get("pg_id", pg[0]))) or {}).get("last_completed_collective"))
        name = str(e.get("profiling_name") or "a collective").split(":")[-1]
        out.setdefault((str(pg[0]), str(pg[1])), []).append(Call(
            rank, seq, name, e.get("input_sizes") or [], e.get("input_dtypes") or [],
            e.get("state") == "completed" or (done_upto is not None and done_upto >= seq), _where(e.get("frames"))))
    for calls in out.values():
        calls.sort(key=lambda c: c.seq)
    return out


def _members(dumps: dict[int, dict], group: tuple[str, str], world_size: int | None, callers: set[int]) -> list[int]:
    """The group's ranks: from the dumps' ``pg_config`` where it names them, all ranks for the
    default group, else the ranks that called into it."""
    ranks: set[int] = set()
    for dump in dumps.values():
        cfg = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
        entry = cfg.get(group[0])
        if isinstance(entry, dict):
            try:
                ranks |= {int(r) for r in json.loads(str(entry.get("ranks")))}
            except (ValueError, TypeError):
                pass
    if not ranks and group[1] == "default_pg":
        ranks = set(dumps) | set(range(world_size or 0))
    return sorted(ranks or callers)


def _group_label(group: tuple[str, str]) -> str:
    return "the default group" if group[1] == "default_pg" else f"group {group[1] or group[0]!r}"


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _finding(dumps: dict[int, dict], group: tuple[str, str], calls: dict[int, list[Call]],
             world_size: int | None) -> dict[str, Any] | None:
    """The verdict of one process group (None: it did not hang)."""
    members = _members(dumps, group, world_size, set(calls))
    top = max(c[-1].seq for c in calls.values())
    at_top = {r: next(c for c in cs if c.seq == top) for r, cs in calls.items() if cs[-1].seq == top}
    dumped = [r for r in members if r in dumps]
    if all(r in at_top and at_top[r].completed for r in dumped):
        return None
    where = _group_label(group)
    behind = [r for r in dumped if r not in at_top]
    silent = [r for r in members if r not in dumps]
    usual = max(at_top.values(), key=lambda c: sum(o.name == c.name and o.sizes == c.sizes for o in at_top.values()))
    waiters = [{"rank": r, "collective": c.name, "seq": c.seq, "where": c.where} for r, c in sorted(at_top.items())]
    fr = {"group": group[1] or group[0], "seq": top, "collective": usual.name, "sizes": usual.sizes, "dtypes": usual.dtypes}
    base = {"step": None, "silent": silent, "source": "flight recorder", "flight_recorder": fr}
    if behind:
        first = behind[0]
        mine = calls.get(first, [])
        last = (f"its last call there was {mine[-1].label()}" + (f", from {mine[-1].where}" if mine[-1].where else "")
                if mine else "it made no call there")
        text = f"rank {first} never entered {usual.label()} of {where} ({usual.shape()}); {last}"
        if len(behind) > 1:
            text += f" (nor did rank(s) {', '.join(map(str, behind[1:]))})"
        text += f"; {_ranks(sorted(at_top))} waited in it"
        if usual.where:
            text += f", called from {usual.where}"
        if silent:
            text += f"; rank(s) {', '.join(map(str, silent))} left no dump"
        return {"culprit": first, "where": mine[-1].where if mine else None, "waiters": waiters, "text": text, **base}
    kinds: dict[tuple, list[int]] = {}
    for r, c in sorted(at_top.items()):
        kinds.setdefault((c.name, json.dumps(c.sizes)), []).append(r)
    if len(kinds) > 1:
        listed = [{"rank": r, "collective": c.name, "seq": c.seq, "sizes": c.sizes} for r, c in sorted(at_top.items())]
        most = max(map(len, kinds.values()))
        if sum(len(v) == most for v in kinds.values()) > 1:
            parts = "; ".join(f"{_ranks(v)} called {at_top[v[0]].name} {at_top[v[0]].shape()}" for v in kinds.values())
            text = (f"collective mismatch at #{top} of {where}: {parts}; a branch only some ranks took, but the "
                    "dumps do not tell which side strayed")
            return {"culprit": None, "where": None, "waiters": waiters, "mismatch": listed, "text": text, **base}
        strays = sorted(r for r, c in at_top.items() if (c.name, c.sizes) != (usual.name, usual.sizes))
        odd = at_top[strays[0]]
        text = (f"collective mismatch at #{top} of {where}: rank {strays[0]} called {odd.name} {odd.shape()}"
                + (f" from {odd.where}" if odd.where else "")
                + f" where {_ranks(sorted(r for r in at_top if r not in strays))} called {usual.name} {usual.shape()}")
        if len(strays) > 1:
            text += "; " + "; ".join(f"rank {r} called {at_top[r].name} {at_top[r].shape()}" for r in strays[1:])
        waiters = [w for w in waiters if w["rank"] not in strays]
        return {"culprit": strays[0], "where": odd.where, "waiters": waiters, "mismatch": listed, "text": text, **base}
    text = (f"every rank entered {usual.label()} of {where} ({usual.shape()}) and none completed it: the collective "
            "itself hung (the network or the communication library), no rank is to blame")
    if silent:
        text += f"; rank(s) {', '.join(map(str, silent))} left no dump"
    return {"culprit": None, "where": None, "waiters": waiters, "text": text, **base}


def fr_verdict(dumps: dict[int, dict], world_size: int | None = None) -> dict[str, Any] | None:
    """Who the job waited for, from the flight-recorder dumps alone (None: no dump, or no group
    hung). The keys of :func:`hpcprof.rundir.hangs.verdict` ("culprit", "step": None, "where",
    "waiters", "silent", "text", "mismatch" where the calls differ), with "source": "flight
    recorder" and "flight_recorder": the group, number, collective, sizes and dtypes it hung in.
    Where several groups hung, the one that names a rank comes first (the default group first
    among equals); "others" holds the texts of the rest."""
    per_group: dict[tuple[str, str], dict[int, list[Call]]] = {}
    for rank, dump in sorted(dumps.items()):
        for group, calls in calls_by_group(rank, dump).items():
            per_group.setdefault(group, {})[rank] = calls
    found = [f for g, calls in per_group.items() if (f := _finding(dumps, g, calls, world_size)) is not None]
    if not found:
        return None
    found.sort(key=lambda f: (f["culprit"] is None, f["flight_recorder"]["group"] != "default_pg"))
    first = found[0]
    if len(found) > 1:
        first["others"] = [f["text"] for f in found[1:]]
    return first
