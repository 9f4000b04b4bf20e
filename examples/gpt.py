"""A small GPT-style language model trained with DDP or FSDP2, profiled by hpcprof: an example of
"your own training script" (README) that needs nothing of hpcprof but ``hpcprof.run()``.

    python -m hpcprof.submit --script examples/gpt.py --train-steps 40 -- --parallel ddp
    python -m hpcprof.submit --script examples/gpt.py --train-steps 40 -- --parallel fsdp
    torchrun --nproc-per-node 2 examples/gpt.py --parallel ddp       # without hpcprof's launcher

The model: token and position embeddings, a few pre-norm transformer blocks (causal self-attention,
MLP), tied output head. The data: token sequences generated in code from a fixed random bigram
table (a "language" with structure, so the loss falls), split between ranks by a
DistributedSampler. Runs on CPU (gloo) and on GPUs (NCCL) alike; FSDP2 (``fully_shard``) needs
torch >= 2.6 (it runs on gloo since then).

Everything hpcprof-specific is marked ``# hpcprof``: five lines and the regions.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import hpcprof  # hpcprof


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for m in self.modules():  # GPT-2's initialisation: small weights, logits near uniform at first
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class BigramText(Dataset):
    """Sequences drawn from a fixed random bigram table: next-token prediction can learn it. All
    sequences are drawn once, at construction, one token position at a time for all of them (seq + 1
    vectorised draws), so that loading a batch costs nothing: drawn item by item, 64 tokens at a time,
    the input pipeline took a third of every step and the example measured its own data loading."""

    def __init__(self, vocab: int, seq: int, size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        table = torch.softmax(3.0 * torch.randn(vocab, vocab, generator=g), dim=1)
        tokens = torch.empty(size, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(vocab, (size,), generator=g)
        for t in range(1, seq + 1):
            tokens[:, t] = torch.multinomial(table[tokens[:, t - 1]], 1, generator=g).squeeze(1)
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.tokens[i]


class TrainState:
    """What a requeued job needs back: weights, optimizer, and the loss history (checkpointed by
    hpcprof on preemption; with FSDP the full state is gathered on every rank, written by rank 0)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool):
        self.model, self.optimizer, self.fsdp = model, optimizer, fsdp
        self.losses: list[float] = []

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=opts)
        return {"model": model_sd, "optimizer": optim_sd, "losses": list(self.losses)}

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=StateDictOptions(full_state_dict=True))
        self.losses = list(state["losses"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank")
    args = p.parse_args(argv)

    with hpcprof.run(batch_size=args.batch) as run:  # hpcprof: rank, device, process group, run directory
        torch.manual_seed(0)
        model = GPT(args.vocab, args.seq, args.d_model, args.heads, args.layers).to(run.device)
        if args.parallel == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in model.blocks:
                fully_shard(block)
            net = fully_shard(model)
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP

            net = DDP(model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
        optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr)
        state = TrainState(net, optimizer, args.parallel == "fsdp")
        resumed = run.checkpoint(state)  # hpcprof: preemption saves it, a requeued job restores it
        data = BigramText(args.vocab, args.seq, size=64 * args.batch * run.world_size)
        loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers, drop_last=True,
                            sampler=DistributedSampler(data, run.world_size, run.rank, seed=0, drop_last=True))
        for tokens in run.steps(loader, total=run.total_steps):  # hpcprof: --train-steps steps, one record per step on every rank, drills, profiler
            with run.region("copy"):  # hpcprof: regions (copy, forward, backward, optimizer are known)
                tokens = tokens.to(run.device, non_blocking=True)
            with run.region("forward"):
                logits = net(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            with run.region("backward"):
                loss.backward()
            with run.region("grad_clip"):  # a region of your own: reported by name
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            with run.region("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            state.losses.append(float(loss.detach()))
        if run.rank == 0:
            first, last = state.losses[0], sum(state.losses[-5:]) / len(state.losses[-5:])
            print(f"gpt ({args.parallel}): {len(state.losses)} steps{' (resumed)' if resumed else ''}, loss "
                  f"{first:.3f} -> {last:.3f} (uniform: {math.log(args.vocab):.3f})", flush=True)


if __name__ == "__main__":
    main()
