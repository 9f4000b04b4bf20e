"""Render an sbatch script from a job spec: the same spec (job file + flags) as ``hpcprof.submit``.

    python -m hpcprof.sbatch --template jean-zay-v100 --nodes 2 --account abc@v100 \\
        --qos qos_gpu-dev --job jobs/resnet50-2nodes.toml > job.slurm
    sbatch job.slurm

Templates live in ``slurm/<name>.sbatch`` of the repository, shipped in the package as
``hpcprof.slurm.templates`` (see :func:`templates_dir`): each is a working script on its own,
documented at its top. Rendering replaces four marked blocks of the template:

- ``hpcprof:sbatch``: the ``#SBATCH`` lines. The template's lines are the defaults and describe the
  machine (GPUs, tasks per node, CPUs per task, ``--hint``); every resource the spec sets (nodes,
  tasks per node, GPUs, CPUs per task, partition, account, QoS, constraint, memory, time, job name,
  ``slurm_extra``) replaces or adds its line. Job files describe the work and leave the machine's
  geometry to the template; flags override it.
- ``hpcprof:setup``: the environment. ``--module`` replaces the template's ``module`` lines;
  ``--venv`` and the spec's ``resources.setup`` lines come after them (a venv made with
  ``--system-site-packages`` on the site's PyTorch module needs that module loaded). ``--venv``
  also sets the one-line hint that the template's check prints when the ranks' python cannot
  ``import hpcprof`` (the script stops there, before ``srun``, with exit 1: a job without hpcprof
  would otherwise fail once per rank, in N logs); :mod:`.preflight` then checks torch, the rank
  code and the GPUs the same way.
- ``hpcprof:args``: ``RUNS_DIR``, ``RUN_NAME`` and the spec as flags for ``python -m hpcprof.train``.
- ``hpcprof:srun``: ``SRUN_OPTIONS``, the options of the ``srun`` starting the ranks:
  :meth:`SlurmResources.srun_options <hpcprof.spec.resources.SlurmResources.srun_options>` of what
  the ``#SBATCH`` lines ask for, the same definition ``python -m hpcprof.submit`` hands to submitit.

What the rendered geometry wastes (GPUs no rank uses, ranks bound to one core) is printed as a
warning (:func:`hpcprof.slurm.geometry.geometry_warnings`); the script is still written.

Every value is validated before anything is written: a value holding shell syntax (``;``, ``$``,
backticks, quotes, newlines, redirections...) is refused with an error naming the field. Values in
the script are then shell-quoted (``shlex.quote``) as well.

The ``#SBATCH`` block (the template's options with the spec's resources, the geometry they ask
for, and the value check every block uses) is :mod:`.sbatch_lines`; this module renders the other
blocks and holds the CLI. The values' field-level rules are in :mod:`hpcprof.spec.resources`; the
resolution of ranks and GPUs in :mod:`.geometry`.
"""

from __future__ import annotations

import argparse
import copy
import re
import shlex
import sys
from dataclasses import dataclass
import importlib.resources
from pathlib import Path

from ..cliparser import ArgumentParser
from ..spec import JobSpec, SpecError, add_spec_arguments, override_items, spec_from_args, split_passthrough
from ..spec.resources import CONSTRAINT, OPTION, WORD, Charset
from .geometry import LaunchError, geometry_warnings
from .sbatch_lines import GPU_REQUESTS, check_value, parse_sbatch_block, sbatch_options, script_resources
from .script_io import RenderError, read_template, write_script

TEMPLATE_SUFFIX = ".sbatch"
RUN_NAME = Charset(r"A-Za-z0-9._-", "letters, digits and . _ -")


def templates_dir() -> Path:
    """The folder of the shipped templates: package data ``hpcprof.slurm.templates``, which
    pyproject.toml maps to the repository's top-level ``slurm/`` folder, so an editable install
    reads ``slurm/`` itself and a wheel carries a copy."""
    try:
        return Path(str(importlib.resources.files("hpcprof.slurm.templates")))
    except ModuleNotFoundError:
        raise RenderError("the sbatch templates (package data hpcprof.slurm.templates) are not "
                          "installed: reinstall hpcprof (pip install .)") from None

