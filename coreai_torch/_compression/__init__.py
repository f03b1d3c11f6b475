"""Compressed weights: the ``coreai::`` compression ops and the modules that call them.

Apple's compression library, coreai-opt, finalizes a compressed model for Core
AI by replacing each compressed weight with a module of
``custom_layers`` (``WeightDequantizeModule``, ``PalettizeModule``,
``SparseModule``, ...) whose forward calls one of the ops
``coreai::constexpr_blockwise_shift_scale``, ``coreai::lut_to_dense``,
``coreai::sparse_to_dense``, ``coreai::quantize`` and ``coreai::dequantize``.
Its IR-level passes (``coreai_opt.coreai_utils``) compress an already
converted program with the packing helpers of ``_intx`` and the scalar types
of ``_types``. The names, schemas and meanings here are those of Apple's
``coreai-torch`` package, so coreai-opt runs against this one unchanged; the
converter lowers the ops to Core AI's compression ops
(``converter/ops/compression.py``).

Example::

    import torch
    import coreai_torch._compression.custom_layers  # registers torch.ops.coreai.*

    data = torch.tensor([[-8, 7], [1, 0]], dtype=torch.int8)
    weight = torch.ops.coreai.constexpr_blockwise_shift_scale(
        data, torch.tensor([[0.5], [2.0]]), input_dtype=torch.int4
    )  # tensor([[-4.0, 3.5], [2.0, 0.0]])
"""
