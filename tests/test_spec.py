"""The job spec: TOML + flags, validated once, errors that name the key and list valid values."""

import argparse

import pytest

from helpers import REPO, run_cli
from hpcprof.spec import (
    JobSpec,
    SpecError,
    add_spec_arguments,
    field_docs,
    load_spec,
    override_argv,
    spec_from_args,
    split_passthrough,
    SECTIONS,
)


def parse(*argv):
    """The spec of a command line, the workload's arguments after ``--`` included."""
    own, rest = split_passthrough(list(argv))
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    return spec_from_args(parser.parse_args(own), rest)


def test_every_field_has_a_docstring():
    for section, cls in [("top", JobSpec), *SECTIONS.items()]:
        docs = field_docs(cls)
        for f in cls.__dataclass_fields__:
            if f in SECTIONS:
                continue
            assert docs.get(f), f"{section}.{f} has no docstring"


def test_unknown_key_in_toml_names_key_and_lists_valid_ones(tmp_path):
    job = tmp_path / "bad.toml"
    job.write_text("[model]\narc = 'resnet18'\n")
    with pytest.raises(SpecError) as err:
        load_spec(job)
    msg = str(err.value)
    assert str(job) in msg and "'model.arc'" in msg and "did you mean 'arch'" in msg
    assert "valid keys: arch, num_classes" in msg


def test_unknown_section_is_refused(tmp_path):
    job = tmp_path / "bad.toml"
    job.write_text("[modle]\narch = 'resnet18'\n")
    with pytest.raises(SpecError, match=r"unknown key 'modle'.*\[model\]"):
        load_spec(job)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model-arch", "vgg16"], "model.arch = 'vgg16' is not valid; valid values: resnet18, resnet34, resnet50, resnet101"),
        (["--data-batch-size", "0"], "data.batch_size must be >= 1"),
        (["--train-steps", "3"], "fewer than the profiler schedule needs"),
        (["--cluster", "local", "--nodes", "2"], "runs on this machine only"),
        (["--data-num-workers", "2"], "need a DataLoader"),
        (["--inject-straggler", "two:50"], "drills.straggler must look like RANK:MS"),
        (["--inject-crash", "0:99"], "step 99 is never reached"),
        (["--name", "../etc"], "not a path"),
        (["--partition", "gpu;rm -rf /"], "resources.partition"),
        (["--set", "train.lr=fast"], "train.lr must be a number"),
    ],
)
def test_impossible_values_are_refused_with_reason(argv, message):
    with pytest.raises(SpecError) as err:
        parse(*argv)
    assert message in str(err.value)


def test_precedence_defaults_then_file_then_flags(tmp_path):
    job = tmp_path / "j.toml"
    job.write_text("[data]\nbatch_size = 7\n[model]\narch = 'resnet34'\n")
    spec = parse("--job", str(job), "--data-batch-size", "9", "--set", "train.steps=40")
    assert spec.model.arch == "resnet34"  # file
    assert spec.data.batch_size == 9  # flag beats file
    assert spec.train.steps == 40  # --set
    assert spec.model.image_size == JobSpec().model.image_size  # default


def test_toml_round_trip_and_override_argv(tmp_path):
    spec = parse("--model-arch", "resnet18", "--slurm-extra", "hint=nomultithread", "--setup", "module load x",
                 "--no-profiler-enabled", "--inject-straggler", "1:20")
    path = tmp_path / "spec.toml"
    path.write_text(spec.to_toml())
    assert load_spec(path).to_dict() == spec.to_dict()
    assert parse(*override_argv(spec)).to_dict() == spec.to_dict()


