"""A GPT training script in the style of nanoGPT's train.py (module-level configuration, the
environment read at import time, its own init_process_group, gradient accumulation, a module-level
loop with its own timer), on CPU and gloo with a tiny model. It knows nothing of hpcprof.

    torchrun --standalone --nproc_per_node=2 gpt_train.py --max_iters=30
"""
import os
import sys
import time
from ast import literal_eval

import torch
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
batch_size = 8
block_size = 32
n_embd = 64
vocab_size = 128
gradient_accumulation_steps = 2
learning_rate = 3e-3
max_iters = 30
log_interval = 1
eval_interval = 10
seed = 1337
backend = "gloo"
# poor man's configurator: --key=value overrides the globals above
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=")
    globals()[key] = literal_eval(val)
# -----------------------------------------------------------------------------

ddp = int(os.environ.get("RANK", -1)) != -1  # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = "cpu"
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
    device = "cpu"
torch.manual_seed(seed + seed_offset)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        logits = self.head(self.blocks(self.wte(idx)))
        loss = None
        if targets is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def get_batch():
    data = torch.randint(0, vocab_size, (batch_size, block_size + 1))
    return data[:, :-1], data[:, 1:]


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
if ddp:
    model = DDP(model)
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(4)
    for k in range(4):
        X, Y = get_batch()
        _, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


X, Y = get_batch()
t0 = time.time()
iter_num = 0
while True:
    if iter_num % eval_interval == 0 and master_process:
        print(f"step {iter_num}: val loss {estimate_loss():.4f}")
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms", flush=True)
    iter_num += 1
    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()
