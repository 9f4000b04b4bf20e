"""Every command in README.md's fenced shell blocks is run by a test (issue 13 item 5).

Each command line of a ```bash block is covered in one of three ways:

- RUN_HERE: cheap enough to run right here, as written, in a scratch folder that holds the
  checkout's ``jobs/`` and, as ``runs/<name>``, a copy of a real trace set; each entry also checks
  what the user would see (the help, the rendered script, the analysis files).
- RUN_BY: run by another test of the suite, because it trains, needs the local SLURM cluster or a
  browser. The table names that test as ``file::function``; here we check that the function exists
  and that its file holds the command's module and every flag it passes (or, where the test reads
  the command from the README itself, the words that show it does).
- DAY_ONE: the block of "On a cluster, day one", which tests/slurm/test_day_one.py reads from the
  README and runs line by line (a wheel, a separate venv, plain sbatch on the local cluster).

``make test`` is exempt: it IS the continuous integration (``.ci/run`` runs exactly it), so the whole
suite, this module included, is what running it tests.

A README command covered by none of these fails, naming the command; so does a table entry whose
command the README no longer has (the tables must not outlive the commands they vouch for).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, TRACES

README = REPO / "README.md"
DAY_ONE_SECTION = "## On a cluster, day one\n"
EXEMPT = {"make test": "the CI itself (.ci/run runs `make test`): the suite it runs includes this test"}

#: README command -> the test (file::function) that runs the same command line, and optionally the
#: strings that test's file must hold (default: the command's module and flags).
RUN_BY: dict[str, tuple[str, list[str] | None]] = {
    # `make demo` runs the Makefile's demo recipe (checked below); this test runs that recipe's command
    "make demo": ("tests/analysis/test_report_browser.py::test_demo_report_in_chromium", None),
    "python -m hpcprof.submit --job jobs/demo-local.toml --name first --analyze":
        ("tests/analysis/test_report_browser.py::test_demo_report_in_chromium", None),
    # the GPU flags need GPUs: this test reads the line from the README and checks what it would submit;
    # tests/slurm/test_slurm_jobs.py::test_submit_two_nodes_two_tasks_per_node submits a CPU job for real
    "python -m hpcprof.submit --cluster slurm --partition gpu_p13 --gpus-per-node 4 --cpus-per-task 10 "
    "--job jobs/resnet50-2nodes.toml --wait":
        ("tests/test_resources.py::test_readme_submit_line_asks_slurm_for_one_rank_per_gpu_with_its_cores",
         ["README.md", '"python -m hpcprof.submit --cluster slurm "', "build_parser"]),
    "sbatch job.slurm":
        ("tests/slurm/test_slurm_jobs.py::test_generic_template_rendered_for_local_partition_runs_with_plain_sbatch",
         ['"sbatch"', '"--output"', "hpcprof.sbatch"]),
    "python -m hpcprof.analyze runs/<name> --executor slurm --slurm-partition <partition>":
        ("tests/slurm/test_analysis_array.py::test_slurm_array_summary_equals_local_pool_one_task_per_rank", None),
    # the test reads this very line from the README and runs it with <name> replaced
    "HPCPROF_RUN_DIR=runs/<name> .venv/bin/python -m jupyter nbconvert --to notebook --execute "
    "analysis/post_job.ipynb --output-dir runs/<name>/analysis":
        ("tests/analysis/test_notebook.py::test_post_job_notebook_runs_as_the_readme_says",
         ["README.md", '"nbconvert"', '"post_job.ipynb"', 'cmd.replace("<name>", name)']),
    "python -m hpcprof.compare runs/<baseline> runs/<changed>":
        ("tests/test_compare.py::test_kineto_workers0_vs_workers4", None),
    "python -m hpcprof.submit --script train.py -- --lr 0.1":
        ("tests/test_user_code.py::test_a_user_script_gets_step_records_and_regions_on_every_rank",
         ['"hpcprof.submit"', '"--script"', '"train.py"', '"--", "--lr"']),
    "python -m hpcprof.submit --cluster slurm --nodes 2 --partition <yours> --script train.py --wait":
        ("tests/slurm/test_slurm_user_code.py::test_a_user_script_through_submitit_on_two_nodes",
         ['"hpcprof.submit"', '"--cluster", "slurm"', '"--nodes", "2"', '"--partition"', '"--script", "train.py"', '"--wait"']),
    "torchrun --nproc-per-node 4 -m hpcprof.wrap train.py --lr 0.1":
        ("tests/test_unchanged_scripts.py::test_an_unchanged_script_gets_one_step_record_per_optimizer_step_on_every_rank",
         ['"torch.distributed.run"', '"--nproc-per-node"', '"-m", "hpcprof.wrap"']),
    "python -m hpcprof.ladder jobs/ladder-cpu --repeat 3":
        ("tests/test_ladder.py::test_cpu_ladder_throughput_rises_where_it_should", ['"jobs/ladder-cpu"', '"--repeat", "3"', "hpcprof.ladder"]),
    "python -m hpcprof.submit --job jobs/demo-local.toml --name before --repeat 3":
        ("tests/test_compare.py::test_submit_repeat_records_each_run_as_a_replicate", ['"hpcprof.submit"', "FAST_FLAGS", '"--name"', '"--repeat"']),
}

#: tests/slurm/test_day_one.py: the test that runs the README block and what shows it reads the README.
DAY_ONE_TEST = "tests/slurm/test_day_one.py::test_readme_day_one_from_a_wheel_in_a_separate_venv_completes"


# ------------------------------------------------------------------------------- the README's commands
def shell_blocks(text: str) -> list[tuple[str, str]]:
    """(heading of the section, block body) of every ```bash/sh/shell/console block."""
    out = []
    for m in re.finditer(r"^```(?:bash|sh|shell|console)\n(.*?)^```", text, re.M | re.S):
        heads = re.findall(r"^## .*$", text[: m.start()], re.M)
        out.append((heads[-1] if heads else "", m.group(1)))
    return out


def commands_of(block: str) -> list[str]:
    """Command lines: continuation lines joined, trailing `# comments` and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    cmds = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line:
            cmds.append(line)
    return cmds