def test_spec_toml_reads_back_the_same_values_quotes_unicode_floats_and_tables_included(tmp_path):
    """spec.toml (tomli-w) parses to the spec's dict and loads as the same spec: strings with quotes,
    backslashes, a newline, a tab and non-ASCII letters, a float written with an exponent, empty lists,
    and resources.slurm_extra, a table inside [resources]; a spec.toml written before, with that
    table inline, still reads."""
    import tomllib

    arg = 'naïve "x"\n\ttab \\ end'
    specs = [parse("--model-arch", "resnet18", "--train-lr", "0.00001", "--slurm-extra", "hint=nomultithread",
                   "--slurm-extra", "comment=a,b:c", "--setup", 'export X="a b" # ü', "--setup", "echo 'x' \\ y"),
             parse("--script", "train.py", "--", "--name", arg, "--lr", "1e-05")]
    assert specs[0].train.lr == 1e-05 and specs[0].workload.args == [] and specs[1].workload.args[1] == arg
    for n, spec in enumerate(specs):
        text = spec.to_toml()
        assert tomllib.loads(text) == spec.to_dict(), text
        path = tmp_path / f"spec{n}.toml"
        path.write_text(text)
        assert load_spec(path).to_dict() == spec.to_dict(), text
    assert tomllib.loads(specs[0].to_toml())["resources"]["slurm_extra"] == {"hint": "nomultithread", "comment": "a,b:c"}
    old = tmp_path / "old.toml"
    old.write_text('[resources]\nslurm_extra = {"hint" = "nomultithread"}\nsetup = ["module load x"]\n')
    assert load_spec(old).resources.slurm_extra == {"hint": "nomultithread"}


def test_job_files_shipped_in_jobs_all_load():
    files = sorted((REPO / "jobs").rglob("*.toml"))
    assert len(files) >= 10  # demo, 2-node, eight ladder rungs
    for f in files:
        load_spec(f)
    rungs = [load_spec(f) for f in sorted((REPO / "jobs" / "ladder").glob("*.toml"))]
    assert rungs[0].data.num_workers == 0 and rungs[0].data.source == "fakedata"
    assert rungs[-1].model.compile and rungs[-1].model.amp != "off"


def test_zero_grad_follows_pytorchs_default():
    """Every rung, the baseline included, zeroes gradients as PyTorch does by default (set_to_none=True
    since 2.0): no rung carries memset kernels that PyTorch itself would not launch."""
    import inspect

    import torch

    default = inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default
    assert JobSpec().train.zero_grad_set_to_none is default is True
    for f in sorted((REPO / "jobs").rglob("*.toml")):
        assert load_spec(f).train.zero_grad_set_to_none is default, f


def test_submit_help_lists_every_option_with_default():
    out = run_cli("hpcprof.submit", "--help", timeout=60).stdout
    for flag in ["--job", "--name", "--cluster", "--nodes", "--tasks-per-node", "--gpus-per-node", "--wait",
                 "--inject-straggler", "--inject-crash", "--data-num-workers", "--profiler-active", "--set"]:
        assert flag in out
    assert "(default: 1)" in out and '(default: "resnet50")' in out


def test_bad_spec_on_command_line_exits_2_naming_key(tmp_path):
    proc = run_cli("hpcprof.submit", "--cluster", "local", "--set", "data.num_wrkers=3", "--runs-dir", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "unknown key 'data.num_wrkers'" in proc.stdout and "num_workers" in proc.stdout
    assert not any(tmp_path.iterdir()), "nothing is created for a refused spec"


def test_every_flag_maps_back_to_its_field():
    # One table of flag/field aliases: sbatch rendering names fields through it, never by re-parsing.
    from hpcprof.spec import field_of_flag, flag_of, iter_fields

    for dotted, _default, _doc in iter_fields():
        assert field_of_flag(flag_of(dotted)) == dotted
    assert field_of_flag("--inject-crash") == "drills.crash"
    assert field_of_flag("--partition") == "resources.partition"
    assert field_of_flag("--no-profiler-enabled") == "profiler.enabled"
    assert field_of_flag("--wait") is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--slurm-extra", "mail-user=a b"], "resources.slurm_extra['mail-user']"),
        (["--slurm-extra", "hint"], "KEY=VALUE"),
        (["--set", "resources.slurm_extra=x=1,y=$(id)"], "resources.slurm_extra['y']"),
        (["--setup", "module load a\nb"], "resources.setup[0]"),
        (["--train-lr", "nan"], "train.lr must be a finite number"),
    ],
)
def test_slurm_values_are_checked_on_the_submit_path_too(argv, message):
    # The spec checks what reaches submitit's #SBATCH lines, as the sbatch renderer always did.
    with pytest.raises(SpecError) as err:
        parse(*argv)
    assert message in str(err.value)


