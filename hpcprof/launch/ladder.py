"""python -m hpcprof.ladder JOBS_DIR [--through NN] [--out DIR] [usual submit options]

Run an optimisation ladder end to end: every rung ``NN-name.toml`` of JOBS_DIR in order, each
launched like ``python -m hpcprof.submit --job RUNG [options]`` and analysed, then one comparison
of all rungs against the first (``python -m hpcprof.compare``) in one folder, and its table.

Why one rung after another: a ladder measures what each change buys, so rungs must not share the
machine (locally they run one at a time; on SLURM each rung is submitted with a dependency on the
previous one, ``afterany``, so they run one after another even if the cluster could run them side
by side, and a failing rung does not cancel the rest). A rung that cannot be launched or fails is
reported and the ladder goes on; the comparison covers the rungs that produced an analysis.

Layout of --out (default ``<runs dir>/ladder-<JOBS_DIR name>-<time>``)::

    <out>/<rung>/        one run directory per rung (its analysis/ inside)
    <out>/compare/       compare.json, tables/, plots/, compare.html
    <out>/ladder.json    each rung: file, run directory, status, error
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ..cliparser import ArgumentParser

RUNG_RE = re.compile(r"^(\d+)[-_].*\.toml$")


@dataclass
class Rung:
    number: int
    file: Path
    name: str
    status: str = "pending"  # pending | submitted | ok | failed | not launched | not analysed
    error: str | None = None
    run_dir: str | None = None
    job_id: str | None = None
    extra: dict = field(default_factory=dict)


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


def _launch_rung(rung: Rung, options: list[str], out: Path, dependency: str | None, log):
    """Build the rung's spec from its file and the user's options (the same parser as submit) and
    launch it; returns the Launch, or None after recording why it could not be launched."""
    from ..rundir import RunDirError
    from ..spec import SpecError, spec_from_args
    from .executors import LaunchError
    from .submit import build_parser, launch

    argv = ["--job", str(rung.file), *options, "--runs-dir", str(out), "--name", rung.name]
    try:
        args = build_parser().parse_args(argv)
        spec = spec_from_args(args)
        if dependency:
            spec.resources.slurm_extra = {**spec.resources.slurm_extra, "dependency": dependency}
        return launch(spec, argv=["python", "-m", "hpcprof.submit", *argv], log=log)
    except (SpecError, LaunchError, RunDirError, ValueError) as exc:
        rung.status, rung.error = "not launched", str(exc)
        log(f"hpcprof.ladder: rung {rung.name}: not launched: {exc}")
    except SystemExit:  # argparse already printed what was wrong with the options
        rung.status, rung.error = "not launched", "invalid options"
    return None


def run_ladder(jobs_dir: Path, options: list[str], out: Path, through: int | None = None, workers: int | None = None, log=print) -> dict:
    """Launch, wait for and analyse every rung, then compare them; returns the ladder record."""
    from ..analysis import AnalysisError, analyze
    from .submit import EXIT_OK, wait

    rungs = find_rungs(jobs_dir, through)
    out.mkdir(parents=True, exist_ok=True)
    log(f"hpcprof.ladder: {len(rungs)} rung(s) from {jobs_dir} into {out}")
    launches = []
    prev_job = None
    for i, rung in enumerate(rungs):
        log(f"hpcprof.ladder: rung {i + 1}/{len(rungs)}: {rung.file.name}")
        dep = f"afterany:{prev_job}" if prev_job else None
        ln = _launch_rung(rung, options, out, dep, log)
        if ln is None:
            continue
        rung.run_dir, rung.job_id, rung.status = str(ln.run.root), str(ln.job.job_id), "submitted"
        if ln.executor == "slurm":
            prev_job = rung.job_id  # the next rung starts after this one ends
            launches.append((rung, ln))
            continue
        _finish(rung, ln, wait, EXIT_OK, analyze, AnalysisError, workers, log)
    for rung, ln in launches:  # SLURM: all submitted with dependencies; now wait in order
        _finish(rung, ln, wait, EXIT_OK, analyze, AnalysisError, workers, log)
    record = {"jobs_dir": str(jobs_dir), "out": str(out), "options": options, "rungs": [_jsonable(r) for r in rungs]}
    ok = [r for r in rungs if r.status == "ok"]
    if len(ok) >= 2:
        from ..compare import compare

        res = compare([r.run_dir for r in ok], out / "compare", workers=workers, progress=False)
        record["compare"] = res["outputs"]
        record["table"] = res
    elif ok:
        record["compare"] = None
        log("hpcprof.ladder: only one rung succeeded: nothing to compare")
    (out / "ladder.json").write_text(json.dumps({k: v for k, v in record.items() if k != "table"}, indent=2))
    return record


def _finish(rung: Rung, ln, wait, exit_ok: int, analyze, analysis_error, workers, log) -> None:
    code = wait(ln, log=log)
    if code != exit_ok:
        rung.status, rung.error = "failed", f"job {rung.job_id} failed (exit {code}); see {rung.run_dir}/failures and logs"
        log(f"hpcprof.ladder: rung {rung.name} failed; going on with the next rung")
        return
    try:
        analyze(rung.run_dir, workers=workers, progress=False)
        rung.status = "ok"
    except analysis_error as exc:
        rung.status, rung.error = "not analysed", str(exc)
        log(f"hpcprof.ladder: rung {rung.name}: analysis failed: {exc}")


def _jsonable(r: Rung) -> dict:
    d = asdict(r)
    d["file"] = str(r.file)
    return d


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m hpcprof.ladder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any other option is passed to every rung as to python -m hpcprof.submit (see its --help), e.g. "
        "--cluster slurm --partition gpu --account abc, --train-steps 40.",
    )
    ap.add_argument("jobs_dir", metavar="JOBS_DIR", help="folder of rung files NN-name.toml (e.g. jobs/ladder, jobs/ladder-cpu)")
    ap.add_argument("--through", type=int, default=None, metavar="NN", help="stop after rung NN")
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
        record = run_ladder(jobs_dir, options, out, args.through, args.analysis_workers)
    except ValueError as exc:
        print(f"hpcprof.ladder: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hpcprof.ladder: interrupted; finished rungs stay in their run directories", file=sys.stderr)
        return 130
    from ..compare import console_table

    print("")
    for r in record["rungs"]:
        if r["status"] != "ok":
            print(f"rung {r['name']}: {r['status']}: {r['error']}")
    if record.get("table"):
        print(console_table(record["table"]))
    print(f"hpcprof.ladder: {sum(r['status'] == 'ok' for r in record['rungs'])}/{len(record['rungs'])} rung(s) ok; {out / 'ladder.json'}")
    return 0 if all(r["status"] == "ok" for r in record["rungs"]) else 1
