"""SIMD-group functions in divergent control flow, and SIMD-group lockstep.

Metal Shading Language specification, 6.9.2 "SIMD-Group Functions": a
SIMD-group function operates over the active threads of the SIMD-group, the
ones executing the call; a thread that control flow took elsewhere, or that
has returned, is inactive. Each test below launches one threadgroup of 32
threads (one SIMD-group, lane = thread index) and compares every lane's
result with the value computed by hand over the lanes that are active at that
call. Integer-valued floats keep every sum exact: tolerances are zero.
"""

from __future__ import annotations

import torch
from support.cpu_launch import Tensor, kernel

F32 = torch.float32
LANES = torch.arange(32)
IDS = [("id", "uint", "thread_position_in_grid"), ("lane", "uint", "thread_index_in_simdgroup")]


def run(name: str, src: str, x: torch.Tensor, outputs: int = 1, helper: str = "") -> list:
    names = ["out"] if outputs == 1 else [f"out{i}" for i in range(outputs)]
    k = kernel(name, [Tensor("x")], [Tensor(n) for n in names], src, IDS, helper=helper)
    return list(k(x, grid=(32, 1, 1), group=(32, 1, 1), shapes=[[32]] * outputs))


def test_two_call_sites_of_an_if_else_exchange_separately() -> None:
    x = (LANES % 7 + 1).to(F32)
    (out,) = run(
        "div_if_else",
        """
        if (lane < 10) { out[id] = simd_sum(x[id]); }
        else { out[id] = simd_sum(10.0f * x[id]); }
        """,
        x,
    )
    low, high = LANES < 10, LANES >= 10
    want = torch.where(low, x[low].sum(), 10 * x[high].sum())
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_nested_divergence() -> None:
    x = (LANES * 3 % 11).to(F32)
    (out,) = run(
        "div_nested",
        """
        float r;
        if (lane % 2 == 0) {
            if (lane < 16) { r = simd_sum(x[id]); }
            else { r = simd_max(x[id]); }
        } else {
            r = simd_prefix_exclusive_sum(x[id]);
        }
        out[id] = r;
        """,
        x,
    )
    even_low = (LANES % 2 == 0) & (LANES < 16)
    even_high = (LANES % 2 == 0) & (LANES >= 16)
    odd = LANES % 2 == 1
    # The exclusive prefix over the odd lanes only: x of the odd lanes below.
    odd_prefix = torch.cumsum(torch.where(odd, x, 0.0), 0) - torch.where(odd, x, 0.0)
    want = torch.where(even_low, x[even_low].sum(), torch.where(even_high, x[even_high].max(), 0))
    want = torch.where(odd, odd_prefix, want)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_loop_with_different_trip_counts_and_reconvergence() -> None:
    # Lane L runs L % 4 + 1 iterations. In iteration i the active lanes are the
    # ones with L % 4 >= i; after the loop all 32 lanes meet again.
    x = (LANES + 1).to(F32)
    out, counts = run(
        "div_loop",
        """
        float acc = 0.0f;
        float seen = 0.0f;
        for (uint i = 0; i < lane % 4 + 1; ++i) {
            acc += simd_sum(x[id] * float(i + 1));
            seen = seen * 100.0f + float(popcount(uint(uint64_t(simd_active_threads_mask()))));
        }
        out0[id] = acc + 1000.0f * simd_sum(1.0f);
        out1[id] = seen;
        """,
        x,
        outputs=2,
    )
    want = torch.zeros(32)
    want_seen = torch.zeros(32)
    for lane in range(32):
        for i in range(lane % 4 + 1):
            active = i <= LANES % 4
            want[lane] += (x[active] * (i + 1)).sum()
            want_seen[lane] = want_seen[lane] * 100 + int(active.sum())
    torch.testing.assert_close(out, want + 32000, rtol=0, atol=0)
    torch.testing.assert_close(counts, want_seen, rtol=0, atol=0)


def test_ballot_and_active_mask_in_divergent_code() -> None:
    x = torch.tensor([1.0 if (lane * 5) % 3 != 0 else -1.0 for lane in range(32)])
    ballot, mask = run(
        "div_ballot",
        """
        if (x[id] > 0.0f) {
            out0[id] = float(uint(uint64_t(simd_ballot(lane % 4 == 1))));
            out1[id] = float(uint(uint64_t(simd_active_threads_mask())));
        } else {
            out0[id] = float(uint(uint64_t(simd_ballot(true))));
            out1[id] = simd_all(lane % 3 == 0) ? 1.0f : 0.0f;
        }
        """,
        x,
        outputs=2,
    )
    taken = x > 0
    taken_bits = int(sum(1 << lane for lane in range(32) if taken[lane]))
    other_bits = int(sum(1 << lane for lane in range(32) if not taken[lane]))
    ones = int(sum(1 << lane for lane in range(32) if taken[lane] and lane % 4 == 1))
    # float holds these 32-bit masks only approximately: compare as float32, as the kernel does.
    want_ballot = torch.where(taken, float(ones), float(other_bits)).to(F32)
    # The else branch holds exactly the lanes L with 5L % 3 == 0, i.e. L % 3 == 0.
    want_mask = torch.where(taken, float(taken_bits), 1.0).to(F32)
    torch.testing.assert_close(ballot, want_ballot, rtol=0, atol=0)
    torch.testing.assert_close(mask, want_mask, rtol=0, atol=0)


def test_one_helper_called_from_two_sites() -> None:
    # The same helper (one source position) reached from both branches: its
    # two calls are different call sites, told apart by where they return to.
    x = (LANES % 5).to(F32)
    (out,) = run(
        "div_helper",
        """
        if (lane >= 20) { out[id] = total(x[id]); }
        else { out[id] = 100.0f + total(x[id] + 1.0f); }
        """,
        x,
        helper="float total(float v) { return simd_sum(v); }",
    )
    high = LANES >= 20
    want = torch.where(high, x[high].sum(), 100 + (x[~high] + 1).sum())
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_early_exit_and_barrier_in_divergent_code() -> None:
    # The lanes that take the first branch sum among themselves; the others
    # wait at the barrier, which waits only for threads still running (a
    # barrier outside uniform control flow is undefined on the GPU; the CPU
    # backend finishes the group instead of hanging).
    x = torch.ones(32)
    (out,) = run(
        "div_barrier",
        """
        if (lane < 16) { out[id] = simd_sum(x[id]); }
        else { threadgroup_barrier(mem_flags::mem_none); out[id] = 0.0f; }
        """,
        x,
    )
    torch.testing.assert_close(out, torch.where(LANES < 16, 16.0, 0.0), rtol=0, atol=0)


def test_lanes_pass_values_through_threadgroup_memory_in_lockstep() -> None:
    # No barrier between the write and the read: the GPU runs the lanes of a
    # SIMD-group in step, so every lane reads its neighbour's new value, and
    # lane 0 rewrites slot 0 only after lane 31 has read the old one (the
    # pattern of ggml's vector flash attention). Run one lane after another,
    # lane 1 would read slot 1 before lane 1 wrote it, and lane 31 would read
    # lane 0's -1.
    x = (LANES * 2 + 1).to(F32)
    (out,) = run(
        "lockstep_tg",
        """
        threadgroup float buf[32];
        buf[lane] = x[id];
        float v = buf[(lane + 1) % 32];
        if (lane == 0) { buf[0] = -1.0f; }
        out[id] = v;
        """,
        x,
    )
    torch.testing.assert_close(out, x.roll(-1), rtol=0, atol=0)