BLOCK_RE = re.compile(r"^(?P<open># >>> hpcprof:(?P<name>[a-z]+)\b[^\n]*\n)(?P<body>.*?)"
                      r"(?P<close>^# <<< hpcprof:(?P=name)\n)", re.M | re.S)


def available_templates(directory: Path | None = None) -> list[str]:
    """Template names (file names without ``.sbatch``) in ``directory`` (default: the shipped ones)."""
    directory = directory or templates_dir()
    return sorted(p.name[: -len(TEMPLATE_SUFFIX)] for p in directory.glob(f"*{TEMPLATE_SUFFIX}"))


def template_path(name: str, directory: Path | None = None) -> Path:
    """The template file for a name (``jean-zay-v100``) or a path to a ``.sbatch`` file."""
    directory = directory or templates_dir()
    valid = available_templates(directory)
    if name in valid:
        return directory / f"{name}{TEMPLATE_SUFFIX}"
    path = Path(name)
    if name.endswith(TEMPLATE_SUFFIX) and path.is_file():
        return path
    raise RenderError(f"--template {name!r}: unknown template; valid templates: "
                      f"{', '.join(valid) or '(none found in ' + str(directory) + ')'}"
                      f" (or a path to a {TEMPLATE_SUFFIX} file)")


# ------------------------------------------------------------------------------ validation
def check_shell_line(field: str, line: str) -> str:
    """A setup line (``module load x``, ``source /p/bin/activate``): plain words only, rewritten
    with each word shell-quoted."""
    if "\n" in line or "\r" in line:
        raise RenderError(f"{field} = {line!r} refused: it holds a newline; give one line per "
                          f"entry; nothing was written")
    if not line.strip():
        raise RenderError(f"{field}: empty line; nothing was written")
    bad = WORD.bad(line, allow_space=True)
    if bad:
        raise RenderError(f"{field} = {line!r} refused: it holds {', '.join(map(repr, bad))}; a "
                          f"setup line is plain words (allowed: {WORD.description}, spaces): "
                          f"absolute paths, no variables, no ';', '$(...)', quotes, backticks or "
                          f"newlines; nothing was written")
    return " ".join(shlex.quote(w) for w in line.split())


# ------------------------------------------------------------------------------ rendering
@dataclass
class RenderOptions:
    """What the sbatch renderer takes beyond the job spec."""

    template: str = "generic"
    modules: tuple[str, ...] = ()
    """Modules to load (``module load NAME``), replacing the template's ``module`` lines of its
    environment block (empty: the template's stay)."""
    venv: str = ""
    """A virtual environment to activate (``source VENV/bin/activate``), after the modules."""
    gpu_request: str = ""
    """How GPUs are requested: "gres" (``--gres=gpu:N``) or "gpus-per-node"; default: as the
    template does, else gres."""


def setup_lines(spec: JobSpec, options: RenderOptions, template_body: str = "") -> list[str] | None:
    """The environment block, or None to keep the template's (``template_body``). The template's
    ``module`` lines stay unless ``--module`` replaces them: Jean Zay's ``module purge`` comes before
    the block, so a venv alone would leave the job without the PyTorch module its
    ``--system-site-packages`` venv was made on."""
    lines: list[str] = []
    if options.modules:
        for i, module in enumerate(options.modules):
            lines.append("module load " + shlex.quote(check_value(f"--module (#{i + 1})", module)))
    elif options.venv or spec.resources.setup:
        lines += [line for line in template_body.splitlines() if line.split()[:1] == ["module"]]
    if options.venv:
        venv = check_value("--venv", options.venv.rstrip("/") or "/")
        activate = shlex.quote(venv + "/bin/activate")
        # A missing venv is one line naming it (bash's own "No such file" names no option), and the
        # import check before srun (in the template) says what to install into it.
        missing = (f"hpcprof: error: no virtual environment at {venv} (--venv): create it with "
                   f"python -m venv --system-site-packages {venv}")
        lines.append(f"[ -f {activate} ] || {{ echo {shlex.quote(missing)} >&2; exit 1; }}")
        lines.append("# shellcheck source=/dev/null")  # the venv exists on the cluster only
        lines.append(f"source {activate}")
        hint = (f"pip install hpcprof into the venv given with --venv: {venv}/bin/pip install "
                f"<hpcprof wheel or checkout> (README: On a cluster, day one)")
        lines.append(f"HPCPROF_INSTALL_HINT={shlex.quote(hint)}")
    for i, line in enumerate(spec.resources.setup):
        line = check_shell_line(f"resources.setup[{i}]", line)
        if line.split()[0] in ("source", "."):
            lines.append("# shellcheck source=/dev/null")
        lines.append(line)
    return lines or None


