"""coreai-opt's compressed models, converted and run in ``coreai.runtime``.

coreai-opt (a test dependency, installed without its ``[coreai]`` extra)
finalizes a model for Core AI with the modules and ``coreai::`` ops of
``coreai_torch._compression``; the converted program must compute what the
finalized PyTorch model computes, from the raw export and its decomposition,
and store the compressed data at its size. The programs compute in float32
from the same dequantized weights as PyTorch: they agree to about 3e-7 here,
so 1e-5 is a wide margin while a wrong scale or a misread 4-bit value (errors
of 1e-2 and more) fails.
"""

from __future__ import annotations

import doctest
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import coreai_torch._compression._intx
import coreai_torch._compression._types
import coreai_torch._compression.custom_layers
import coreai_torch._compression.utils
from coreai_torch.converter import TorchConverter
from coreai_torch.converter.decomp import decompose
from coreai_torch.runtime import run_program

from . import zoo

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torchao's notes about the torch version
    from coreai_opt.coreai_utils import (
        CompressionGranularity,
        DType,
        palettize_weights,
        quantize_weights,
        sparsify_weights,
    )
    from coreai_opt.palettization import KMeansPalettizer, KMeansPalettizerConfig
    from coreai_opt.pruning import MagnitudePruner, MagnitudePrunerConfig
    from coreai_opt.quantization import (
        ExecutionMode,
        ModuleQuantizerConfig,
        Quantizer,
        QuantizerConfig,
    )

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
MODES = ["int8", "int4", "int4_block", "w8a8", "palette4", "palette8", "prune50"]
# Largest asset of each mode, as a fraction of the float program's asset.
# The int4, palette4 and prune50 bounds hold only with 4-bit data and 1-bit
# masks: 8-bit data alone is 0.24 of the two-layer float asset, and byte
# masks would make the pruned asset 0.78 of it.
SIZE_BOUNDS = {
    "int8": 0.35,
    "int4": 0.23,
    "int4_block": 0.23,
    "w8a8": 0.40,
    "palette4": 0.22,
    "palette8": 0.37,
    "prune50": 0.60,
}


