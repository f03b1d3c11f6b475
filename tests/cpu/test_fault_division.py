"""Integer division by zero and INT_MIN / -1: defined results, never a trap.

A GPU does not trap on these and Metal leaves the results undefined; the CPU
backend gives AArch64's (docs/cpu.md): x / 0 = 0, x % 0 = x,
INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0. Debug mode reports them instead.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import coreai_torch._C as C
import pytest
import torch
from support.child_process import child_env, run

# (torch dtype name, Metal scalar type, Metal vector type of 4)
TYPES = [
    ("int8", "char", "char4"),
    ("uint8", "uchar", "uchar4"),
    ("int16", "short", "short4"),
    ("uint16", "ushort", "ushort4"),
    ("int32", "int", "int4"),
    ("uint32", "uint", "uint4"),
    ("int64", "long", "long4"),
    ("uint64", "ulong", "ulong4"),
]


def _operands(dtype: torch.dtype) -> tuple[list[int], list[int]]:
    info = torch.iinfo(dtype)
    if info.min < 0:
        return [7, -7, info.min, 5, info.min, 0, 9, -9], [0, 0, -1, 2, 0, -1, -4, 4]
    return [7, info.max, 5, 0, 9, 1, 200, 3], [0, 0, 2, 0, 4, 1, 7, 3]


def _expected(a: int, b: int, dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    if b == 0:
        return 0, a
    if a == info.min and b == -1 and info.min < 0:
        return info.min, 0
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C truncates toward zero
    return q, a - q * b


# Scalars, then the same elements as two 4-vectors; / and % side by side.
BODY = """
q[id] = a[id] / b[id];
r[id] = a[id] % b[id];
if (id < 2) {{
    const {vec} x = {vec}(a[4 * id], a[4 * id + 1], a[4 * id + 2], a[4 * id + 3]);
    const {vec} y = {vec}(b[4 * id], b[4 * id + 1], b[4 * id + 2], b[4 * id + 3]);
    const {vec} vq = x / y, vr = x % y;
    for (uint k = 0; k < 4; ++k) {{ vecq[4 * id + k] = vq[k]; vecr[4 * id + k] = vr[k]; }}
}}
"""

CHILD = """
import json, torch
from support.cpu_launch import Tensor, kernel
types = {types}
operands = {operands}
results = {{}}
for name, scalar, vec in types:
    dt = getattr(torch, name)
    k = kernel("div_" + scalar, [Tensor("a", dt), Tensor("b", dt)],
               [Tensor("q", dt), Tensor("r", dt), Tensor("vecq", dt), Tensor("vecr", dt)],
               {body!r}.format(vec=vec), [("id", "uint", "thread_position_in_grid")],
               debug={debug})
    a = torch.tensor(operands[name][0], dtype=dt)
    b = torch.tensor(operands[name][1], dtype=dt)
    try:
        outs = k(a, b, grid=(8, 1, 1), group=(8, 1, 1), shapes=[[8]] * 4)
        results[name] = [t.tolist() for t in outs]
    except RuntimeError as e:
        results[name] = str(e)