# Spec fields that are paths (spaces allowed there: the value is quoted in the script).
_PATH_FIELDS = {"data.path", "runs_dir", "workload.script", "workload.args"}
# Fields the script passes itself (RUNS_DIR, RUN_NAME), or that do not concern the ranks.
_NOT_FOR_RANKS = {"name", "runs_dir", "resources.setup", "resources.slurm_extra", "resources.cluster"}


def rank_flags(spec: JobSpec) -> list[tuple[str, str | None]]:
    """The spec as ``python -m hpcprof.train`` (flag, value or None) pairs, each value validated and
    named by its field (the spec says which field each flag comes from; nothing is re-parsed)."""
    out: list[tuple[str, str | None]] = []
    for field, flag, value in override_items(spec):
        if field in _NOT_FOR_RANKS:
            continue
        check_value(f"flag {flag}", flag, OPTION)
        if value is not None:
            charset = CONSTRAINT if field == "resources.constraint" else WORD  # quoted in the script
            check_value(field, value, charset, allow_space=field in _PATH_FIELDS)
        out.append((flag, value))
    return out


def render(spec: JobSpec, options: RenderOptions, command: list[str] | None = None,
           warnings: list[str] | None = None) -> str:
    """The rendered script as text; raises RenderError (naming the field) on any unsafe value.
    What the job's geometry wastes is appended to ``warnings`` when given (one line each)."""
    path = template_path(options.template)
    text = read_template(path)
    blocks = {m.group("name"): m for m in BLOCK_RE.finditer(text)}
    missing = [b for b in ("sbatch", "setup", "args", "srun") if b not in blocks]
    if missing:
        raise RenderError(f"{path}: template lacks the block(s) "
                          f"{', '.join('# >>> hpcprof:' + b for b in missing)}")

    opts = sbatch_options(spec, parse_sbatch_block(blocks["sbatch"].group("body"), path),
                          options.gpu_request)
    setup = setup_lines(spec, options, blocks["setup"].group("body"))
    asked = script_resources(opts)
    if warnings is not None:
        warnings += geometry_warnings(asked, spec.data.num_workers, slurm=True)
    runs_dir = check_value("runs_dir", spec.runs_dir, WORD, allow_space=True)
    if runs_dir.startswith("-"):
        # the same folder, written so that mkdir and the ranks' parser take it for a path, not an option
        runs_dir = "./" + runs_dir
    if spec.name:
        run_name = shlex.quote(check_value("name", spec.name, RUN_NAME))
    else:
        label = spec.model.arch if spec.workload.builtin else re.sub(r"[^A-Za-z0-9._-]", "_", spec.workload.label)
        run_name = f"{check_value('model.arch' if spec.workload.builtin else 'workload', label)}-job${{SLURM_JOB_ID}}"
    # The ranks' spec records the geometry the script asks for, the template's included (their
    # spec.toml is the run's resolved spec; cpus_per_task also sets their torch threads).
    for_ranks = copy.deepcopy(spec)
    for key in ("gpus_per_node", "tasks_per_node", "cpus_per_task"):
        setattr(for_ranks.resources, key, getattr(asked, key))
    flags = rank_flags(for_ranks)

    sbatch_body = "".join(f"#SBATCH --{k}\n" if v is None else f"#SBATCH --{k}={v}\n"
                          for k, v in opts.items())
    arg_lines = []
    for flag, value in flags:
        if value is None:
            arg_lines.append(f"    {flag}")
        elif value.startswith("-"):  # argparse would take "--flag -x" for two flags
            arg_lines.append(f"    {shlex.quote(f'{flag}={value}')}")
        else:
            arg_lines.append(f"    {flag} {shlex.quote(value)}")
    args_body = (f"RUNS_DIR={shlex.quote(runs_dir)}\n"
                 f"RUN_NAME={run_name}\n"
                 "HPCPROF_ARGS=(\n" + "".join(line + "\n" for line in arg_lines) + ")\n")

    srun_body = "SRUN_OPTIONS=(" + " ".join(shlex.quote(o) for o in asked.srun_options()) + ")\n"
    new_bodies = {"sbatch": sbatch_body, "args": args_body, "srun": srun_body}
    if setup is not None:
        new_bodies["setup"] = "".join(line + "\n" for line in setup)
    text = BLOCK_RE.sub(lambda m: m.group("open") + new_bodies.get(m.group("name"), m.group("body"))
                        + m.group("close"), text)
    if command is not None:
        for arg in command:
            if any(ord(c) < 32 or ord(c) == 127 for c in arg):
                raise RenderError(f"command-line argument {arg!r} refused: it holds a newline or "
                                  f"control character; nothing was written")
        shown = " ".join(shlex.quote(a) for a in command)
        note = f"# Rendered from template {path.name} by: {shown}\n"
        first_nl = text.index("\n") + 1
        text = text[:first_nl] + note + text[first_nl:]
    return text


