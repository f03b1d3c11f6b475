"""A TorchMetalKernel pickles by its definition: torch.save of a model that holds
one, torch.multiprocessing.spawn with one as an argument (TorchMetalKernel.__reduce__)."""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path

import torch
import torch.multiprocessing as mp
from support.spawned import KernelHolder, launch, run_unpickled

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.examples import torch_add

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


# The source adds one more than torch_defn: a result with it came from the
# kernel. A spawned process imports the helpers of support.spawned and
# torch_add's module, not this one, so it has to build the kernel from the pickle.
add_plus_one = TorchMetalKernel(
    "pickled_add_plus_one",
    ["x", "y"],
    ["output"],
    src="if (id < x.get_extent(0)) output[id] = x[id] + y[id] + 1;",
    torch_defn=torch_add,
    metal_params=ID,
)


def test_in_one_process_a_kernel_unpickles_as_itself() -> None:
    kernel = add_plus_one
    assert pickle.loads(pickle.dumps(kernel)) is kernel
    assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel
    buffer = io.BytesIO()
    torch.save(KernelHolder(kernel), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.kernel is kernel
    x = torch.arange(8.0)
    torch.testing.assert_close(loaded(x), 2 * x + 1, rtol=0, atol=0)  # exact: small integers


def test_a_spawned_process_builds_the_kernel_from_its_definition(tmp_path: Path) -> None:
    # The spawned process constructs the kernel from the pickle, compiles and
    # runs it; torch.load of the model then finds that same kernel.
    kernel = add_plus_one
    model_file, out_file = tmp_path / "model.pt", tmp_path / "out.pt"
    torch.save(KernelHolder(kernel), model_file)
    mp.spawn(run_unpickled, args=(kernel, str(model_file), str(out_file)), nprocs=1)
    out = torch.load(out_file)
    assert out["same_object"]
    x = torch.arange(8.0)
    torch.testing.assert_close(out["direct"], 2 * x + 1, rtol=0, atol=0)
    torch.testing.assert_close(out["model"], 2 * x + 1, rtol=0, atol=0)
    torch.testing.assert_close(launch(kernel, x, x), 2 * x + 1, rtol=0, atol=0)