def readme_commands() -> list[tuple[str, str]]:
    """(section heading, command) for every command of README.md's shell blocks."""
    return [(head, c) for head, body in shell_blocks(README.read_text()) for c in commands_of(body)]


def day_one_commands() -> list[str]:
    """The lines test_day_one runs: the first bash block of the section (its own extraction rule)."""
    text = README.read_text()
    section = text.split(DAY_ONE_SECTION, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def module_and_flags(cmd: str) -> list[str]:
    """The python module a command runs and the flags it passes (placeholders <x> count as values)."""
    tokens = shlex.split(re.sub(r"<[^>]*>", "X", cmd))
    module = [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "-m"]
    return module + [t.split("=", 1)[0] for t in tokens if t.startswith("--")]


# ------------------------------------------------------------------------------- commands run here
@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder like the checkout root for the README's commands: jobs/ (a link to the checkout's)
    and runs/demo, a writable copy of a real 2-rank GPU trace set (hta_sampled_2of128)."""
    src = TRACES / "hta_sampled_2of128"
    if not src.is_dir():
        raise AssertionError(f"{src} not found: tests/data is part of the repository")
    root = tmp_path_factory.mktemp("readme")
    (root / "jobs").symlink_to(REPO / "jobs")
    run = root / "runs" / "demo"
    shutil.copytree(src, run)
    run.chmod(0o755)  # a user's run directory is writable, whatever the mode of the copied traces
    for p in run.iterdir():
        p.chmod(0o644)
    return root


def run_here(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(cmd.replace("<name>", "demo"))
    assert argv[0] == "python", f"RUN_HERE runs python commands only: {cmd}"
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "Agg"})


def check_submit_help(p: subprocess.CompletedProcess, cwd: Path) -> None:
    assert p.stdout.startswith("usage: python -m hpcprof.submit"), p.stdout[:300]
    for flag in ("--job", "--cluster", "--nodes", "--inject-straggler", "--set"):
        assert flag in p.stdout, f"submit --help does not list {flag}"


def check_sbatch_render(p: subprocess.CompletedProcess, cwd: Path) -> None:
    script = (cwd / "job.slurm").read_text()
    for line in ("#SBATCH --account=abc@v100", "#SBATCH --nodes=2", "#SBATCH --partition=gpu_p13", "#SBATCH --gres=gpu:4"):
        assert line in script, f"rendered job.slurm lacks {line!r}"
    assert "python -m hpcprof.train" in script
    assert "sbatch job.slurm" in p.stdout + p.stderr, "the render does not say how to submit"


def check_analyze(p: subprocess.CompletedProcess, cwd: Path) -> None:
    out = cwd / "runs" / "demo" / "analysis"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks_analyzed"] == [0, 1] and summary["device"] == "cuda"
    assert (out / "report.html").is_file() and (out / "timeline.pt.trace.json.gz").is_file()
    assert "report: runs/demo/analysis/report.html" in p.stdout, p.stdout[-1000:]


RUN_HERE = {
    "python -m hpcprof.submit --help": check_submit_help,
    "python -m hpcprof.sbatch --template jean-zay-v100 --account abc@v100 --nodes 2 "
    "--job jobs/resnet50-2nodes.toml -o job.slurm": check_sbatch_render,
    "python -m hpcprof.analyze runs/<name>": check_analyze,
}


# ------------------------------------------------------------------------------- the tests
def test_every_readme_command_is_covered():
    day_one = set(day_one_commands())
    uncovered = [f"{head}: {cmd}" for head, cmd in readme_commands()
                 if cmd not in RUN_HERE and cmd not in RUN_BY and cmd not in day_one and cmd not in EXEMPT]
    assert not uncovered, "README commands that no test runs (add them to RUN_HERE or RUN_BY):\n  " + "\n  ".join(uncovered)


def test_every_table_entry_is_still_a_readme_command():
    cmds = {c for _, c in readme_commands()}
    stale = [c for c in [*RUN_HERE, *RUN_BY, *EXEMPT] if c not in cmds]
    assert not stale, "entries for commands the README no longer has:\n  " + "\n  ".join(stale)


def _test_source(nodeid: str) -> str:
    path, func = nodeid.split("::")
    source = (REPO / path).read_text()
    assert re.search(rf"^def {re.escape(func)}\(", source, re.M), f"{nodeid}: no such test function"
    return source


@pytest.mark.parametrize("cmd", sorted(RUN_BY))
def test_the_named_test_runs_the_command(cmd):
    nodeid, needs = RUN_BY[cmd]
    source = _test_source(nodeid)
    if cmd == "make demo":
        recipe = re.search(r"^demo:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M)
        assert recipe, "Makefile has no demo recipe"
        needs = module_and_flags(recipe.group(1).replace("$(PY)", "python").replace("$(RUNS_DIR)", "runs"))
        assert needs[0] == "hpcprof.submit", recipe.group(1)
    needs = needs if needs is not None else module_and_flags(cmd)
    missing = [s for s in needs if s not in source]
    assert not missing, f"{nodeid} does not run `{cmd}`: its file lacks {missing}"


def test_day_one_block_is_what_test_day_one_runs():
    source = _test_source(DAY_ONE_TEST)
    assert f'SECTION = "{DAY_ONE_SECTION.strip()}\\n"' in source, "test_day_one no longer reads the README section"
    assert "readme_commands()" in source
    assert len(day_one_commands()) >= 5 and day_one_commands()[-1] == "sbatch job.slurm"


@pytest.mark.parametrize("cmd", sorted(RUN_HERE))
def test_command_runs_as_written(cmd, scratch):
    p = run_here(cmd, scratch)
    assert p.returncode == 0, f"`{cmd}` exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    RUN_HERE[cmd](p, scratch)


def test_links_of_the_readme_and_docs_lead_to_files_that_exist():
    """The README sends readers to docs/ for everything it no longer says: those links must hold."""
    broken = []
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
        # files named in code spans from the checkout root (`hpcprof/analysis/reduce/whatif.py`, ...)
        for path in re.findall(r"`((?:hpcprof|tests|docs|slurm|jobs|tools|benchmarks|analysis|scripts)/[\w./-]+\.\w+)`",
                               page.read_text()):
            if not (REPO / path).exists():
                broken.append(f"{page.relative_to(REPO)} -> {path}")
    assert not broken, "links to missing files:\n  " + "\n  ".join(broken)