# ------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m hpcprof.sbatch", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", default="generic",
                        help=f"template name ({', '.join(available_templates())}) or a "
                             f"path to a {TEMPLATE_SUFFIX} file (default: generic)")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write the script to FILE instead of stdout (only if rendering succeeds; "
                             "only a regular file is replaced, a symlink's target gets it; - is stdout)")
    parser.add_argument("--module", dest="modules", action="append", default=[], metavar="NAME",
                        help="module to load in the job (repeatable); replaces the template's "
                             "environment block")
    parser.add_argument("--venv", default="", metavar="PATH",
                        help="virtual environment to activate in the job (absolute path)")
    parser.add_argument("--gpu-request", choices=GPU_REQUESTS, default="",
                        help="how GPUs are requested: --gres=gpu:N or --gpus-per-node=N "
                             "(default: as the template does)")
    add_spec_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, passthrough = split_passthrough(argv)
    args = build_parser().parse_args(own)
    try:
        spec = spec_from_args(args, passthrough)
        from ..rank.workload import check_workload

        check_workload(spec)
        options = RenderOptions(template=args.template, modules=tuple(args.modules),
                                venv=args.venv, gpu_request=args.gpu_request)
        warnings: list[str] = []
        text = render(spec, options, command=["python", "-m", "hpcprof.sbatch", *argv], warnings=warnings)
    except (SpecError, RenderError, LaunchError) as exc:
        print(f"hpcprof.sbatch: error: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"hpcprof.sbatch: warning: {line}", file=sys.stderr)
    if args.output and args.output != "-":  # "-o -": standard output, as without -o
        out = Path(args.output)
        try:
            written = write_script(out, text)
        except (RenderError, OSError) as exc:
            why = exc if isinstance(exc, RenderError) else f"cannot write {out} ({exc.strerror or exc})"
            print(f"hpcprof.sbatch: error: {why}", file=sys.stderr)
            return 2
        where = f"{out} (-> {written})" if written != out else str(out)
        print(f"hpcprof.sbatch: wrote {where}; submit it with: sbatch {shlex.quote(str(out))}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