def _compress(mode: str, model: nn.Module, example: torch.Tensor) -> nn.Module:
    """``model`` finalized for Core AI by coreai-opt in ``mode`` (Linear layers only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode.startswith("palette"):
            presets = KMeansPalettizerConfig.presets
            config = presets.w4() if mode == "palette4" else presets.w8()
            compressor = KMeansPalettizer(model, config)
            compressor.prepare((example,))
            return compressor.finalize()
        if mode == "prune50":
            compressor = MagnitudePruner(model, MagnitudePrunerConfig())
            compressor.prepare((example,))
            compressor.step()
            return compressor.finalize()
        presets = ModuleQuantizerConfig.presets
        module_config = {
            "int8": presets.w8,
            "int4": presets.w4,
            "int4_block": presets.w4_per_block,  # blocks of 32
            "w8a8": ModuleQuantizerConfig,  # int8 weights and activations
        }[mode]()
        config = QuantizerConfig(
            global_config=None,
            module_type_configs={nn.Linear: module_config},
            execution_mode=ExecutionMode.EAGER,
        )
        quantizer = Quantizer(model, config)
        prepared = quantizer.prepare((example,))
        with quantizer.calibration_mode():
            prepared(example)
        return quantizer.finalize()


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(64, 96)
        self.second = nn.Linear(96, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def _asset_bytes(program: object, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    program.save_asset(directory / "model.aimodel")
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def _convert(program: torch.export.ExportedProgram) -> object:
    return (
        TorchConverter()
        .add_exported_program(program, input_names=["x"], output_names=["y"])
        .to_coreai()
    )


def _check_both_forms(model: nn.Module, x: torch.Tensor) -> dict[str, object]:
    want = model(x)
    raw = torch.export.export(model, (x,))
    programs = {}
    for form, program in (("raw", raw), ("decomposed", decompose(raw))):
        converted = programs[form] = _convert(program)
        torch.testing.assert_close(run_program(converted, {"x": x})["y"], want, **TOLERANCE)
    return programs


@pytest.fixture(scope="module")
def two_layers() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return TwoLayers().eval(), torch.randn(8, 64)


@pytest.fixture(scope="module")
def float_asset_bytes(two_layers, tmp_path_factory) -> int:
    model, x = two_layers
    program = _convert(torch.export.export(model, (x,)))
    return _asset_bytes(program, tmp_path_factory.mktemp("float"))


@pytest.mark.parametrize("mode", MODES)
def test_two_layers_every_mode(mode, two_layers, float_asset_bytes, tmp_path) -> None:
    model, x = two_layers
    torch.manual_seed(0)
    fresh = TwoLayers().eval()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        programs = _check_both_forms(_compress(mode, fresh, x), x)
    size = _asset_bytes(programs["raw"], tmp_path)
    assert size <= SIZE_BOUNDS[mode] * float_asset_bytes, (mode, size, float_asset_bytes)


@pytest.mark.parametrize("mode", MODES)
def test_transformers_decoder_every_mode(mode) -> None:
    model, (ids,) = zoo.BY_NAME["llama"].build()
    with torch.no_grad():
        finalized = _compress(mode, model, ids)
        want = finalized(ids)
        raw = torch.export.export(finalized, (ids,))
        for program in (raw, decompose(raw)):
            converted = _convert(program)
            torch.testing.assert_close(run_program(converted, {"x": ids})["y"], want, **TOLERANCE)


def test_stored_widths_and_the_users_program_is_left_alone(two_layers) -> None:
    model, x = two_layers
    torch.manual_seed(0)
    fresh = TwoLayers().eval()
    fresh.load_state_dict(model.state_dict())
    program = torch.export.export(_compress("int4", fresh, x), (x,))
    before = {name: (t.dtype, t.data_ptr()) for name, t in program.state_dict.items()}
    text = str(_convert(program))
    assert text.count("tensor<96x64xsi4>") >= 1 and text.count("tensor<48x96xsi4>") >= 1
    assert "xsi8>" not in text  # the int8 buffers holding the data are not stored
    after = {name: (t.dtype, t.data_ptr()) for name, t in program.state_dict.items()}
    assert after == before


def test_coreai_opt_ir_passes_run_on_converted_programs(two_layers, float_asset_bytes, tmp_path):
    """coreai-opt's IR passes compress a converted program; it still runs.

    The passes compress inside the IR, so there is no finalized PyTorch model
    to compare with: the result is compared with the float model within the
    error the compression allows (int8 per channel: well under 1e-2 here;
    int4, 16 palette entries and halving the weights: under 0.5).
    """
    model, x = two_layers
    program = _convert(torch.export.export(model, (x,)))
    with torch.no_grad():
        want = model(x)
    passes = {
        "int8": (lambda p: quantize_weights(p, DType.INT8), "blockwise_shift_scale", 0.35, 1e-2),
        "int4_block": (
            lambda p: quantize_weights(
                p, DType.INT4, granularity=CompressionGranularity.PER_BLOCK, block_size=16
            ),
            "blockwise_shift_scale",
            0.26,
            0.5,
        ),
        "palette4": (
            # One k-means worker: its pool of processes forked from pytest hangs.
            lambda p: palettize_weights(p, None, n_bits=4, num_kmeans_workers=1),
            "lut_to_dense",
            0.22,
            0.5,
        ),
        "prune50": (lambda p: sparsify_weights(p, 0.5), "sparse_with_bitmask_to_dense", 0.6, 0.5),
    }
    for name, (compress, op, size_bound, error_bound) in passes.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compressed = compress(program)
        assert f"coreai.{op}" in str(compressed), name
        got = run_program(compressed, {"x": x})["y"]
        assert (got - want).abs().max() < error_bound, name
        assert (got - want).abs().max() > 0, name  # the weights did change
        size = _asset_bytes(compressed, tmp_path / name)
        assert size <= size_bound * float_asset_bytes, (name, size)


def test_ops_match_hand_computed_values() -> None:
    ops = torch.ops.coreai
    data = torch.tensor([[-8, 7, 1, 0]], dtype=torch.int8)
    scale = torch.tensor([[0.5, 2.0]])  # one scale per block of two
    minval = torch.tensor([[1.0, -1.0]])
    # scale * (data - q_min) + minval with int4's q_min = -8
    got = ops.constexpr_blockwise_shift_scale(data, scale, None, minval, torch.int4)
    assert got.tolist() == [[1.0, 8.5, 17.0, 15.0]]
    q = ops.quantize(
        torch.tensor([[0.26, -1.0], [0.74, 2.0]]),
        torch.tensor([0.5, 0.25]),
        torch.int8,
        torch.tensor([1, 0], dtype=torch.int8),
        None,
        1,
    )
    assert q.tolist() == [[2, -4], [2, 8]]  # round half to even: 0.52 -> 1, 1.48 -> 1
    lut = torch.arange(8.0).reshape(1, 1, 4, 2)  # 4 entries of 2 values
    indices = torch.tensor([[3, 0]], dtype=torch.uint8)
    assert ops.lut_to_dense(indices, lut, 1).tolist() == [[6.0, 7.0, 0.0, 1.0]]
    with pytest.raises(NotImplementedError, match="fp4"):
        ops.constexpr_blockwise_shift_scale(
            torch.zeros(2, 2, dtype=torch.uint8), torch.ones(2, 1).to(torch.float8_e8m0fnu)
        )


def test_opcheck_and_docstrings() -> None:
    ops = torch.ops.coreai
    samples = [
        (
            ops.constexpr_blockwise_shift_scale,
            (torch.ones(4, 4, dtype=torch.int8), torch.ones(4, 2)),
        ),
        (ops.quantize, (torch.randn(3, 4), torch.rand(4) + 0.1, torch.int8, None, None, 1)),
        (ops.dequantize, (torch.ones(3, 4, dtype=torch.int8), torch.tensor(0.5))),
        (ops.lut_to_dense, (torch.zeros(2, 4, dtype=torch.uint8), torch.ones(1, 1, 4, 1), 0)),
        (ops.sparse_to_dense, (torch.ones(2), torch.tensor([1, 0, 1], dtype=torch.uint8))),
    ]
    for op, args in samples:
        torch.library.opcheck(op, args)
    for module in (
        coreai_torch._compression._intx,
        coreai_torch._compression._types,
        coreai_torch._compression.custom_layers,
        coreai_torch._compression.utils,
    ):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
