"""Launch training with a profiler trace and a step record per rank, through submitit: the built-in
DDP ResNet, or your own code (--entry pkg.module:function, or --script train.py -- ARGS; it uses
hpcprof.run(), see the README's "Your own training script").

    python -m hpcprof.submit --job jobs/demo-local.toml     # local: a rank per GPU, or 2 CPU ranks (gloo)
    python -m hpcprof.submit --script train.py --train-steps 100 -- --lr 0.1
    python -m hpcprof.submit --nodes 2 --gpus-per-node 4 --cpus-per-task 10 --partition gpu_p13 \\
        --account abc@v100 --qos qos_gpu-dev --job jobs/resnet50-2nodes.toml --wait

Executors: slurm (submitit SlurmExecutor), local (ranks as processes on this machine), debug (one
rank in this process). Default: slurm when the SLURM client commands answer, else local. Local
runs always wait; SLURM runs wait with --wait. The run directory is printed first thing.

The executor choice and the submitit executor are :mod:`.executors`, the resolution of ranks and
GPUs :mod:`hpcprof.slurm.geometry`; this module creates the run directory, submits and waits, and
:mod:`.rank_report` reports each rank once the job has ended.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..rundir import RunDir, RunDirError, default_run_name
from ..rundir import manifest as run_manifest
from ..cliparser import ArgumentParser, run_guarded
from ..spec import JobSpec, SpecError, add_spec_arguments, spec_from_args, split_passthrough, validate_run_name
from ..slurm.geometry import LaunchError, geometry_warnings, resolve_resources
from .executors import (RESULT_GRACE_S, choose_executor, local_controller_apart, make_executor, missing_result,
                        wait_for_results)
from .outcome import (Interrupted, end_leftovers, ended_by_scheduler, quiet_pdb, record_outcome, refuse_existing,
                      remove_never_started, signals_ignored, signals_raise, stop_local_job, submission_error)
from .rank_report import EXIT_FAILED, EXIT_OK, last_step, report_ranks

#: The old name of LaunchError, kept for callers of hpcprof.submit.
SubmitError = LaunchError

#: A command line refused before anything ran (EXIT_OK, EXIT_FAILED: how a job ended, .rank_report).
EXIT_USAGE = 2


@dataclass
class Launch:
    """What was launched, for the caller (tests, the CLI)."""

    run: RunDir
    executor: str
    job: Any
    world_size: int
    spec: JobSpec


# ------------------------------------------------------------------------------------ launch
def launch(spec: JobSpec, argv: list[str] | None = None, log=print, replicate: run_manifest.Replicate | None = None) -> Launch:
    """Create the run directory and submit the job; does not wait. `replicate`: this run is one of
    several runs of the spec (--repeat), recorded in the manifest with the resolved spec's hash."""
    from ..rank.workload import check_workload

    check_workload(spec)
    executor, why = choose_executor(spec.resources.cluster)
    log(f"hpcprof: executor {executor} ({why})")
    spec = resolve_resources(spec, executor)
    for warning in geometry_warnings(spec.resources, spec.data.num_workers, slurm=executor == "slurm"):
        print(f"hpcprof: warning: {warning}", file=sys.stderr)
    world = spec.resources.nodes * spec.resources.tasks_per_node
    if executor == "local" and not spec.resources.gpus_per_node and world > 1:
        log("hpcprof: CPU ranks are pinned to their own cores (step times then differ from an unpinned torchrun "
            "run of the same script); --no-pin-cores leaves the placement to the scheduler" if spec.resources.pin_cores
            else "hpcprof: CPU ranks are not pinned (--no-pin-cores): the scheduler places them, as torchrun does")
    if not spec.workload.builtin:
        log("hpcprof: your code runs with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR...); "
            "without hpcprof.run() it is profiled in zero-change mode: one step per optimizer step")
    name = spec.name or default_run_name(spec, world)
    validate_run_name(name, "--name")
    spec.name = name
    run = RunDir.for_spec(spec, name)
    refuse_existing(run)
    if replicate is not None:
        replicate = dataclasses.replace(replicate, spec_sha256=run_manifest.spec_hash(spec.to_dict()))
    try:
        run.create(spec)
        command_line = list(argv if argv is not None else sys.argv)
        manifest = run_manifest.Manifest.at_launch(spec, name, executor, world, command_line, replicate=replicate)
        manifest.launcher_host, manifest.launcher_pid = socket.gethostname(), os.getpid()
        run_manifest.write(run, manifest)
    except OSError as exc:
        remove_never_started(run)
        raise LaunchError(f"cannot write the run directory {run.root} ({exc.strerror or exc}); "
                          "choose a writable --runs-dir with free space") from None
    log(f"hpcprof: run directory {run.root}")
    from submitit.core.utils import FailedJobError

    from ..rank.lifeline import launcher_identity
    from ..rank.task import TrainTask
    from ..witness import witness_python

    # local ranks die with this process, however it ends (hpcprof.rank.lifeline)
    task = TrainTask(spec, str(run.root.resolve()), launcher=launcher_identity() if executor == "local" else None)
    try:
        # submitit prints sbatch's stderr itself before raising: keep it for the one-line error
        with contextlib.redirect_stderr(io.StringIO()), local_controller_apart(executor, run.logs_dir):
            # local ranks run under a witness that records how each ends (hpcprof.witness)
            python = witness_python(run.root.resolve()) if executor == "local" else None
            ex = make_executor(spec.resources, executor, run.logs_dir, python=python)
            job = ex.submit(task)
    except (FailedJobError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        # the job never started: leave nothing that looks like a run, so that the name can be used again
        remove_never_started(run, error=submission_error(exc))
        raise LaunchError(submission_error(exc)) from None
    except BaseException:
        remove_never_started(run)
        raise
    run_manifest.record_job_id(run, str(job.job_id))
    log(f"hpcprof: submitted job {job.job_id} ({world} rank(s) on {spec.resources.nodes} node(s))")
    return Launch(run, executor, job, world, spec)


# ------------------------------------------------------------------------------------ wait
def _progress(launch_: Launch, poll_s: float) -> None:
    from tqdm import tqdm

    # the built-in trainer runs train.steps; a user's code runs its own loop, whose length is its own
    total = launch_.spec.train.steps if launch_.spec.workload.builtin else None
    run = launch_.run
    bar = tqdm(total=total, desc=f"job {launch_.job.job_id}", unit="step", file=sys.stderr, dynamic_ncols=True)
    done_steps = 0
    try:
        while not launch_.job.done():
            if launch_.executor == "local":
                _end_leftovers_now(run)
            now = min((last_step(run, rank) + 1 for rank in range(launch_.world_size)), default=0)
            if now > done_steps:
                bar.update(now - done_steps)
                done_steps = now
            if launch_.executor == "slurm":
                bar.set_postfix_str(str(launch_.job.state))
            time.sleep(poll_s)
    finally:
        bar.close()


def _end_leftovers_now(run: RunDir) -> None:
    """While a local job runs: what a rank that has ended left in its process group (a child it
    forked, when it ended by os._exit or a signal) is ended at once. Such a child holds the rank's
    sockets: its peers would wait for the process group's timeout instead of seeing it gone."""
    try:
        manifest = run.read_manifest()
    except (RunDirError, OSError):
        return
    left = end_leftovers(manifest)
    if left:
        print(f"hpcprof: ended {len(left)} process(es) a rank that had ended left running (pids "
              f"{', '.join(map(str, left))})", file=sys.stderr)


def _debug_outcome(launch_: Launch) -> dict[str, Any]:
    """The debug executor runs the rank here, now (and again at every later call if it failed:
    so it is called once, with submitit's post-mortem pdb switched off)."""
    out: dict[str, Any] = {"rank": 0, "log": str(launch_.job.paths.stderr)}
    try:
        with quiet_pdb(), contextlib.redirect_stdout(io.StringIO()):
            out.update(status="ok", result=launch_.job.results()[0])
    except Exception as exc:
        out.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:300])
    return out


