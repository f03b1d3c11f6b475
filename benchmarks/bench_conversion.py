"""Conversion speed: ``TorchConverter`` against ``torch.export`` on a 4-layer tiny Llama.

``run(smoke)`` returns the rows of the report table (see ``timing.row``);
``python benchmarks/bench_conversion.py [--smoke]`` prints them. Target:
converting the raw ``torch.export.export`` output (preparation, lowering and
verification included) takes at most 0.3x as long as exporting the model,
measured in the same process after one warm-up of each.

The converter lowers the raw export as it is when it has a lowering for every
op (it does for Llama), so no decomposition is run. A second row converts a
program already decomposed with ``get_decomp_table()``; a third gives the
decomposition alone, which is what a conversion would cost on top of lowering
if the program had to be decomposed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import Plan, measure, row  # from benchmarks/, put on the path above

RATIO_TARGET = 0.3
LAYERS = 4
SEQUENCE = 16


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model.eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False, return_dict=True).logits


def tiny_llama() -> torch.nn.Module:
    """A 4-layer Llama with random weights (grouped-query attention, RoPE, SwiGLU)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return _Logits(LlamaForCausalLM(config))


def run(smoke: bool) -> list[dict[str, Any]]:
    """Export and conversion times of the tiny Llama; ``smoke`` times each once."""
    from coreai_torch import TorchConverter
    from coreai_torch.converter.decomp import decompose

    model = tiny_llama()
    ids = torch.randint(0, 256, (1, SEQUENCE), generator=torch.Generator().manual_seed(0))
    plan = Plan(warmup=1, reps=1 if smoke else 5, calls=1)

    def export() -> torch.export.ExportedProgram:
        return torch.export.export(model, (ids,))

    program = export()
    decomposed = decompose(program)

    def convert(ep: torch.export.ExportedProgram) -> None:
        TorchConverter().add_exported_program(ep).to_coreai()

    exporting = measure(export, plan)
    converting = measure(lambda: convert(program), plan)
    lowering = measure(lambda: convert(decomposed), plan)
    decomposing = measure(lambda: decompose(program), plan)
    target = f"<= {RATIO_TARGET:g}"
    ratio = converting.median / exporting.median
    lowering_ratio = lowering.median / exporting.median
    return [
        row(
            "conversion.llama4_raw",
            f"Convert {LAYERS}-layer tiny Llama (raw export) / torch.export time, s",
            converting.median,
            baseline=exporting.median,
            target=target,
            passed=ratio <= RATIO_TARGET,
            ours_best=converting.best,
            baseline_best=exporting.best,
        ),
        row(
            "conversion.llama4_decomposed",
            f"Convert {LAYERS}-layer tiny Llama (already decomposed) / torch.export time, s",
            lowering.median,
            baseline=exporting.median,
            target=target,
            passed=lowering_ratio <= RATIO_TARGET,
            ours_best=lowering.best,
            baseline_best=exporting.best,
        ),
        row(
            "conversion.llama4_decompose_only",
            f"run_decompositions(get_decomp_table()) of the {LAYERS}-layer Llama / export time, s",
            decomposing.median,
            baseline=exporting.median,
            ours_best=decomposing.best,
            baseline_best=exporting.best,
        ),
    ]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "pass" if value else "FAIL"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description="TorchConverter speed against torch.export")
    parser.add_argument("--smoke", action="store_true", help="time each step once")
    args = parser.parse_args()
    print("| metric | ours | baseline | ratio | target | pass/fail |")
    print("|---|---|---|---|---|---|")
    for r in run(args.smoke):
        cells = [r["metric"], r["ours"], r["baseline"], r["ratio"], r["target"], r["pass"]]
        print("| " + " | ".join(_cell(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
