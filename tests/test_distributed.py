"""Metal kernels under torch.distributed on the CPU: DistributedDataParallel
over gloo in two processes trains the demo's block (two RMSNorm kernels, with
autograd) to the parameters one process reaches over the same global batch,
eager and under torch.compile. The GPU parts (NCCL, FSDP2, cuda:N) are in
docs/cuda.md, "Distributed training"."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.multiprocessing as mp
from support.ddp_training import free_port, global_batches, new_model, train, train_ranks

# DDP averages the two ranks' gradients, each the mean over half the batch;
# one process takes the mean over the whole batch. The same sums in another
# order: float32 rounding (~1e-7 relative) per reduction, carried through three
# SGD steps, stays orders of magnitude below these bounds.
RTOL, ATOL = 1e-4, 1e-6


def test_ddp_over_gloo_trains_like_one_process_eager_and_compiled(tmp_path: Path) -> None:
    out_file = tmp_path / "ranks.pt"
    mp.spawn(train_ranks, args=(2, free_port(), str(out_file), ("eager", "compiled")), nprocs=2)
    ranks = torch.load(out_file)
    model = new_model()
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    alone = train(model, model, global_batches())
    for mode in ("eager", "compiled"):
        assert ranks[mode].keys() == alone.keys()
        for name, value in alone.items():
            # Training moved every parameter, so equality is not the start's.
            assert not torch.equal(value, start[name]), name
            torch.testing.assert_close(ranks[mode][name], value, rtol=RTOL, atol=ATOL, msg=name)