def _rank_outcomes(launch_: Launch) -> list[dict[str, Any]]:
    """Each rank's status, log and error, once the job has ended: a rank that left no result file
    (killed, hung, gone by os._exit) is failed at once, not after submitit's wait for its file."""
    tasks = [launch_.job.task(rank) for rank in range(launch_.world_size)]
    wait_for_results(tasks, RESULT_GRACE_S.get(launch_.executor, 0.0))
    outcomes = []
    for rank, task in enumerate(tasks):
        out: dict[str, Any] = {"rank": rank, "log": str(task.paths.stderr)}
        missing = missing_result(task)
        if missing is not None:
            out.update(status="failed", error=missing[:300])
        else:
            try:
                out.update(status="ok", result=task.result())
            except Exception as exc:  # submitit raises FailedJobError with the traceback text
                out.update(status="failed", error=str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else repr(exc))
        outcomes.append(out)
    return outcomes


def wait(launch_: Launch, poll_s: float = 1.0, log=print) -> int:
    """Wait for the job with a progress display, then report each rank; returns the exit code. The
    manifest's `outcome` records how it ended."""
    run = launch_.run
    if launch_.executor == "debug":
        outcomes = [_debug_outcome(launch_)]
    else:
        _progress(launch_, poll_s)
        ended = ended_by_scheduler(launch_.executor, launch_.job)
        if ended:
            steps = min((last_step(run, r) + 1 for r in range(launch_.world_size)), default=0)
            record_outcome(run, "cancelled" if ended.startswith("CANCELLED") else "failed", error=f"SLURM: {ended}")
            log(f"hpcprof: job {launch_.job.job_id} was ended by SLURM ({ended}) after {steps} step(s) on every rank; "
                f"not a failure of the ranks. What they wrote stays in {run.root}")
            return EXIT_FAILED
        outcomes = _rank_outcomes(launch_)
    return report_ranks(run, launch_.executor, launch_.job.job_id, launch_.world_size, outcomes, log)


