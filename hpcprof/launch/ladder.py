"""python -m hpcprof.ladder JOBS_DIR [--repeat N] [--through NN] [--out DIR] [usual submit options]

Run an optimisation ladder end to end: every rung ``NN-name.toml`` of JOBS_DIR in order, each
launched like ``python -m hpcprof.submit --job RUNG [options]`` and analysed, then one comparison
of all rungs against the first (``python -m hpcprof.compare``) in one folder, and its table.

Why one run after another: a ladder measures what each change buys, so runs must not share the
machine (locally they run one at a time; on SLURM each run is submitted with a dependency on the
previous one, ``afterany``, so they run one after another even if the cluster could run them side
by side, and a failing run does not cancel the rest). A run that cannot be launched or fails is
reported and the ladder goes on; the comparison covers the runs that produced an analysis.

Why interleaved replicates (``--repeat N``): two runs of one spec differ (the node, a neighbour's
job, the machine's state drifting over minutes), so each rung runs N times and the comparison's
intervals hold that spread (hpcprof/compare/noise.py). The order is rung A r1, B r1, C r1, A r2,
... (not A A A B B B): a machine that slows down over the ladder then slows every rung alike
instead of making the last rungs look worse.

Before the first run: every rung's spec is built with the options (an option no rung accepts, such
as ``--train-steps -5``, is one error up front; a rung file that is wrong on its own is reported as
not launched and the rest go on), and ``--out`` must not hold a ladder already and must be writable
(ladder.json is written then, and after every run, atomically).

Layout of --out (default ``<runs dir>/ladder-<JOBS_DIR name>-<time>``)::

    <out>/<rung>/          one run directory per rung (its analysis/ inside); with --repeat N:
    <out>/<rung>-r<k>/     one per replicate k = 1..N
    <out>/compare/         compare.json, noise.json (replicates), tables/, plots/, compare.html
    <out>/ladder.json      each rung: file, status, error, and its runs (run directory, job, status)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ..cliparser import ArgumentParser
from .outcome import Interrupted, signals_raise

RUNG_RE = re.compile(r"^(\d+)[-_].*\.toml$")


class LadderError(ValueError):
    """The ladder cannot start (or record itself); the message says what to change."""


@dataclass
class RungRun:
    """One run of a rung (one replicate)."""

    name: str
    """Its run directory's name: the rung's, or <rung>-r<k> with --repeat."""
    replicate: int
    """k, 1-based."""
    status: str = "pending"
    """pending, submitted, ok, failed, not launched, not analysed or interrupted."""
    error: str | None = None
    run_dir: str | None = None
    job_id: str | None = None


@dataclass
class Rung:
    number: int
    """NN of NN-name.toml."""
    file: Path
    name: str
    """The file's stem; the arm's label in the comparison."""
    status: str = "pending"
    """ok when every run is, "k of N runs ok", or the runs' common failure (not launched, failed, not analysed)."""
    error: str | None = None
    """The first error of its runs (or of its spec)."""
    runs: list[RungRun] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def settle(self) -> None:
        """The rung's status from its runs'."""
        states = [r.status for r in self.runs]
        ok = states.count("ok")
        if states and ok == len(states):
            self.status, self.error = "ok", None
        elif ok:
            self.status = f"{ok} of {len(states)} runs ok"
        elif states and len(set(states)) == 1:
            self.status = states[0]
        elif states:  # a failure first; else runs still under way ("submitted" beside "pending")
            self.status = next((s for s in states if s not in ("ok", "pending", "submitted")), "submitted")
        self.error = self.error or next((r.error for r in self.runs if r.error), None)


def find_rungs(jobs_dir: Path, through: int | None = None) -> list[Rung]:
    """The rung files of a ladder folder, by number (``NN-name.toml``); --through NN stops after NN."""
    if not jobs_dir.is_dir():
        raise ValueError(f"{jobs_dir}: not a folder of rung files (NN-name.toml)")
    rungs = []
    for p in sorted(jobs_dir.iterdir()):
        m = RUNG_RE.match(p.name)
        if m and p.is_file():
            rungs.append(Rung(int(m.group(1)), p, p.stem))
    rungs.sort(key=lambda r: (r.number, r.name))
    if not rungs:
        raise ValueError(f"{jobs_dir}: no rung files (NN-name.toml, e.g. 01-baseline.toml)")
    if through is not None:
        rungs = [r for r in rungs if r.number <= through]
        if not rungs:
            raise ValueError(f"--through {through}: no rung numbered {through} or lower in {jobs_dir}")
    return rungs


