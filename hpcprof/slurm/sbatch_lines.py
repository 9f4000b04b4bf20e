"""The ``#SBATCH`` lines of a rendered script (``python -m hpcprof.sbatch``): the template's options
with the spec's resources applied, and the geometry they ask for.

Ranks and GPUs per node are resolved as ``python -m hpcprof.submit`` resolves them
(:func:`hpcprof.slurm.geometry.resolve_resources`), the template's counts as defaults. Every value
that reaches an ``#SBATCH`` line, the template's own included, is checked by :func:`check_value`
(the renderer's other blocks use the same check), so a value holding shell syntax is refused with
an error naming its field before anything is written.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from ..spec import JobSpec
from ..spec.resources import CONSTRAINT, OPTION, SBATCH_OPTION, WORD, Charset, SlurmResources
from .geometry import resolve_resources
from .script_io import RenderError

#: The two ways an #SBATCH line asks for GPUs (`--gpu-request`): --gres=gpu:N or --gpus-per-node=N.
GPU_REQUESTS = ("gres", "gpus-per-node")
#: The spec field each #SBATCH option comes from, for error messages (``gres`` asks for GPUs too).
FIELD_OF_OPTION = {option: f"resources.{name}" for name, option in SBATCH_OPTION.items()}
FIELD_OF_OPTION["gres"] = "resources.gpus_per_node"


def check_value(field: str, value: str, charset: Charset = WORD, allow_space: bool = False) -> str:
    """Refuse a value holding any character outside ``charset``, naming ``field``."""
    value = str(value)
    if value.strip() == "":
        raise RenderError(f"{field}: empty value; nothing was written")
    bad = charset.bad(value, allow_space)
    if bad:
        raise RenderError(f"{field} = {value!r} refused: it holds {', '.join(map(repr, bad))} "
                          f"(allowed: {charset.description}{', spaces' if allow_space else ''}); "
                          f"no shell syntax, quotes, backticks or newlines in a job script; "
                          f"nothing was written")
    return value


def parse_sbatch_block(body: str, template: Path) -> dict[str, str | None]:
    """The template's ``hpcprof:sbatch`` block as {option: value or None}; a line that is not
    ``#SBATCH --opt[=value]`` is refused, naming the template and the line."""
    opts: dict[str, str | None] = {}
    for n, line in enumerate(body.splitlines(), 1):
        m = re.fullmatch(r"#SBATCH\s+--([A-Za-z][A-Za-z0-9-]*)(?:=(\S+))?\s*", line)
        if not m:
            raise RenderError(f"{template}: hpcprof:sbatch block line {n} is not '#SBATCH --opt[=value]': "
                              f"{line!r}")
        opts[m.group(1)] = m.group(2)
    return opts


def _slurm_time(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    h, m = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:00" if days else f"{h:02d}:{m:02d}:00"


def sbatch_options(spec: JobSpec, template_opts: dict[str, str | None],
                   gpu_request: str = "") -> dict[str, str | None]:
    """The template's #SBATCH options with the spec's resources applied, all validated."""
    r = spec.resources
    opts = dict(template_opts)
    if gpu_request and gpu_request not in GPU_REQUESTS:
        raise RenderError(f"--gpu-request {gpu_request!r}: valid values: {', '.join(GPU_REQUESTS)}")

    def set_opt(key: str, value) -> None:
        opts[key] = value

    set_opt("job-name", r.job_name or "hpcprof")
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(r, key):
            set_opt(key, getattr(r, key))
    set_opt("nodes", str(r.nodes))

    # GPUs: the spec's count replaces the template's, in the template's form unless asked otherwise.
    template_gpus = _gpus_asked(opts)
    # GPUs and ranks per node: resolved as submit resolves them (the template's counts as defaults),
    # on a copy: the spec keeps what the user set (render gives the ranks the script's geometry).
    template_tasks = opts.get("ntasks-per-node") or ""
    resolved = resolve_resources(copy.deepcopy(spec), "slurm", default_gpus=template_gpus,
                                 default_tasks=int(template_tasks) if template_tasks.isdigit() else 0)
    gpus = resolved.resources.gpus_per_node
    form = gpu_request or ("gpus-per-node" if "gpus-per-node" in opts else "gres")
    # Keep the GPU line where the template has it; drop it for a CPU-only job.
    keys = list(opts)
    gpu_keys = [k for k in ("gres", "gpus-per-node") if k in opts and
                (k != "gres" or (opts[k] or "").startswith("gpu"))]
    if gpu_keys:
        at = keys.index(gpu_keys[0])
    else:
        at = keys.index("ntasks-per-node") + 1 if "ntasks-per-node" in keys else len(keys)
    for k in gpu_keys:
        keys.remove(k)
    if gpus:
        keys.insert(at, form)
    opts = {k: opts.get(k) for k in keys}
    if gpus:
        opts[form] = f"gpu:{gpus}" if form == "gres" else str(gpus)
    set_opt("ntasks-per-node", str(resolved.resources.tasks_per_node))
    if r.cpus_per_task:
        set_opt("cpus-per-task", str(r.cpus_per_task))
    if r.mem_gb:
        set_opt("mem", f"{r.mem_gb}G")
    set_opt("time", _slurm_time(r.time_min))
    for key, value in r.slurm_extra.items():
        check_value(f"resources.slurm_extra key {key!r}", str(key).replace("_", "-"), OPTION)
        set_opt(str(key).replace("_", "-"), None if value in ("", None, True, "true") else str(value))

    # The template's own lines too: every value on an #SBATCH line is checked, naming its field.
    for key, value in opts.items():
        field = FIELD_OF_OPTION.get(key, f"resources.slurm_extra.{key}")
        check_value(f"{field} (--{key})", key, OPTION)
        if value is not None:
            check_value(field, value, CONSTRAINT if key == "constraint" else WORD)
    return opts


def _gpus_asked(opts: dict[str, str | None]) -> int:
    """GPUs per node that #SBATCH options ask for (``--gres=gpu[:type]:N`` or ``--gpus-per-node``)."""
    if opts.get("gres"):
        m = re.fullmatch(r"gpu(?::[A-Za-z0-9_-]+)?:(\d+)", opts["gres"] or "")
        return int(m.group(1)) if m else 0
    if opts.get("gpus-per-node"):
        return int(re.sub(r"\D", "", opts["gpus-per-node"] or "") or 0)
    return 0


def script_resources(opts: dict[str, str | None]) -> SlurmResources:
    """The geometry the rendered #SBATCH lines ask for (nodes, tasks and GPUs per node, CPUs per
    task): whichever of the template and the spec set them. The script's srun options and the
    render warnings come from it, so they describe the job that will run."""
    def number(key: str, default: int) -> int:
        value = opts.get(key) or ""
        return int(value) if value.isdigit() else default

    return SlurmResources(nodes=number("nodes", 1), tasks_per_node=number("ntasks-per-node", 1),
                          gpus_per_node=_gpus_asked(opts), cpus_per_task=number("cpus-per-task", 0))