print(json.dumps(results))
"""


def _run_all(tmp_path: Path, debug: bool, types: list[tuple[str, str, str]]) -> dict:
    operands = {name: _operands(getattr(torch, name)) for name, _, _ in types}
    code = CHILD.format(types=types, operands=operands, body=BODY, debug=debug)
    return json.loads(run(code, child_env(tmp_path)).strip().splitlines()[-1])


def test_every_integer_width_divides_by_zero_without_a_trap(tmp_path: Path) -> None:
    results = _run_all(tmp_path, False, TYPES)
    for name, _, _ in TYPES:
        dtype = getattr(torch, name)
        a, b = _operands(dtype)
        want = [_expected(x, y, dtype) for x, y in zip(a, b)]
        q, r, vq, vr = results[name]
        assert q == [w[0] for w in want] and vq == q, (name, q, vq)
        assert r == [w[1] for w in want] and vr == r, (name, r, vr)


def test_debug_mode_names_the_kernel_and_the_source_line(tmp_path: Path) -> None:
    results = _run_all(tmp_path, True, [TYPES[4], TYPES[5], TYPES[6]])
    for name, scalar, _ in (TYPES[4], TYPES[5], TYPES[6]):
        message = results[name]
        assert isinstance(message, str), (name, message)
        # The first failing thread is id 0: 7 / 0 on line 2 of the body.
        assert message.startswith(
            f"kernel 'div_{scalar}': integer division or remainder by zero"
        ), message
        assert "at src:2:" in message and "(7 by 0, type " in message, message
        assert "thread_position_in_grid (0, 0, 0)" in message and "x / 0 = 0" in message


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 traps")
def test_debug_mode_reports_a_trapping_vector_division(tmp_path: Path) -> None:
    code = """
    import torch
    from support.cpu_launch import Tensor, kernel
    k = kernel("vec_div", [Tensor("a", torch.int32)], [Tensor("q", torch.int32)], '''
        const int4 x = int4(a[0], a[1], a[2], a[3]);
        const int4 q4 = x / int4(1, a[0], 1, 1);  // a[0] == 0
        q[id] = q4[id];''', [("id", "uint", "thread_position_in_grid")], debug=True)
    try:
        k(torch.arange(4, dtype=torch.int32), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    except RuntimeError as e:
        print(e)
    """
    out = run(code, child_env(tmp_path))
    assert "kernel 'vec_div': integer division or remainder by zero, or INT_MIN by -1, in a " in out
    # Debug mode runs every kernel in fiber mode, which also names the thread.
    assert "vector operation (threadgroup (0, 0, 0), the thread at thread_position_in_grid" in out


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 encodings")
@pytest.mark.parametrize(
    ("code", "regs", "changed", "length"),
    [
        # idiv ecx: INT_MIN / -1 (edx:eax sign-extended) -> eax INT_MIN, edx 0
        ("f7f9", {0: 0x80000000, 1: 0xFFFFFFFF, 2: 0xFFFFFFFF}, {0: 0x80000000, 2: 0}, 2),
        # div ecx by zero: eax 0, edx the dividend; a 32-bit write clears the upper half
        ("f7f1", {0: 0xDEAD00000000002A, 1: 0, 2: 0}, {0: 0, 2: 0x2A}, 2),
        # idiv rcx (REX.W): INT64_MIN / -1
        ("48f7f9", {0: 1 << 63, 1: (1 << 64) - 1, 2: (1 << 64) - 1}, {0: 1 << 63, 2: 0}, 3),
        # idiv r8d (REX.B) by zero
        ("41f7f8", {0: (1 << 32) - 7, 2: 0xFFFFFFFF, 8: 0}, {0: 0, 2: (1 << 32) - 7}, 3),
        # idiv cl: al = -128 sign-extended in ax, cl = -1 -> al -128, ah 0
        ("f6f9", {0: 0xFF80, 1: 0xFF}, {0: 0x0080}, 2),
        # div ah by zero (no REX: register 4 is ah): al 0, ah the old al
        ("f6f4", {0: 0x1100 | 0x00}, {0: 0x0000}, 2),
        # idiv sil (REX: register 6 is sil) by zero, upper bits of rax kept
        ("40f6fe", {0: 0xAB0000000000FF05, 6: 0}, {0: 0xAB00000000000500}, 3),
        # div cx (operand-size prefix) by zero: ax 0, dx the old ax, upper bits kept
        (
            "66f7f1",
            {0: 0x1111000000001234, 1: 0, 2: 0x2222000000000000},
            {0: 0x1111000000000000, 2: 0x2222000000001234},
            3,
        ),
    ],
)
def test_x86_division_is_completed_as_documented(
    code: str, regs: dict[int, int], changed: dict[int, int], length: int
) -> None:
    gpr = [0] * 16
    for i, v in regs.items():
        gpr[i] = v
    result = C._complete_x86_division(bytes.fromhex(code), gpr)
    assert result is not None
    out, size = result
    want = list(gpr)
    for i, v in changed.items():
        want[i] = v
    assert (out, size) == (want, length)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 encodings")
def test_x86_division_reads_memory_divisors_and_refuses_other_instructions() -> None:
    memory = torch.tensor([0, 0, 0, 0, -1, 0], dtype=torch.int32)
    base = memory.data_ptr()
    dividend = {0: 0x80000000, 2: 0xFFFFFFFF}
    cases = [
        ("f73e", {6: base}, 0),  # idiv dword [rsi] = 0
        ("f77e10", {6: base}, -1),  # idiv dword [rsi + 16] = -1 (disp8)
        ("f73c8e", {6: base, 1: 4}, -1),  # idiv dword [rsi + rcx * 4] (SIB)
        ("f7bc8e00000000", {6: base, 1: 1}, 0),  # [rsi + rcx * 4 + disp32]
    ]
    for code, regs, divisor in cases:
        gpr = [0] * 16
        for i, v in {**dividend, **regs}.items():
            gpr[i] = v
        out, size = C._complete_x86_division(bytes.fromhex(code), gpr)
        assert size == len(code) // 2, code
        # 0x80000000 / 0 -> (0, dividend); INT_MIN / -1 -> (INT_MIN, 0)
        assert (out[0], out[2]) == ((0, 0x80000000) if divisor == 0 else (0x80000000, 0)), code
    for other in ("f7d9", "f7e1", "0faf c1".replace(" ", ""), "90"):  # neg, mul, imul, nop
        assert C._complete_x86_division(bytes.fromhex(other), [0] * 16) is None, other
