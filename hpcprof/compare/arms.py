"""Which runs are replicates of one another: the arms of a comparison, and what each arm may use.

An arm is a group of runs of one configuration; the first arm is the baseline. How runs are grouped
(`--group-by`):
- `replicate` (default): the runs that `submit --repeat N` or `ladder --repeat N` launched together
  (manifest `replicate`: same group name and same spec hash) form one arm; every other argument is
  an arm of its own. Two sets of one spec launched apart (before and after a code change) stay two
  arms: the spec does not hold the code.
- `spec`: every run of one spec hash is one arm, however it was launched (runs without a manifest,
  e.g. folders of traces, stay arms of their own). For runs launched one by one, by hand.
- `none`: every argument is an arm of its own.
- explicit (`--group LABEL=RUN,RUN,...`, repeated): the user's arms, in the order given.

What an arm uses: its complete runs. A run that failed, was interrupted, cancelled or is still
running (summary.json `run_state`, hpcprof.rundir.state) has steps that do not describe the
configuration (a killed rank's peers wait, then stop): it is listed with its state and left out
of the statistics; an arm with no complete run gets no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rundir.manifest import spec_hash
from ..rundir.state import describe
from .inputs import CompareError, Resolved
from .series import RunSeries

GROUP_BY = ("replicate", "spec", "none")


@dataclass
class Arm:
    label: str
    members: list[int]
    """Indices of its runs in the argument order."""
    how: str
    """How its runs were grouped, in words."""
    used: list[int] = field(default_factory=list)
    """Its complete runs (statistics use these)."""
    excluded: dict[int, str] = field(default_factory=dict)
    """Runs left out, and why (their run state)."""


def _replicate(s: RunSeries) -> dict | None:
    rep = s.manifest.get("replicate")
    return rep if isinstance(rep, dict) and isinstance(rep.get("group"), str) and rep["group"] else None


def _spec_key(s: RunSeries) -> str | None:
    spec = s.manifest.get("spec")
    return spec_hash(spec) if isinstance(spec, dict) and spec else None


def make_arms(series: list[RunSeries], resolved: list[Resolved], group_by: str = "replicate",
              explicit: list[tuple[str, list[int]]] | None = None) -> list[Arm]:
    """The arms, baseline first, each with its usable and excluded runs."""
    if group_by not in GROUP_BY:
        raise CompareError(f"--group-by {group_by!r} is not valid: use one of {', '.join(GROUP_BY)}")
    arms: list[Arm] = []
    if explicit:
        arms = [Arm(label, idx, "--group") for label, idx in explicit]
    else:
        keyed: dict[tuple, Arm] = {}
        for i, s in enumerate(series):
            rep, spec = _replicate(s), _spec_key(s)
            if group_by == "replicate" and rep is not None:
                key = ("replicate", rep["group"])
                if key in keyed:
                    first = keyed[key].members[0]
                    if _spec_key(series[first]) != spec:
                        raise CompareError(
                            f"{resolved[first].given} and {resolved[i].given} are both replicates of {rep['group']!r} but ran "
                            "different specs; compare them as separate arms with --group-by none")
                    keyed[key].members.append(i)
                    continue
                keyed[key] = Arm(rep["group"], [i], f"replicates of {rep['group']!r} (manifest.json replicate)")
                arms.append(keyed[key])
            elif group_by == "spec" and spec is not None:
                key = ("spec", spec)
                if key in keyed:
                    keyed[key].members.append(i)
                    continue
                keyed[key] = Arm(s.label, [i], f"runs of spec {spec[:12]} (--group-by spec)")
                arms.append(keyed[key])
            else:
                arms.append(Arm(s.label, [i], "one argument"))
        for a in arms:
            if a.how.startswith("runs of spec"):
                groups = {(_replicate(series[i]) or {}).get("group") for i in a.members}
                if len(a.members) > 1 and len(groups) == 1 and None not in groups:
                    a.label = groups.pop()
    _unique_labels(arms)
    for a in arms:
        for i in a.members:
            if series[i].complete:
                a.used.append(i)
            else:
                a.excluded[i] = describe(series[i].run_state)
    return arms


def _unique_labels(arms: list[Arm]) -> None:
    taken: set[str] = set()
    for a in arms:
        base, k = a.label, 2
        while a.label in taken:
            a.label, k = f"{base}-{k}", k + 1
        taken.add(a.label)


def hardware_warnings(arms: list[Arm], series: list[RunSeries]) -> list[str]:
    """Runs of different world sizes or devices measure different hardware, not only a change."""

    def hw(i: int) -> tuple:
        s = series[i]
        world = s.manifest.get("world_size") if isinstance(s.manifest.get("world_size"), int) else s.figures.get("ranks")
        return world, s.figures.get("device")

    def words(h: tuple) -> str:
        return f"{h[0]} rank(s) on {h[1] or 'an unknown device'}"

    out = []
    base = {hw(i) for i in arms[0].members} if arms else set()
    for a in arms:
        mine = {hw(i) for i in a.members}
        if len(mine) > 1:
            out.append(f"{a.label}: its runs differ in world size or device ({'; '.join(sorted(map(words, mine)))}): "
                       "they are not replicates of one configuration")
    for a in arms[1:]:
        mine = {hw(i) for i in a.members}
        if len(base) == 1 and len(mine) == 1 and mine != base:
            out.append(f"{a.label} ran {words(next(iter(mine)))}, the baseline {arms[0].label} {words(next(iter(base)))}: "
                       "samples/s and step time compare different hardware, not only the change")
    return out


def user_grouped(a: Arm) -> bool:
    """The user said the arm's runs are one configuration (--group-by spec, --group), so the spread
    between its sets launched at different times is the machine's drift (timing.blocks)."""
    return a.how == "--group" or a.how.startswith("runs of spec")


def set_of(series: list[RunSeries]) -> dict[int, str]:
    """Run -> the replicate set it was launched in (its group and spec); a run launched alone is a
    set of its own."""
    out = {}
    for i, s in enumerate(series):
        rep = _replicate(s)
        out[i] = f"set {rep['group']} {_spec_key(s)}" if rep is not None else f"run {i}"
    return out


def round_of(series: list[RunSeries]) -> dict[int, int | None]:
    """Run -> its replicate index (the round of an interleaved ladder), None when not recorded."""
    out: dict[int, int | None] = {}
    for i, s in enumerate(series):
        k = (_replicate(s) or {}).get("index")
        out[i] = k if isinstance(k, int) and not isinstance(k, bool) else None
    return out


def mixed_specs(arms: list[Arm], series: list[RunSeries]) -> tuple[list[str], set[int]]:
    """Arms whose runs ran different specs (only --group can make one): a warning each, and their
    positions. Their spread is the difference of the specs, not run-to-run noise: it goes into no
    calibration (noise.json) and into no other arm's interval."""
    warnings, mixed = [], set()
    for k, a in enumerate(arms):
        specs: dict[str, list[str]] = {}
        for i in a.members:
            key = _spec_key(series[i])
            if key is not None:
                specs.setdefault(key, []).append(series[i].label)
        if len(specs) > 1:
            mixed.add(k)
            which = "; ".join(f"{', '.join(runs)}: spec {h[:12]}" for h, runs in specs.items())
            warnings.append(f"{a.label}: its runs ran {len(specs)} different specs ({which}): they are not replicates of one "
                            "configuration; their spread is not run-to-run noise and is not written to noise.json")
    return warnings, mixed
