"""Issue 33, item 5: a Hugging Face Trainer script, written as its author writes it plus one
callback (hpcprof.frameworks.transformers.HpcprofCallback), gets a step record per optimizer step
on every rank, traces holding DDP's all-reduce, and an analysis with throughput; with the callback
as a ``with`` around ``trainer.train()``, a failure leaves hpcprof's failure note. And the README's
recipe for a plain Accelerate loop."""

from __future__ import annotations

import textwrap

import pytest

from frameworks_common import allreduces_per_profiled_step, launch, optimizer_steps, the_run_dir

from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir
from hpcprof.rundir.state import run_state

MODEL = textwrap.dedent('''
    import json
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from hpcprof.frameworks.transformers import HpcprofCallback


    class RandomTokens(Dataset):
        def __init__(self, n, length=16, vocab=64):
            self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}


    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                       bos_token_id=0, eos_token_id=0))
    quiet = dict(use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
                 dataloader_num_workers=0)
''')

DDP_SCRIPT = MODEL + textwrap.dedent('''
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                             max_steps=12, learning_rate=1e-3, ddp_backend="gloo", ddp_find_unused_parameters=False,
                             **quiet)
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(200), callbacks=[HpcprofCallback()])
    trainer.train()
    with open(f"optimizer-steps-{args.process_index}.json", "w") as fh:
        json.dump({"global_step": trainer.state.global_step}, fh)
''')


def test_a_transformers_trainer_gets_a_record_per_optimizer_step_traces_and_throughput(tmp_path):
    pytest.importorskip("transformers")
    proc = launch(tmp_path, DDP_SCRIPT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(the_run_dir(tmp_path))
    for rank in (0, 1):
        recs = run.read_steps(rank)
        assert len(recs) == optimizer_steps(tmp_path, rank) == 12
        assert all(r["batch_size"] == 4 * 2 for r in recs)  # two micro-batches of 4 per optimizer step
        assert all(r["regions"]["forward_backward"] > 0 and r["optimizer_s"] > 0 for r in recs)
        profiled = [r["step"] for r in recs if r["profiled"]]
        assert profiled, "the default schedule traces steps 2 to 4"
        # DDP all-reduces once per optimizer step (the Trainer runs the first micro-batch under no_sync)
        reduces = allreduces_per_profiled_step(run.trace_path(rank), profiled, "forward_backward")
        assert reduces == {s: 1 for s in profiled}
    s = analyze(run.root, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1] and s["throughput"]["job"]["median_samples_per_s"] > 0
    assert s["throughput"]["job"]["batch"] == 2 * 8
    assert s["run_state"]["state"] == "completed", s["run_state"]


FAILING_SCRIPT = MODEL + textwrap.dedent('''
    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, **kwargs):
            if self.state.global_step == 3:
                raise ValueError("loss went wrong at optimizer step 3")
            return super().compute_loss(model, inputs, **kwargs)


    args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, max_steps=10, **quiet)
    with HpcprofCallback() as profiling:
        trainer = MyTrainer(model=model, args=args, train_dataset=RandomTokens(64), callbacks=[profiling])
        trainer.train()
''')


def test_an_error_in_trainer_train_leaves_the_failure_note_at_its_optimizer_step(tmp_path):
    pytest.importorskip("transformers")
    proc = launch(tmp_path, FAILING_SCRIPT, ranks=None)
    assert proc.returncode != 0 and "loss went wrong" in proc.stderr
    run = RunDir(the_run_dir(tmp_path))
    (note,) = run.read_failures()
    assert note["rank"] == 0 and note["step"] == 3 and "loss went wrong at optimizer step 3" in note["error"]
    assert [r["step"] for r in run.read_steps(0)] == [0, 1, 2]


ACCELERATE_SCRIPT = textwrap.dedent('''
    import json
    import torch, torch.nn as nn
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset
    import hpcprof

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = DataLoader(TensorDataset(torch.randn(128, 32), torch.randint(0, 4, (128,))), batch_size=8, shuffle=True)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)

    # --- the README's recipe: one hpcprof step per optimizer step, its micro-batches inside it
    epochs, updates = 2, 0
    steps_per_epoch = len(data) // accelerator.gradient_accumulation_steps
    with hpcprof.run(batch_size=8 * accelerator.gradient_accumulation_steps, steps=epochs * steps_per_epoch) as run:
        for epoch in range(epochs):
            batches = iter(data)
            for _ in range(steps_per_epoch):
                with run.step():
                    for _ in range(accelerator.gradient_accumulation_steps):
                        x, y = next(batches)
                        with accelerator.accumulate(model):
                            with run.region("forward"):
                                loss = nn.functional.cross_entropy(model(x), y)
                            with run.region("backward"):
                                accelerator.backward(loss)
                            with run.region("optimizer"):
                                optimizer.step()
                                optimizer.zero_grad()
                        updates += accelerator.sync_gradients
    with open(f"optimizer-steps-{accelerator.process_index}.json", "w") as fh:
        json.dump({"global_step": updates}, fh)
''')


def test_the_accelerate_recipe_gets_a_record_per_optimizer_step_on_every_rank(tmp_path):
    pytest.importorskip("accelerate")
    proc = launch(tmp_path, ACCELERATE_SCRIPT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(the_run_dir(tmp_path))
    for rank in (0, 1):
        recs = run.read_steps(rank)
        # 64 samples per rank and epoch: 8 batches of 8, 4 optimizer steps; 2 epochs
        assert len(recs) == optimizer_steps(tmp_path, rank) == 8 and all(r["batch_size"] == 16 for r in recs)
        profiled = [r["step"] for r in recs if r["profiled"]]
        assert allreduces_per_profiled_step(run.trace_path(rank), profiled, "backward") == {s: 1 for s in profiled}
    assert run_state(run.root).state == "completed"
