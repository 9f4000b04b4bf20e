"""FSDP2 training in the style of PyTorch's examples/distributed/FSDP2/example.py: LOCAL_RANK read
from the environment, its own process group, fully_shard on every block and on the model, a plain
loop. On CPU and gloo with a tiny model. It knows nothing of hpcprof.

    torchrun --nproc_per_node 2 fsdp2_example.py --steps 12
"""
import argparse
import os

import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


class Model(nn.Module):
    def __init__(self, dim=64, n_layers=2, vocab=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) for _ in range(n_layers))
        self.out = nn.Linear(dim, vocab)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def main(args):
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    torch.distributed.init_process_group(backend="gloo")
    torch.manual_seed(0)
    model = Model()
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x = torch.randint(0, 128, (args.batch_size, 16), device=device)
        loss = model(x).sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
        if rank == 0 and step % 4 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="PyTorch FSDP2 example")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=4)
    main(parser.parse_args())