def stop_interrupted(launched: "Launch | None", exc: Interrupted) -> str:
    """SIGINT/SIGTERM/SIGHUP: stop every process this command started (a local job), record it in
    the manifest, and return the one line that says so (the caller names itself before it)."""
    with signals_ignored():
        if launched is None:
            return f"interrupted by {exc.name} before the job was submitted"
        if launched.executor == "slurm":
            return (f"interrupted by {exc.name}; SLURM job {launched.job.job_id} keeps running "
                    f"(stop it with: scancel {launched.job.job_id}); run directory {launched.run.root}")
        try:
            manifest = launched.run.read_manifest()
        except (RunDirError, OSError):
            manifest = {}
        if manifest.get("outcome"):  # the job had ended (Ctrl-C during --analyze)
            return f"interrupted by {exc.name} after job {launched.job.job_id} ended; its run directory is {launched.run.root}"
        killed = stop_local_job(launched.job, manifest) if launched.executor == "local" else []
        record_outcome(launched.run, "interrupted", sig=exc.name)
        extra = f" ({len(killed)} process(es) had to be killed)" if killed else ""
        return (f"interrupted by {exc.name}: job {launched.job.job_id} and its ranks were stopped{extra}; "
                f"what they wrote stays in {launched.run.root}")


def _interrupted(launched: "Launch | None", exc: Interrupted) -> int:
    print(f"hpcprof.submit: {stop_interrupted(launched, exc)}", file=sys.stderr)
    return 128 + exc.signum


# ------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m hpcprof.submit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wait for the job with a progress display and report each rank (default: on for local/debug, off for slurm)",
    )
    parser.add_argument(
        "--analyze",
        action="store_true",
        help="after a successful wait, run `python -m hpcprof.analyze` on the run and print where the report is",
    )
    parser.add_argument("--poll-s", type=float, default=1.0, help="seconds between progress polls (default: 1.0)")
    parser.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                        help="launch N runs of the spec, one after another, named <name>-r1 .. <name>-rN and recorded as "
                             "replicates (manifest.json `replicate`); python -m hpcprof.compare makes one arm of them and "
                             "puts the run-to-run spread in its intervals (default: 1, one run named <name>)")
    add_spec_arguments(parser)
    return parser


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {v}")
    return v