def run_names(rung: Rung, repeat: int) -> list[str]:
    """The run directory names of a rung: its name, or <name>-r1 .. <name>-rN with --repeat N."""
    from .submit import replicate_names

    return [rung.name] if repeat == 1 else replicate_names(rung.name, repeat)


def _rung_spec(rung: Rung, options: list[str], out: Path, name: str):
    from ..spec import spec_from_args
    from .submit import build_parser

    return spec_from_args(build_parser().parse_args(["--job", str(rung.file), *options, "--runs-dir", str(out), "--name", name]))


def check_rungs(rungs: list[Rung], options: list[str], out: Path, repeat: int) -> None:
    """Before anything runs: refuse an --out that holds a ladder or a rung's run directory, and
    options that no rung accepts; mark rungs whose own file is wrong as not launched."""
    from ..spec import SpecError

    if (out / "ladder.json").exists():
        raise LadderError(f"{out} already holds a ladder (ladder.json); choose another --out (nothing was changed)")
    taken = [n for r in rungs for n in run_names(r, repeat) if (out / n).exists()]
    if taken:
        raise LadderError(f"{out} already holds {', '.join(taken[:3])}{' ...' if len(taken) > 3 else ''}; choose another --out "
                          "(nothing was changed)")
    for rung in rungs:
        try:
            _rung_spec(rung, options, out, run_names(rung, repeat)[-1])
        except SpecError as exc:
            try:
                _rung_spec(rung, [], out, rung.name)
            except SpecError:  # the rung file itself: reported, the ladder goes on
                rung.status, rung.error = "not launched", str(exc)
                continue
            raise LadderError(f"{' '.join(options)}: {exc} (for every rung; nothing was launched)") from None


def _launch_rung(rung: Rung, rr: RungRun, options: list[str], out: Path, dependency: str | None, repeat: int, log):
    """Build the run's spec from the rung file and the user's options (the same parser as submit) and
    launch it; returns the Launch, or None after recording why it could not be launched."""
    from ..rundir import RunDirError
    from ..rundir.manifest import Replicate
    from ..spec import SpecError
    from ..slurm.geometry import LaunchError
    from .submit import launch

    argv = ["--job", str(rung.file), *options, "--runs-dir", str(out), "--name", rr.name]
    try:
        spec = _rung_spec(rung, options, out, rr.name)
        if dependency:
            spec.resources.slurm_extra = {**spec.resources.slurm_extra, "dependency": dependency}
        rep = Replicate(rung.name, rr.replicate, repeat, "") if repeat > 1 else None
        return launch(spec, argv=["python", "-m", "hpcprof.submit", *argv], log=log, replicate=rep)
    except (SpecError, LaunchError, RunDirError, ValueError) as exc:
        rr.status, rr.error = "not launched", str(exc)
        log(f"hpcprof.ladder: {rr.name}: not launched: {exc}")
    except SystemExit:  # argparse already printed what was wrong with the options
        rr.status, rr.error = "not launched", "invalid options"
    return None


