"""Conversion of exported PyTorch programs to Core AI (see ``README.md`` here)."""

import coreai.authoring  # noqa: F401  (coreai-core needs this before its dialect modules)

from .converter import TorchConverter
from .decomp import get_decomp_table
from .errors import UnsupportedOpsError
from .lowering_context import LoweringContext
from .registry import register_lowering

__all__ = [
    "LoweringContext",
    "TorchConverter",
    "UnsupportedOpsError",
    "get_decomp_table",
    "register_lowering",
]
