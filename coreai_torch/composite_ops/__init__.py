"""Reference PyTorch modules of Core AI's composite ops.

Each module computes one composite op (``rms_norm``, ``sdpa``, ``rope``,
``gather_mm``, ``gated_delta_update``) with the arguments and attributes of
Apple's ``coreai_torch.composite_ops``. Externalized with a composite name
(:class:`coreai_torch.ExternalizeSpec`), a module becomes a Core AI graph
carrying the composite declaration, with this computation as its body::

    from coreai_torch import ExternalizeSpec
    from coreai_torch.composite_ops import RMSNormImpl

    spec = ExternalizeSpec(RMSNormImpl, composite_op_name="rms_norm", composite_attrs=["eps"])

Used without externalizing, they are ordinary modules.
"""

from ._gated_delta_update import GatedDeltaUpdate
from ._gather_mm import GatherMM
from ._rms_norm import RMSNorm, RMSNormImpl
from ._rope import RoPE
from ._sdpa import SDPA

__all__ = ["SDPA", "GatedDeltaUpdate", "GatherMM", "RMSNorm", "RMSNormImpl", "RoPE"]
