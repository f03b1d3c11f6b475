"""What the distributed tests (tests/test_distributed.py, tests/cuda/
test_cuda_devices.py) run: a few SGD steps of the demo's transformer block,
whose RMSNorms are the Metal kernel `rms_norm`, in one process over a global
batch or in each rank of a process group over its share of that batch."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from coreai_torch.demo import TransformerBlock
from coreai_torch.examples import rms_norm

STEPS = 3
GLOBAL_BATCH, SEQ, DIM = 4, 8, 32
LR = 0.1


def global_batches(device: str = "cpu") -> list[torch.Tensor]:
    """The inputs of every step, the same in every process."""
    generator = torch.Generator().manual_seed(1)
    return [
        torch.randn(GLOBAL_BATCH, SEQ, DIM, generator=generator).to(device) for _ in range(STEPS)
    ]


def new_model(device: str = "cpu") -> TransformerBlock:
    torch.manual_seed(0)
    return TransformerBlock(dim=DIM, kernel=rms_norm).to(device)


def train(model: torch.nn.Module, forward, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """SGD on the mean of squares of the outputs; the trained parameters (on
    the CPU, whole: a sharded parameter is gathered first)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x in batches:
        optimizer.zero_grad()
        forward(x).pow(2).mean().backward()
        optimizer.step()
    whole = {}
    for name, p in model.named_parameters():
        value = p.detach()
        if hasattr(value, "full_tensor"):  # a DTensor shard of fully_shard
            value = value.full_tensor()
        whole[name] = value.cpu().clone()
    return whole


def free_port() -> int:
    """A TCP port nobody listens on now, for the process group's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_ranks(rank: int, world: int, port: int, out_file: str, modes: tuple[str, ...]) -> None:
    """One rank: trains on its contiguous share of each global batch, once per
    mode ("eager" and "compiled" DDP over gloo on the CPU; "nccl" and
    "nccl-compiled" DDP over NCCL and "fsdp2" (`fully_shard`) on GPU `rank`);
    rank 0 saves every mode's parameters."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    on_gpu = any(mode.startswith(("nccl", "fsdp")) for mode in modes)
    device = f"cuda:{rank}" if on_gpu else "cpu"
    if on_gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if on_gpu else "gloo", rank=rank, world_size=world)
    try:
        share = GLOBAL_BATCH // world
        batches = [x[rank * share : (rank + 1) * share] for x in global_batches(device)]
        results = {}
        for mode in modes:
            model = new_model(device)
            if mode == "fsdp2":
                from torch.distributed.fsdp import fully_shard

                forward = fully_shard(model)
            else:
                ddp = DistributedDataParallel(model, device_ids=[rank] if on_gpu else None)
                forward = torch.compile(ddp) if mode.endswith("compiled") else ddp
            results[mode] = train(model, forward, batches)
        if rank == 0:
            torch.save(results, Path(out_file))
    finally:
        dist.destroy_process_group()
