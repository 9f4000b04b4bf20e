"""Every command's parser (hpcprof.cliparser): no prefix of a flag is accepted, and a mistyped flag
is answered in one line with the closest real flag (issue 13: typos used to dump 35 lines of usage,
and --data-num-worker was silently taken for --data-num-workers)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from helpers import run_cli
from hpcprof.spec.resources import SlurmResources

@pytest.mark.parametrize("module", ["hpcprof.submit", "hpcprof.sbatch", "hpcprof.train"])
def test_typo_in_a_flag_is_one_line_with_the_suggestion(module, tmp_path):
    proc = run_cli(module, "--data-num-wokers", "4", "--runs-dir", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    assert "unknown flag --data-num-wokers" in lines[0] and "did you mean --data-num-workers?" in lines[0]
    assert not any(tmp_path.iterdir()), "nothing is created for a refused command line"


@pytest.mark.parametrize("module", ["hpcprof.submit", "hpcprof.sbatch", "hpcprof.train"])
@pytest.mark.parametrize("prefix", ["--train-step", "--data-num-worker"])
def test_a_prefix_of_a_flag_is_refused(module, prefix, tmp_path):
    proc = run_cli(module, prefix, "5", "--runs-dir", str(tmp_path), timeout=60)
    assert proc.returncode == 2, proc.stdout
    assert f"unknown flag {prefix}" in proc.stdout and f"did you mean {prefix}s?" in proc.stdout
    assert not any(tmp_path.iterdir())


def test_other_usage_errors_are_one_line_too():
    proc = run_cli("hpcprof.submit", "--nodes", timeout=60)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [
        "python -m hpcprof.submit: error: argument --nodes: expected one argument; --help lists every flag"]


def test_value_with_equals_sign_is_compared_by_its_flag():
    proc = run_cli("hpcprof.sbatch", "--partiton=gpu", timeout=60)
    assert proc.returncode == 2 and "unknown flag --partiton (did you mean --partition?)" in proc.stdout


@pytest.mark.parametrize("module, args, typo, flag", [
    ("hpcprof.compare", ["a", "b"], "--no-cach", "--no-cache"),
    ("hpcprof.drills.trace_drill", ["src", "out", "--rank", "0"], "--stal-ms", "--stall-ms"),
])
def test_the_other_commands_suggest_too(module, args, typo, flag, tmp_path):
    proc = run_cli(module, *args, typo, "5", timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"unknown flag {typo} (did you mean {flag}?)" in proc.stdout, proc.stdout
    assert not any(tmp_path.iterdir())


LAUNCH_FLAGS = ("--nodes", "--tasks-per-node", "--gpus-per-node", "--partition", "--account", "--qos",
                "--constraint", "--time-min", "--mem-gb", "--job-name", "--slurm-extra", "--setup", "--cluster")


def test_train_help_lists_only_what_a_rank_uses():
    proc = run_cli("hpcprof.train", "--help", timeout=60)
    assert proc.returncode == 0, proc.stdout
    listed = set(re.findall(r"--[a-z][a-z0-9-]*", proc.stdout))
    assert not listed & set(LAUNCH_FLAGS), f"train --help offers launch-only flags: {sorted(listed & set(LAUNCH_FLAGS))}"
    for flag in ("--cpus-per-task", "--data-num-workers", "--train-steps", "--profiler-active",
                 "--inject-straggler", "--runs-dir", "--name", "--job", "--set"):
        assert flag in listed, flag
    # Every flag sbatch or submit --help lists beyond those is a launch-only [resources] field.
    submit = set(re.findall(r"--[a-z][a-z0-9-]*", run_cli("hpcprof.submit", "--help", timeout=60).stdout))
    resource_fields = {field.name for field in dataclasses.fields(SlurmResources)}
    hidden = {flag for flag in submit - listed if flag[2:].replace("-", "_") in resource_fields}
    assert hidden and hidden <= set(LAUNCH_FLAGS), hidden


def test_train_still_accepts_the_allocation_flags_of_scripts_rendered_before():
    from hpcprof.rank.entry import build_parser
    from hpcprof.spec import spec_from_args

    spec = spec_from_args(build_parser().parse_args(
        ["--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--time-min", "1500", "--train-steps", "7"]))
    assert (spec.resources.nodes, spec.resources.partition, spec.train.steps) == (2, "gpu", 7)
