"""Issue 33, item 5: a Lightning script, written as its author writes it plus one callback
(hpcprof.frameworks.lightning.HpcprofCallback), gets a step record per optimizer step on every
rank, traces holding DDP's all-reduce, and an analysis with throughput; the Trainer's own
torch profiler keeps working; a failure leaves hpcprof's failure note."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("lightning")

from frameworks_common import allreduces_per_profiled_step, launch, optimizer_steps, the_run_dir  # noqa: E402

from hpcprof.analysis import analyze  # noqa: E402
from hpcprof.rundir import RunDir  # noqa: E402

MODULE = textwrap.dedent('''
    import json, sys
    import torch, torch.nn as nn
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset
    from hpcprof.frameworks.lightning import HpcprofCallback


    class Classifier(L.LightningModule):
        def __init__(self, fail_at_batch=None):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
            self.fail_at_batch = fail_at_batch

        def training_step(self, batch, batch_idx):
            if batch_idx == self.fail_at_batch:
                raise ValueError(f"bad batch {batch_idx}")
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)


    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(112, 32), torch.randint(0, 4, (112,))), batch_size=8)
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
''')

DDP_SCRIPT = MODULE + textwrap.dedent('''
    # 2 ranks: 56 samples, 7 batches of 8 per rank and epoch; two batches per optimizer step
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, accumulate_grad_batches=2,
                        callbacks=[HpcprofCallback()], **quiet)
    trainer.fit(Classifier(), data)
    with open(f"optimizer-steps-{trainer.global_rank}.json", "w") as fh:
        json.dump({"global_step": trainer.global_step}, fh)
''')


def test_a_lightning_ddp_run_gets_a_record_per_optimizer_step_traces_and_throughput(tmp_path):
    proc = launch(tmp_path, DDP_SCRIPT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(the_run_dir(tmp_path))
    for rank in (0, 1):
        recs = run.read_steps(rank)
        assert len(recs) == optimizer_steps(tmp_path, rank) == 12
        # an epoch's 7 batches make 4 optimizer steps: 2 + 2 + 2 batches, then the last one alone
        assert [r["batch_size"] for r in recs] == [16, 16, 16, 8] * 3
        assert all(r["forward_s"] > 0 and r["backward_s"] > 0 and r["optimizer_s"] > 0 for r in recs)
        profiled = [r["step"] for r in recs if r["profiled"]]
        assert profiled, "the default schedule traces steps 2 to 4"
        # DDP all-reduces the gradients once per optimizer step, in its backward (the other batch of
        # the step runs under no_sync): a record per batch would find steps without one
        assert allreduces_per_profiled_step(run.trace_path(rank), profiled, "backward") == {s: 1 for s in profiled}
    s = analyze(run.root, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1] and s["throughput"]["job"]["median_samples_per_s"] > 0
    assert s["run_state"]["state"] == "completed", s["run_state"]


PROFILER_SCRIPT = MODULE + textwrap.dedent('''
    from lightning.pytorch.profilers import PyTorchProfiler

    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=8, profiler=PyTorchProfiler(dirpath="lightning-prof"),
                        callbacks=[HpcprofCallback()], **quiet)
    trainer.fit(Classifier(), data)
    with open("optimizer-steps-0.json", "w") as fh:
        json.dump({"global_step": trainer.global_step}, fh)
''')


def test_the_trainers_pytorch_profiler_keeps_its_traces_and_hpcprof_keeps_its_records(tmp_path):
    proc = launch(tmp_path, PROFILER_SCRIPT, ranks=None)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # hpcprof's console lines ("hpcprof: ..."); the trainer's profiler table lists hpcprof's control
    # ranges ("hpcprof:control threads=...") among its rows, as any record_function of the process
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcprof: ")]
    assert len(said) == 1 and "PyTorchProfiler" in said[0] and "no traces" in said[0], said
    run = RunDir(the_run_dir(tmp_path))
    assert len(run.read_steps(0)) == optimizer_steps(tmp_path, 0) == 8
    assert not list(run.traces_dir.rglob("*.json*")), "hpcprof stepped aside from tracing"
    (lightning_trace,) = list((tmp_path / "lightning-prof").glob("*.pt.trace.json"))
    assert "ProfilerStep#" in lightning_trace.read_text()


FAILING_SCRIPT = MODULE + textwrap.dedent('''
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=20, accumulate_grad_batches=2,
                        callbacks=[HpcprofCallback()], **quiet)
    trainer.fit(Classifier(fail_at_batch=5), data)
''')


def test_an_error_in_training_step_leaves_the_failure_note_at_its_optimizer_step(tmp_path):
    proc = launch(tmp_path, FAILING_SCRIPT, ranks=None)
    assert proc.returncode != 0 and "bad batch 5" in proc.stderr
    run = RunDir(the_run_dir(tmp_path))
    (note,) = run.read_failures()
    # batches 4 and 5 make optimizer step 2: the note names it, the two steps before it are recorded
    assert note["rank"] == 0 and note["step"] == 2 and "bad batch 5" in note["error"]
    assert [r["step"] for r in run.read_steps(0)] == [0, 1]


def test_the_same_lightning_script_runs_under_hpcprof_submit(tmp_path):
    """Under ``hpcprof.submit --script`` the ranks start with torchrun's environment (RANK,
    LOCAL_RANK, TORCHELASTIC_RUN_ID...), so Lightning uses them as torchrun's workers instead of
    starting its own (which deadlocked until gloo's timeout)."""
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", "runs",
                           "--name", "lit", "--script", "train.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(tmp_path / "runs" / "lit")
    for rank in (0, 1):
        assert len(run.read_steps(rank)) == optimizer_steps(tmp_path, rank) == 12
    assert run.read_manifest()["attempts"][-1]["process_group"] == "script"


def test_a_lightning_script_without_the_callback_runs_in_zero_change_mode(tmp_path):
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(DDP_SCRIPT.replace("callbacks=[HpcprofCallback()], ", ""))
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", "runs",
                           "--name", "plain", "--script", "train.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(tmp_path / "runs" / "plain")
    for rank in (0, 1):  # one record per optimizer step, counted from the optimizer's own hook
        assert len(run.read_steps(rank)) == optimizer_steps(tmp_path, rank) == 12
    assert run.read_manifest()["attempts"][-1]["steps_source"] == "optimizer"
