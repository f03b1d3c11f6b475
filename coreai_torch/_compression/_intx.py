"""Sub-byte integers packed into bytes, the layout Core AI stores them in.

Values are laid out as one little-endian bit stream: the first value in the
lowest bits of the first byte, each next value in the bits above it, a value
that does not fit the rest of a byte continuing in the next one (6-bit values
span bytes). Negative values are stored in two's complement of ``nbits`` bits.
The last byte is padded with zero bits.

>>> import torch
>>> pack_intx(torch.tensor([-1, 2, -8], dtype=torch.int8), 4).tolist()
[47, 8]
>>> unpack_intx(torch.tensor([47, 8], dtype=torch.uint8), torch.Size([3]), 4).tolist()
[-1, 2, -8]
"""

from __future__ import annotations

import numpy as np
import torch


def pack_bits(values: np.ndarray, nbits: int) -> np.ndarray:
    """The low ``nbits`` bits of each value (two's complement for negative ones), packed."""
    as_bytes = values.astype(np.uint8).reshape(-1, 1)
    bits = np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :nbits]
    return np.packbits(bits.reshape(-1), bitorder="little")


def _check(data: torch.Tensor, nbits: int, low: int, high: int, what: str) -> np.ndarray:
    if not 1 <= nbits <= 8:
        raise ValueError(f"{what}: nbits must be 1 to 8, got {nbits}")
    values = data.detach().cpu().reshape(-1).to(torch.int16).numpy()
    if values.size and (values.min() < low or values.max() > high):
        raise ValueError(
            f"{what}: values must lie in [{low}, {high}] for {nbits} bits, got "
            f"[{values.min()}, {values.max()}]"
        )
    return values


def pack_uintx(uint8_data: torch.Tensor, nbits: int) -> torch.Tensor:
    """Unsigned ``nbits``-bit values (one per element) packed into a flat uint8 tensor."""
    values = _check(uint8_data, nbits, 0, (1 << nbits) - 1, "pack_uintx")
    return torch.from_numpy(pack_bits(values, nbits))


def pack_intx(int8_data: torch.Tensor, nbits: int) -> torch.Tensor:
    """Signed ``nbits``-bit values packed into a flat uint8 tensor (two's complement)."""
    low, high = -(1 << (nbits - 1)), (1 << (nbits - 1)) - 1
    values = _check(int8_data, nbits, low, high, "pack_intx")
    return torch.from_numpy(pack_bits(values, nbits))


def _unpacked(packed: torch.Tensor, count: int, nbits: int) -> np.ndarray:
    bits = np.unpackbits(packed.detach().cpu().numpy().astype(np.uint8), bitorder="little")
    if bits.size < count * nbits:
        raise ValueError(f"{packed.numel()} bytes hold fewer than {count} {nbits}-bit values")
    weights = (1 << np.arange(nbits)).astype(np.int16)
    return bits[: count * nbits].reshape(count, nbits).astype(np.int16) @ weights


def unpack_uintx(uint8_data: torch.Tensor, shape: torch.Size, nbits: int) -> torch.Tensor:
    """The inverse of :func:`pack_uintx`: uint8 values of ``shape``."""
    values = _unpacked(uint8_data, int(np.prod(shape, dtype=np.int64)), nbits)
    return torch.from_numpy(values.astype(np.uint8)).reshape(shape)


def unpack_intx(uint8_data: torch.Tensor, shape: torch.Size, nbits: int) -> torch.Tensor:
    """The inverse of :func:`pack_intx`: int8 values of ``shape``."""
    values = _unpacked(uint8_data, int(np.prod(shape, dtype=np.int64)), nbits)
    signed = np.where(values >= 1 << (nbits - 1), values - (1 << nbits), values)
    return torch.from_numpy(signed.astype(np.int8)).reshape(shape)
