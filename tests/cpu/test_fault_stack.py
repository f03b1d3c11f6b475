"""Kernel stacks: large local arrays that fit run, frames that cannot fit are
refused, and an overflow or a bad access is an error instead of a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.child_process import child_env, run

GID = '[("id", "uint", "thread_position_in_grid")]'


def test_a_one_mib_local_array_runs_in_fiber_and_loop_mode(tmp_path: Path) -> None:
    # float buf[262144] is 1 MiB per thread: four times the default fiber
    # stack. Each thread fills it, so any overflow would corrupt or crash.
    out = run(
        f"""
        import torch
        from support.cpu_launch import Tensor, kernel
        for mode, barrier in (("fiber", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                              ("loop", "")):
            k = kernel("big_" + mode, [Tensor("x")], [Tensor("out")], '''
                float buf[262144];
                for (uint i = 0; i < 262144; ++i) buf[i] = x[id] + float(i);
                ''' + barrier + '''
                out[id] = buf[id] + buf[262143];''', {GID})
            x = torch.arange(128, dtype=torch.float32)
            (out,) = k(x, grid=(128, 1, 1), group=(64, 1, 1), shapes=[[128]])
            # buf[id] = x + id = 2 id and buf[262143] = id + 262143, all exact in fp32.
            assert torch.equal(out, 3 * x + 262143), (mode, out)
            print(mode, "ok")
        """,
        child_env(tmp_path),
    )
    assert out.split() == ["fiber", "ok", "loop", "ok"]


def test_a_loop_mode_frame_larger_than_the_thread_stack_runs_on_a_private_stack(
    tmp_path: Path,
) -> None:
    # 16 MiB per thread: more than an OS thread's stack (8 MiB by default).
    out = run(
        f"""
        import torch
        from support.cpu_launch import Tensor, kernel
        k = kernel("loop_16mib", [Tensor("x")], [Tensor("out")], '''
            float buf[4194304];
            for (uint i = 0; i < 4194304; ++i) buf[i] = x[id] + float(i);
            out[id] = buf[id] + buf[4194303];''', {GID})
        x = torch.arange(8, dtype=torch.float32)
        (out,) = k(x, grid=(8, 1, 1), group=(4, 1, 1), shapes=[[8]])
        assert torch.equal(out, 3 * x + 4194303), out
        print("ok")
        """,
        child_env(tmp_path),
    )
    assert out.split() == ["ok"]


def test_a_frame_that_cannot_fit_is_refused_with_its_size(tmp_path: Path) -> None:
    # 16 MiB per thread for 256 threads: 4 GiB of stacks, past the budget.
    out = run(
        f"""
        import torch
        from support.cpu_launch import Tensor, kernel
        k = kernel("huge_frame", [Tensor("x")], [Tensor("out")], '''
            float buf[4194304];
            for (uint i = 0; i < 4194304; ++i) buf[i] = x[id] + float(i);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            out[id] = buf[id];''', {GID})
        x = torch.zeros(256)
        try:
            k(x, grid=(256, 1, 1), group=(256, 1, 1), shapes=[[256]])
        except ValueError as e:
            print(e)
        # The same kernel with fewer threads per group fits.
        (out,) = k(x, grid=(256, 1, 1), group=(32, 1, 1), shapes=[[256]])
        assert torch.equal(out, torch.arange(256, dtype=torch.float32)), out
        """,
        child_env(tmp_path),
    )
    assert "kernel 'huge_frame' needs 16385 KiB of stack per thread" in out
    assert "a threadgroup of 256 threads" in out and "fewer threads per threadgroup" in out


@pytest.mark.parametrize("mode", ["fiber", "loop"])
def test_a_stack_overflow_is_an_error_and_the_process_goes_on(tmp_path: Path, mode: str) -> None:
    # A variable-length array (which the compiler cannot measure) of n floats:
    # n = 10^8 (400 MB) overflows any stack. Metal has no such arrays, so the
    # Metal fidelity check is turned off to let the CPU run it.
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);" if mode == "fiber" else ""
    out = run(
        f"""
        import torch
        from support.cpu_launch import Scalar, Tensor, kernel
        k = kernel("vla", [Tensor("x"), Scalar("n", "int")], [Tensor("out")], '''
            float buf[n];
            for (int i = 0; i < n; ++i) buf[i] = x[id] + float(i);
            {barrier}
            out[id] = buf[n - 1];''', {GID})
        x = torch.arange(64, dtype=torch.float32)
        try:
            k(x, 100_000_000, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
            print("no error")
        except RuntimeError as e:
            print(e)
        (out,) = k(x, 1000, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
        assert torch.equal(out, x + 999), out
        print("next call ok")
        """,
        child_env(tmp_path, COREAI_TORCH_METAL_FIDELITY="0"),
    )
    assert "kernel 'vla': a thread overflowed its stack (threadgroup (" in out
    assert "could not measure its frames" in out and "The launch was abandoned" in out
    if mode == "fiber":
        assert "the thread at thread_position_in_grid (" in out
    assert out.strip().endswith("next call ok")


def test_an_invalid_access_is_an_error_and_the_process_goes_on(tmp_path: Path) -> None:
    out = run(
        f"""
        import torch
        from support.cpu_launch import Scalar, Tensor, kernel
        k = kernel("wild", [Tensor("x"), Scalar("bad", "bool")], [Tensor("out")], '''
            // A thread pointer: the CPU backend keeps it a plain C++ pointer.
            thread const float* p = bad ? (thread const float*)16 : &x[0];
            out[id] = p[id] + 1.0f;''', {GID})
        x = torch.arange(64, dtype=torch.float32)
        try:
            k(x, True, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
        except RuntimeError as e:
            print(e)
        (out,) = k(x, False, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
        assert torch.equal(out, x + 1), out
        print("next call ok")
        """,
        child_env(tmp_path),
    )
    assert "kernel 'wild': invalid memory access at address 0x10 (threadgroup (0, 0, 0))" in out
    assert "debug mode" in out and out.strip().endswith("next call ok")