def test_slurm_resources_become_submitit_parameters():
    spec = parse("--partition", "gpu_p13", "--constraint", "v100-32g|v100-16g", "--gpus-per-node", "4",
                 "--tasks-per-node", "4", "--mem-gb", "64", "--slurm-extra", "exclusive=",
                 "--slurm-extra", "hint=nomultithread", "--setup", "module load pytorch-gpu")
    params = spec.resources.submitit_parameters("slurm")
    assert params["slurm_partition"] == "gpu_p13" and params["slurm_constraint"] == "v100-32g|v100-16g"
    assert params["gpus_per_node"] == 4 and params["tasks_per_node"] == 4 and params["mem_gb"] == 64
    assert params["slurm_additional_parameters"] == {"exclusive": True, "hint": "nomultithread"}
    assert params["slurm_setup"] == ["module load pytorch-gpu"]
    local = spec.resources.submitit_parameters("local")
    assert not any(k.startswith("slurm_") or k == "mem_gb" for k in local)


def test_a_user_scripts_spec_toml_carries_no_builtin_trainer_settings(tmp_path):
    """A user's script has its own model, data and optimizer: its spec.toml (and the manifest's spec,
    the same dict) holds no [model], no [data] and none of the built-in trainer's [train] fields, so
    it never reads as "resnet50, batch 32"; train.steps and the launch settings stay."""
    import tomllib

    spec = parse("--script", "train.py", "--train-steps", "12", "--nodes", "1", "--", "--lr", "0.05")
    written = tomllib.loads(spec.to_toml())
    assert "model" not in written and "data" not in written
    assert written["train"] == {"steps": 12, "pg_timeout_s": JobSpec().train.pg_timeout_s,
                                "hang_timeout_s": JobSpec().train.hang_timeout_s}
    assert written["workload"] == {"entry": "", "script": "train.py", "args": ["--lr", "0.05"]}
    assert {"resources", "profiler", "drills"} <= set(written)
    path = tmp_path / "spec.toml"
    path.write_text(spec.to_toml())
    assert load_spec(path).to_dict() == spec.to_dict()
    # the built-in trainer keeps every section
    builtin = tomllib.loads(parse("--model-arch", "resnet18").to_toml())
    assert builtin["model"]["arch"] == "resnet18" and builtin["data"]["batch_size"] == 32 and builtin["train"]["lr"] == 0.1


def test_an_old_spec_toml_of_a_user_script_with_builtin_sections_still_reads(tmp_path):
    """Run directories written before the split hold [model] and [data] (their defaults) for a script."""
    path = tmp_path / "spec.toml"
    path.write_text('[model]\narch = "resnet50"\n[data]\nbatch_size = 32\n[train]\nsteps = 7\nlr = 0.1\n'
                    '[workload]\nscript = "/x/train.py"\nargs = ["--lr", "0.05"]\n')
    spec = load_spec(path)
    assert spec.workload.script == "/x/train.py" and spec.train.steps == 7
    assert "model" not in spec.to_dict()


def test_builtin_trainer_flags_given_with_a_script_are_said_to_be_ignored(capsys):
    parse("--script", "train.py", "--data-batch-size", "16", "--train-lr", "0.5")
    err = capsys.readouterr().err
    assert "data.batch_size, train.lr set the built-in ResNet trainer only" in err and "--script train.py" in err
    parse("--data-batch-size", "16")
    assert "built-in ResNet trainer only" not in capsys.readouterr().err