def _record(out: Path, record: dict, rungs: list[Rung]) -> None:
    from ..rundir.layout import atomic_write_text

    doc = {**{k: v for k, v in record.items() if k != "table"}, "rungs": [_jsonable(r) for r in rungs]}
    try:
        atomic_write_text(out / "ladder.json", json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise LadderError(f"cannot write {out / 'ladder.json'} ({exc.strerror or exc}); the runs' own folders keep what they "
                          "wrote; free space or choose a writable --out") from None


def run_ladder(jobs_dir: Path, options: list[str], out: Path, through: int | None = None, workers: int | None = None, log=print,
               repeat: int = 1) -> dict:
    """Launch, wait for and analyse every run of every rung (replicates interleaved), then compare
    them; returns the ladder record (also in <out>/ladder.json, updated after every run)."""
    from ..analysis import AnalysisError, analyze
    from .submit import EXIT_OK, wait

    rungs = find_rungs(jobs_dir, through)
    check_rungs(rungs, options, out, repeat)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LadderError(f"cannot create --out {out} ({exc.strerror or exc})") from None
    for rung in rungs:
        if rung.status != "not launched":
            rung.runs = [RungRun(n, k) for k, n in enumerate(run_names(rung, repeat), 1)]
    record = {"jobs_dir": str(jobs_dir), "out": str(out), "options": options, "repeat": repeat,
              "order": "interleaved: every rung's replicate 1, then every rung's replicate 2, ..."}
    _record(out, record, rungs)  # before any run: an unwritable --out stops here
    total = sum(len(r.runs) for r in rungs)
    log(f"hpcprof.ladder: {len(rungs)} rung(s) x {repeat} run(s) from {jobs_dir} into {out}")
    launches = []
    prev_job = None
    done = 0
    current = None  # (run, launch) being waited for or analysed: what an interruption must stop
    try:
        for k in range(repeat):
            for rung in rungs:
                if k >= len(rung.runs):
                    continue
                rr = rung.runs[k]
                done += 1
                log(f"hpcprof.ladder: run {done}/{total}: {rr.name} ({rung.file.name})")
                dep = f"afterany:{prev_job}" if prev_job else None
                ln = _launch_rung(rung, rr, options, out, dep, repeat, log)
                if ln is not None:
                    rr.run_dir, rr.job_id, rr.status = str(ln.run.root), str(ln.job.job_id), "submitted"
                    # recorded before waiting: a SIGKILLed ladder (nothing runs in it to write) leaves
                    # a ladder.json that leads to the run in flight, whose own state tells how it ended
                    rung.settle()
                    with contextlib.suppress(LadderError):  # best effort here; the next write reports
                        _record(out, record, rungs)
                    if ln.executor == "slurm":
                        prev_job = rr.job_id  # the next run starts after this one ends
                        launches.append((rr, ln))
                    else:
                        current = (rr, ln)
                        _finish(rr, ln, wait, EXIT_OK, analyze, AnalysisError, workers, log)
                        current = None
                rung.settle()
                _record(out, record, rungs)
        for rr, ln in launches:  # SLURM: all submitted with dependencies; now wait in order
            current = (rr, ln)
            _finish(rr, ln, wait, EXIT_OK, analyze, AnalysisError, workers, log)
            current = None
            for rung in rungs:
                rung.settle()
            _record(out, record, rungs)
    except Interrupted as exc:
        raise LadderInterrupted(exc, _stop_ladder(exc, rungs, current, out, record)) from None
    ok = [rr.run_dir for r in rungs for rr in r.runs if rr.status == "ok"]  # rung by rung: the first rung is the baseline arm
    if len(ok) >= 2:
        from ..compare import CompareError, compare

        try:
            res = compare(ok, out / "compare", workers=workers, progress=False)
            record["compare"] = res["outputs"]
            record["table"] = res
        except CompareError as exc:
            record["compare"] = None
            record["compare_error"] = str(exc)
            log(f"hpcprof.ladder: comparison failed: {exc}")
    else:
        record["compare"] = None
        log("hpcprof.ladder: fewer than two runs succeeded: nothing to compare")
    _record(out, record, rungs)
    record["rungs"] = [_jsonable(r) for r in rungs]
    return record


class LadderInterrupted(Exception):
    """The ladder stopped on SIGINT/SIGTERM/SIGHUP after stopping its running run and writing
    ladder.json; the message is the one line for the user."""

    def __init__(self, exc: Interrupted, message: str):
        super().__init__(message)
        self.signum = exc.signum


def _stop_ladder(exc: Interrupted, rungs: list[Rung], current, out: Path, record: dict) -> str:
    """Stop the run in flight (a local job and its ranks, as `submit` does), mark every run that
    will not run 'not launched', write ladder.json; the one line that says so. Why: a SIGTERM
    killed the ladder on the spot (no ladder.json, the rung's ranks orphaned) and Ctrl-C hung it
    (issue 23, item 2)."""
    from .submit import stop_interrupted

    # SLURM runs are submitted ahead, each after the previous one: they run on without the ladder
    stopped = current[0] if current is not None and current[1].executor != "slurm" else None
    still = [rr.job_id for r in rungs for rr in r.runs if rr.status == "submitted" and rr.job_id and rr is not stopped]
    if current is not None:
        rr, ln = current
        rr.status, rr.error = "interrupted", stop_interrupted(ln, exc)
    for r in rungs:
        for rr in r.runs:
            if rr.status == "pending":
                rr.status, rr.error = "not launched", f"the ladder was interrupted by {exc.name}"
        r.settle()
    record["interrupted"] = exc.name
    with contextlib.suppress(LadderError):
        _record(out, record, rungs)
    line = f"interrupted by {exc.name}" + (f" during {current[0].name}" if current is not None else "")
    if still:
        line += f"; SLURM job(s) {' '.join(still)} keep running (stop them with: scancel {' '.join(still)})"
    return line + f"; the finished runs and the record stay in {out} (ladder.json)"


def _finish(rr: RungRun, ln, wait, exit_ok: int, analyze, analysis_error, workers, log) -> None:
    code = wait(ln, log=log)
    if code != exit_ok:
        rr.status, rr.error = "failed", f"job {rr.job_id} failed (exit {code}); see {rr.run_dir}/failures and logs"
        log(f"hpcprof.ladder: {rr.name} failed; going on with the next run")
        return
    try:
        analyze(rr.run_dir, workers=workers, progress=False)
        rr.status = "ok"
    except analysis_error as exc:
        rr.status, rr.error = "not analysed", str(exc)
        log(f"hpcprof.ladder: {rr.name}: analysis failed: {exc}")


def _jsonable(r: Rung) -> dict:
    d = asdict(r)
    d["file"] = str(r.file)
    return d


def build_parser() -> argparse.ArgumentParser:
    from .submit import positive_int

    ap = ArgumentParser(
        prog="python -m hpcprof.ladder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any other option is passed to every rung as to python -m hpcprof.submit (see its --help), e.g. "
        "--cluster slurm --partition gpu --account abc, --train-steps 40.",
    )
    ap.add_argument("jobs_dir", metavar="JOBS_DIR", help="folder of rung files NN-name.toml (e.g. jobs/ladder, jobs/ladder-cpu)")
    ap.add_argument("--through", type=int, default=None, metavar="NN", help="stop after rung NN")
    ap.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                    help="run every rung N times, interleaved (A B C A B C ...), as replicates: the comparison's intervals "
                         "then hold the run-to-run spread (default 1)")
    ap.add_argument("--out", default=None, help="folder for the rungs' run directories and the comparison (default: runs/ladder-<name>-<time>)")
    ap.add_argument("--analysis-workers", type=int, default=None, help="worker processes for each rung's analysis")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    args, options = ap.parse_known_args(argv)
    from .submit import build_parser as submit_parser

    for bad in ("--job", "--name", "--runs-dir"):
        if any(o == bad or o.startswith(bad + "=") for o in options):
            ap.error(f"{bad} is set by the ladder for each rung; use --out for where the rungs go")
    try:
        submit_parser().parse_args(options)  # refuse a bad option before the first rung starts
    except SystemExit:
        return 2
    jobs_dir = Path(args.jobs_dir)
    out = Path(args.out) if args.out else Path("runs") / f"ladder-{jobs_dir.resolve().name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        with signals_raise():
            record = run_ladder(jobs_dir, options, out, args.through, args.analysis_workers, repeat=args.repeat)
    except ValueError as exc:
        print(f"hpcprof.ladder: error: {exc}", file=sys.stderr)
        return 2
    except LadderInterrupted as exc:
        print(f"hpcprof.ladder: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except Interrupted as exc:  # outside a run (checking the rungs, comparing): nothing to stop
        print(f"hpcprof.ladder: interrupted by {exc.name}; finished runs stay in their run directories", file=sys.stderr)
        return 128 + exc.signum
    from ..compare import console_table

    print("")
    for r in record["rungs"]:
        if r["status"] != "ok":
            print(f"rung {r['name']}: {r['status']}: {r['error']}")
    if record.get("table"):
        print(console_table(record["table"]))
    print(f"hpcprof.ladder: {sum(r['status'] == 'ok' for r in record['rungs'])}/{len(record['rungs'])} rung(s) ok; {out / 'ladder.json'}")
    return 0 if all(r["status"] == "ok" for r in record["rungs"]) and not record.get("compare_error") else 1
