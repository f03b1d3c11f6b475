"""``python -m coreai_torch convert``: a model file to a ``.aimodel`` asset.

The model file is a Python file that defines::

    def get_model() -> torch.nn.Module: ...
    def example_inputs() -> tuple[torch.Tensor, ...]: ...
    def dynamic_shapes(): ...          # optional, passed to torch.export.export

Every ``TorchMetalKernel`` defined at the top level of the file (or returned by
an optional ``kernels()`` function) is registered with the converter. The asset
is written by ``asset_writer.py``: staged beside the destination and renamed
into place, so an interrupted run never leaves a half-written asset behind, and
the staging directory of a killed run is removed by the next run. What is at
the destination is replaced only if it is a Core AI asset; anything else (a
file, another directory, a symbolic link) is refused before the model file runs.

Exit codes: 0 written; 1 the model file, the export or the conversion failed
(a model file that calls ``sys.exit`` or ``os._exit`` fails it), or the asset
could not be written; 2 bad command-line arguments, or a destination that is
not to be replaced.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..user_files import UserFileExited, exits_raise
from .asset_writer import AssetWriteError, destination_refusal, write_asset_atomically


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m coreai_torch convert",
        description="Export a PyTorch model and convert it, with its Metal kernels, to Core AI.",
    )
    parser.add_argument(
        "model_file", type=Path, help="Python file defining get_model() and example_inputs()"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="destination .aimodel directory (default: the model file's name with .aimodel)",
    )
    parser.add_argument(
        "--entrypoint",
        default="main",
        type=_entrypoint_name,
        help="entry point name (default: main)",
    )
    parser.add_argument("--input-names", help="comma-separated names of the model inputs")
    parser.add_argument("--output-names", help="comma-separated names of the model outputs")
    parser.add_argument(
        "--print-ir", action="store_true", help="print the converted program to stdout"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``convert`` command; returns the process exit code."""
    args = build_parser().parse_args(argv)
    output = args.output or args.model_file.with_suffix(".aimodel")
    if output.suffix != ".aimodel":
        print(f"error: the output must end in .aimodel, got {output}", file=sys.stderr)
        return 2
    refusal = destination_refusal(output)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    try:
        with exits_raise(args.model_file):
            module = _load_model_file(args.model_file)
            program, data_bytes = _convert(module, args)
    except _UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except UserFileExited as exited:
        print(
            f"error: {exited} before the model was converted; get_model(), example_inputs() "
            "and the model itself must return normally. Nothing was written.",
            file=sys.stderr,
        )
        return 1
    except Exception as error:  # a conversion failure: show it without a traceback wall
        print(f"error: converting {args.model_file} failed:\n{error}", file=sys.stderr)
        if os.environ.get("COREAI_TORCH_TRACEBACK"):
            traceback.print_exc()
        return 1
    if args.print_ir:
        print(program)
    try:
        write_asset_atomically(program, output, data_bytes)
    except AssetWriteError as error:
        print(f"error: {error.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {output}", file=sys.stderr)
    return 0


class _UserError(Exception):
    pass


def _entrypoint_name(text: str) -> str:
    from .converter import check_entrypoint_name

    try:
        return check_entrypoint_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load_model_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise _UserError(f"model file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"coreai_torch_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise _UserError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for required in ("get_model", "example_inputs"):
        if not callable(getattr(module, required, None)):
            raise _UserError(f"{path} must define a function {required}()")
    return module


def _kernels(module: ModuleType) -> list[Any]:
    from ..kernel import TorchMetalKernel

    if callable(getattr(module, "kernels", None)):
        return list(module.kernels())
    return [value for value in vars(module).values() if isinstance(value, TorchMetalKernel)]


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _convert(module: ModuleType, args: argparse.Namespace) -> tuple[Any, int]:
    import torch

    from .converter import TorchConverter

    model = module.get_model()
    inputs = module.example_inputs()
    if not isinstance(inputs, tuple):
        inputs = tuple(inputs) if isinstance(inputs, list) else (inputs,)
    dynamic = module.dynamic_shapes() if callable(getattr(module, "dynamic_shapes", None)) else None
    exported = torch.export.export(model.eval(), inputs, dynamic_shapes=dynamic)
    converter = TorchConverter().register_custom_kernels(_kernels(module))
    converter.add_exported_program(
        exported,
        input_names=_names(args.input_names),
        output_names=_names(args.output_names),
        entrypoint_name=args.entrypoint,
    )
    return converter.to_coreai(), _constant_bytes(exported)


def _constant_bytes(program: Any) -> int:
    """The size of the parameters, buffers and constants an asset of ``program`` stores."""
    tensors = [*program.state_dict.values(), *program.constants.values()]
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))
