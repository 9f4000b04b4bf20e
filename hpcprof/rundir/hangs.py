"""Hang notes (hangs/rank-<r>.json, beside every thread's Python stack in hangs/rank-<r>.stack.txt)
and the verdict read from them: which rank the others were waiting for, at which step, doing what.

A rank's hang watchdog (hpcprof.rank.hang) writes both files when the rank has made no progress for
the hang timeout, or when another rank has written its note. The stack file is what Python's
faulthandler writes (its format is stable: a ``Thread 0x...`` or ``Current thread 0x...`` line per
thread, then ``  File "...", line N in func`` lines, most recent call first); the note says what
the rank's main thread was doing, read from that file by :func:`waiting_in`.

The verdict (:func:`verdict`): a rank whose main thread is NOT in a collective is the culprit (it
never reached the collective its peers wait in: a deadlocked data loader, a stuck read, the hang
drill's sleep); so is a rank whose last completed step is lower than the others'. The other ranks
were waiting for it. When every rank waited in a collective at the same step but not all in the
same one, the job hung on a collective mismatch (a branch only some ranks took): the ranks whose
collective differs from the one most ranks wait in are named, with both collectives; with no
majority (two ranks, two collectives) both collectives are named and no rank is blamed. When every
rank waited in the same collective at the same step, the stacks cannot tell, and the verdict says
so instead of naming one.

Defined here, next to the run directory's other records, because the ranks write the notes and
both the launcher (``submit``) and the analysis read them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from .flight_recorder import dump_folder, fr_verdict, read_dumps, watchdog_message
from .frames import Frame
from .layout import RunDir, rank_from_name

HANGS_DIR = "hangs"
HANG_TEMPLATE = "rank-{rank}.json"
HANG_STACK_TEMPLATE = "rank-{rank}.stack.txt"
HANG_EXIT_CODE = 124
"""The exit code of a rank its hang watchdog ended (as GNU ``timeout``'s: it timed out)."""


@dataclass
class HangNote:
    """What a rank was doing when its hang watchdog fired."""

    rank: int
    node: str
    pid: int
    step: int | None
    """The step the rank was in (None: between steps)."""
    last_completed_step: int | None
    """The last step it finished (None: none yet)."""
    seconds_without_progress: float
    timeout_s: float
    """The limit that applied: max(train.hang_timeout_s, 20 x the median step time so far)."""
    noticed: str
    """"timeout": this rank's own watchdog fired; "peer": another rank's note came first."""
    in_collective: bool
    """Its main thread's stack was inside a collective (or a backward pass: DDP's gradient all-reduce)."""
    collective: str | None
    """Which one (``all_reduce``, ``barrier``, ``backward (DDP's gradient all-reduce)``...), or None."""
    where: str | None
    """The innermost Python frame of the main thread: ``function (folder/file.py:line)``."""
    caller: str | None
    """The innermost frame of the main thread outside torch and hpcprof (the training code's line)."""
    time: float
    """Unix seconds when the note was written."""
    stack_file: str
    """Every thread's stack (relative to the run directory)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


HANG_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HangNote))


def hang_path(run: RunDir, rank: int):
    return run.root / HANGS_DIR / HANG_TEMPLATE.format(rank=rank)


def hang_stack_path(run: RunDir, rank: int):
    return run.root / HANGS_DIR / HANG_STACK_TEMPLATE.format(rank=rank)


def read_hangs(run: RunDir) -> dict[int, dict[str, Any]]:
    """rank -> its hang note as written (a note that cannot be read, or claims another rank, is left out)."""
    out: dict[int, dict[str, Any]] = {}
    for p in sorted((run.root / HANGS_DIR).glob(HANG_TEMPLATE.format(rank="*"))):
        rank = rank_from_name(p.name)
        try:
            note = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(note, dict) and rank is not None and note.get("rank") == rank:
            out[rank] = note
    return out


# ------------------------------------------------------------------ faulthandler's text
_THREAD_RE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')


def thread_stacks(text: str) -> dict[int, list[Frame]]:
    """Thread ident -> its frames, innermost first, from what faulthandler.dump_traceback wrote."""
    out: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        m = _THREAD_RE.match(line)
        if m:
            current = out.setdefault(int(m.group(1), 16), [])
            continue
        f = _FRAME_RE.match(line)
        if f and current is not None:
            current.append(Frame(f.group(1), int(f.group(2)), f.group(3)))
    return out


def _path(frame: Frame) -> str:
    return frame.file.replace("\\", "/")


def waiting_in(frames: list[Frame]) -> str | None:
    """The collective a stack (innermost first) waits in, or None when it is in none:
    a public function of ``torch.distributed`` (all_reduce, barrier, Work.wait...), DDP's own
    collectives in its forward, hpcprof's control round, or a backward pass (where DDP all-reduces
    the gradients: on gloo and NCCL alike the backward call returns only once they are reduced)."""
    for frame in reversed(frames):  # outermost first: the call the training code made
        p = _path(frame)
        if "/torch/distributed/" in p and not frame.function.startswith("_") and frame.function != "wrapper":
            return frame.function
        if p.endswith("/torch/nn/parallel/distributed.py") and frame.function == "forward":
            return "DDP forward (its buffer broadcast)"
        if p.endswith("/hpcprof/rank/control.py"):
            return "hpcprof's control round"
    if any("/torch/autograd/" in _path(f) for f in frames):
        return "backward (DDP's gradient all-reduce)"
    return None


# ------------------------------------------------------------------ the verdict
def verdict(notes: dict[int, dict[str, Any]], world_size: int | None = None) -> dict[str, Any] | None:
    """Who the job waited for, from the hang notes (None without any). Returns {"culprit": rank or
    None, "step", "where", "waiters": [{"rank", "collective", "step"}], "silent": [ranks without a
    note], "text": one line}, and "mismatch" ([{"rank", "collective"}] of every rank with a note)
    when the ranks hung in different collectives. See the module docstring for the rule."""
    if not notes:
        return None
    done = {r: n.get("last_completed_step") for r, n in notes.items()}
    known = [v for v in done.values() if isinstance(v, int)]
    top = max(known) if known else None
    outside = [r for r, n in notes.items() if not n.get("in_collective")]
    behind = [r for r, v in done.items() if top is not None and (not isinstance(v, int) or v < top)]
    both = [r for r in outside if r in behind]
    culprits = sorted(both or outside or behind)
    silent = [r for r in range(world_size or 0) if r not in notes]
    waiters = [{"rank": r, "collective": n.get("collective"), "step": n.get("step")}
               for r, n in sorted(notes.items()) if r not in culprits]
    if not culprits:
        mismatch = _mismatch(notes, silent)
        if mismatch is not None:
            return mismatch
        steps = sorted({str(n.get("step")) for n in notes.values()})
        each = "; ".join(f"rank {w['rank']} in {w['collective']}" for w in waiters)
        text = (f"every rank hung in a collective at step {'/'.join(steps)} ({each}); the stacks do not tell "
                "which rank the others waited for")
        return {"culprit": None, "step": None, "where": None, "waiters": waiters, "silent": silent, "text": text}
    first = notes[culprits[0]]
    step = first.get("step")
    at = f"at step {step}" if step is not None else "between steps"
    what = (f"in {first['collective']}" if first.get("in_collective") else "outside any collective")
    where = first.get("where")
    text = f"rank {culprits[0]} hung {at} {what}"
    if where:
        text += f"; it was in {where}"
        if first.get("caller") and first["caller"] != where:
            text += f", called from {first['caller']}"
    if len(culprits) > 1:
        text += f" (so did rank(s) {', '.join(map(str, culprits[1:]))})"
    groups: dict[str, list[int]] = {}
    for w in waiters:
        groups.setdefault(str(w["collective"] or "no collective"), []).append(w["rank"])
    for coll, ranks in groups.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        text += f"; {who} waited for it in {coll}"
    if silent:
        text += f"; rank(s) {', '.join(map(str, silent))} left no hang note"
    return {"culprit": culprits[0], "step": step, "where": where, "waiters": waiters, "silent": silent, "text": text}


def _mismatch(notes: dict[int, dict[str, Any]], silent: list[int]) -> dict[str, Any] | None:
    """The verdict of ranks that all hung in a collective at one step, not all in the same one
    (None when they are in the same collective, or at different steps: not a mismatch)."""
    if len({n.get("step") for n in notes.values()}) != 1:
        return None
    called = {r: str(n.get("collective")) for r, n in sorted(notes.items())}
    kinds: dict[str, list[int]] = {}
    for r, c in called.items():
        kinds.setdefault(c, []).append(r)
    if len(kinds) < 2:
        return None
    step = next(iter(notes.values())).get("step")
    at = f"at step {step}" if step is not None else "between steps"
    most = max(len(v) for v in kinds.values())
    majority = [c for c, v in kinds.items() if len(v) == most]
    parts = "; ".join(f"{_ranks(v)} in {c}" for c, v in kinds.items())
    if len(majority) > 1:
        text = (f"collective mismatch {at}: the ranks hung in different collectives ({parts}); a branch only "
                "some ranks took, but the stacks do not tell which side strayed")
        waiters = [{"rank": r, "collective": c, "step": step} for r, c in called.items()]
        return {"culprit": None, "step": step, "where": None, "waiters": waiters, "silent": silent,
                "mismatch": _listed(called), "text": text}
    usual = majority[0]
    strays = sorted(r for r, c in called.items() if c != usual)
    first = notes[strays[0]]
    text = (f"collective mismatch {at}: rank {strays[0]} called {called[strays[0]]} where {_ranks(kinds[usual])} "
            f"called {usual}")
    others = [r for r in strays[1:]]
    if others:
        text += "; " + "; ".join(f"rank {r} called {called[r]}" for r in others)
    where = first.get("where")
    if where:
        text += f"; rank {strays[0]} was in {where}"
        if first.get("caller") and first["caller"] != where:
            text += f", called from {first['caller']}"
    if silent:
        text += f"; rank(s) {', '.join(map(str, silent))} left no hang note"
    waiters = [{"rank": r, "collective": c, "step": notes[r].get("step")} for r, c in called.items() if c == usual]
    return {"culprit": strays[0], "step": step, "where": where, "waiters": waiters, "silent": silent,
            "mismatch": _listed(called), "text": text}


def _listed(called: dict[int, str]) -> list[dict[str, Any]]:
    return [{"rank": r, "collective": c} for r, c in called.items()]


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def run_verdict(run: RunDir, world_size: int | None = None) -> dict[str, Any] | None:
    """The hang verdict of the run directory `run` (None: no hang note and no flight-recorder dump
    that shows a hang): :func:`verdict` of the ranks' hang notes, with what PyTorch's flight recorder
    adds where the ranks dumped it (the collective's number in its group, its sizes: key
    "flight_recorder", and its text after the notes'); the flight recorder's verdict alone when no
    rank wrote a note (a job ended by the NCCL watchdog or killed at its time limit). With dumps, the
    NCCL watchdog's own timeout message in the run's logs is quoted too (key "watchdog")."""
    dumps, _ = read_dumps(dump_folder(run.root))
    recorded = fr_verdict(dumps, world_size)
    found = verdict(read_hangs(run), world_size)
    if found is None:
        found = recorded
    elif recorded is not None:
        found["flight_recorder"] = recorded["flight_recorder"]
        found["text"] += f"; the flight recorder: {recorded['text']}"
    if recorded is not None and (said := watchdog_message(run.logs_dir)):
        found["watchdog"] = said
        found["text"] += f"; the NCCL watchdog said: {said}"
    return found
