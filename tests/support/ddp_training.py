"""What the distributed tests (tests/test_distributed.py) run: a few SGD steps of
the demo's transformer block, whose RMSNorms are the Metal kernel `rms_norm`,
in one process over a global batch or in each rank of a gloo process group
over its share of that batch."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from coreai_torch.demo import TransformerBlock
from coreai_torch.examples import rms_norm

STEPS = 3
GLOBAL_BATCH, SEQ, DIM = 4, 8, 32
LR = 0.1


def global_batches() -> list[torch.Tensor]:
    """The inputs of every step, the same in every process."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(GLOBAL_BATCH, SEQ, DIM, generator=generator) for _ in range(STEPS)]


def new_model() -> TransformerBlock:
    torch.manual_seed(0)
    return TransformerBlock(dim=DIM, kernel=rms_norm)


def train(model: torch.nn.Module, forward, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """SGD on the mean of squares of the outputs; the trained parameters."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x in batches:
        optimizer.zero_grad()
        forward(x).pow(2).mean().backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def train_ranks(rank: int, world: int, port: int, out_file: str) -> None:
    """One rank: trains under DDP (eager, then under torch.compile) on its
    contiguous share of each global batch; rank 0 saves both results."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        share = GLOBAL_BATCH // world
        batches = [x[rank * share : (rank + 1) * share] for x in global_batches()]
        results = {}
        for mode in ("eager", "compiled"):
            model = new_model()
            ddp = DistributedDataParallel(model)
            forward = torch.compile(ddp) if mode == "compiled" else ddp
            results[mode] = train(model, forward, batches)
        if rank == 0:
            torch.save(results, Path(out_file))
    finally:
        dist.destroy_process_group()