def replicate_names(group: str, count: int) -> list[str]:
    """The run names of `count` replicates of `group`: <group>-r1 .. <group>-r<count>."""
    return [f"{group}-r{k}" for k in range(1, count + 1)]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, passthrough = split_passthrough(argv)
    args = build_parser().parse_args(own)
    launched = None
    with signals_raise():
        try:
            spec = spec_from_args(args, passthrough)
            if args.repeat > 1:
                return _repeat(args, spec, argv)
            launched = launch(spec, argv=["python", "-m", "hpcprof.submit", *argv])
            return _after_launch(args, launched)
        except (SpecError, LaunchError, RunDirError) as exc:
            print(f"hpcprof.submit: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except Interrupted as exc:
            return _interrupted(launched, exc)


def _repeat(args: argparse.Namespace, spec: JobSpec, argv: list[str]) -> int:
    """--repeat N: a thin loop over launch(), one run after another (local runs wait for each; SLURM
    runs are chained with dependency=afterany so that replicates never share the nodes). The names
    are checked before the first run starts; an interrupt stops the run in progress, as for one run."""
    executor, _ = choose_executor(spec.resources.cluster)
    resolved = resolve_resources(copy.deepcopy(spec), executor)
    group = spec.name or default_run_name(resolved, resolved.resources.nodes * resolved.resources.tasks_per_node)
    names = replicate_names(group, args.repeat)
    validate_run_name(names[-1], "--name")
    for name in names:
        refuse_existing(RunDir.for_spec(spec, name))
    codes: list[int] = []
    prev_job = None
    launched: Launch | None = None
    try:
        for k, name in enumerate(names, 1):
            one = copy.deepcopy(spec)
            one.name = name
            if prev_job is not None:
                one.resources.slurm_extra = {**one.resources.slurm_extra, "dependency": f"afterany:{prev_job}"}
            print(f"hpcprof: replicate {k}/{args.repeat} of {group}", file=sys.stderr)
            launched = launch(one, argv=["python", "-m", "hpcprof.submit", *argv],
                              replicate=run_manifest.Replicate(group, k, args.repeat, ""))
            if launched.executor == "slurm":
                prev_job = launched.job.job_id
            codes.append(_after_launch(args, launched))
            launched = None
    except Interrupted as exc:
        return _interrupted(launched, exc)
    root = Path(spec.runs_dir)
    runs = " ".join(shlex.quote(str(root / n)) for n in names)
    print(f"hpcprof: {args.repeat} replicate(s) of {group}: "
          + ", ".join(f"r{k} {'ok' if c == EXIT_OK else 'failed'}" for k, c in enumerate(codes, 1)))
    print(f"hpcprof: compare them (one arm) against another set with: python -m hpcprof.compare <baseline runs> {runs}")
    return max(codes) if codes else EXIT_FAILED


def analyze_run(run_root: Path) -> int:
    """``--analyze``: the analysis of the finished run, as ``python -m hpcprof.analyze RUN_DIR``
    with its defaults would run it and with the same lines (its console summary, or one error line
    naming ``hpcprof.analyze``); returns that command's exit code. Calls the analysis' library
    function, not the command's module: the launcher sits below the commands."""
    from ..analysis import AnalysisError, analyze

    _, rc = run_guarded("hpcprof.analyze", lambda: analyze(run_root, console=True), (AnalysisError,), "analysis")
    return EXIT_OK if rc is None else rc


def _after_launch(args: argparse.Namespace, launched: Launch) -> int:
    do_wait = args.wait if args.wait is not None else launched.executor != "slurm"
    if launched.executor != "slurm" and args.wait is False:
        print("hpcprof: local ranks stop when this command exits, so it waits anyway", file=sys.stderr)
        do_wait = True
    if not do_wait:
        print(f"hpcprof: follow with: squeue -j {launched.job.job_id}; logs in {launched.run.logs_dir}")
        print(f"hpcprof: analyse afterwards with: python -m hpcprof.analyze {shlex.quote(str(launched.run.root))}")
        return EXIT_OK
    code = wait(launched, poll_s=args.poll_s)
    if code == EXIT_OK and args.analyze:
        code = analyze_run(launched.run.root)
    elif code == EXIT_OK:
        print(f"hpcprof: analyse with: python -m hpcprof.analyze {shlex.quote(str(launched.run.root))}")
    return code


if __name__ == "__main__":
    sys.exit(main())
