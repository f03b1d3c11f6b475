"""Atomics under real contention, and the compile errors for what Metal does not allow."""

from __future__ import annotations

import pytest
from support.msl_harness import ON_GPU, compile_errors, run_checks

THREADS = 4
ITERATIONS = 20000

# Several OS threads hammer the same atomics, as threadgroups on different
# workers do with device memory.
GLOBALS = r"""
#include <thread>
#include <vector>
// The address-space word, as the CPU prelude defines it.
#define device
"""

BODY = rf"""
constexpr int threads = {THREADS}, iterations = {ITERATIONS};
atomic_int counter;
atomic_uint bits;
atomic_float total;
atomic_int low, high;
atomic_uint histogram[8];
atomic_int ticket;
atomic_store_explicit(&counter, 0, memory_order_relaxed);
atomic_store_explicit(&bits, 0u, memory_order_relaxed);
atomic_store_explicit(&total, 0.0f, memory_order_relaxed);
atomic_store_explicit(&low, 1 << 30, memory_order_relaxed);
atomic_store_explicit(&high, -(1 << 30), memory_order_relaxed);
atomic_store_explicit(&ticket, 0, memory_order_relaxed);
for (auto& bin : histogram) {{
  atomic_store_explicit(&bin, 0u, memory_order_relaxed);
}}
int cas_successes[threads] = {{}};
std::vector<std::thread> workers;
for (int t = 0; t < threads; ++t) {{
  workers.emplace_back([&, t] {{
    device atomic_int* counter_ptr = &counter;  // a device pointer parameter
    for (int i = 0; i < iterations; ++i) {{
      atomic_fetch_add_explicit(counter_ptr, 1, memory_order_relaxed);
      atomic_fetch_sub_explicit(&counter, i % 2, memory_order_relaxed);
      atomic_fetch_add_explicit(&total, 0.5f, memory_order_relaxed);
      atomic_fetch_min_explicit(&low, t * iterations + i, memory_order_relaxed);
      atomic_fetch_max_explicit(&high, t * iterations + i, memory_order_relaxed);
      atomic_fetch_add_explicit(&histogram[(t + i) % 8], 1, memory_order_relaxed);
      // A lock-free increment through compare-exchange.
      int expected = atomic_load_explicit(&ticket, memory_order_relaxed);
      while (!atomic_compare_exchange_weak_explicit(&ticket, &expected, expected + 1,
                                                    memory_order_relaxed, memory_order_relaxed)) {{
      }}
      ++cas_successes[t];
    }}
    atomic_fetch_or_explicit(&bits, 1u << t, memory_order_relaxed);
  }});
}}
for (auto& worker : workers) {{
  worker.join();
}}
emit("counter", atomic_load_explicit(&counter, memory_order_relaxed));
emit("total", atomic_load_explicit(&total, memory_order_relaxed));
emit("min_max", atomic_load_explicit(&low, memory_order_relaxed),
     atomic_load_explicit(&high, memory_order_relaxed));
emit("bits", atomic_load_explicit(&bits, memory_order_relaxed));
for (auto& bin : histogram) {{
  emit("histogram", atomic_load_explicit(&bin, memory_order_relaxed));
}}
emit("ticket", atomic_load_explicit(&ticket, memory_order_relaxed));

// Single-thread semantics of the remaining operations.
atomic_uint u;
atomic_store_explicit(&u, 0b1100u, memory_order_relaxed);
uint before_and = atomic_fetch_and_explicit(&u, 0b1010u, memory_order_relaxed);
uint before_xor = atomic_fetch_xor_explicit(&u, 0b0110u, memory_order_relaxed);
uint before_exchange = atomic_exchange_explicit(&u, 7u, memory_order_relaxed);
uint expected = 5u;
bool swapped = atomic_compare_exchange_weak_explicit(&u, &expected, 9u, memory_order_relaxed,
                                                     memory_order_relaxed);
emit("single", before_and, before_xor, before_exchange, swapped, expected,
     atomic_load_explicit(&u, memory_order_relaxed));
atomic_float f;
atomic_store_explicit(&f, 1.5f, memory_order_relaxed);
float f_before = atomic_fetch_sub_explicit(&f, 0.25f, memory_order_relaxed);
float f_swapped = atomic_exchange_explicit(&f, -2.0f, memory_order_relaxed);
emit("float_ops", f_before, f_swapped, atomic_load_explicit(&f, memory_order_relaxed));
// Threadgroup storage after the backend's rewrite: trivially constructible.
emit("trivial", std::is_trivially_default_constructible_v<atomic_int>, sizeof(atomic_uint),
     alignof(atomic_float));
"""


@pytest.fixture(scope="module")
def results() -> dict:
    if ON_GPU:
        pytest.skip(
            "host threads contend here; on the GPU, device and threadgroup atomics under "
            "contention are checked by kernels (tests/cpu/test_msl_kernels.py in device mode)"
        )
    # Host threads: no device code to check.
    return run_checks(BODY, globals_src=GLOBALS, extra_flags=("-pthread",), device_code=False)


def test_contended_atomics_lose_no_update(results: dict) -> None:
    # Each thread adds 1 per iteration and subtracts 1 on odd iterations.
    assert results["counter"] == [THREADS * (ITERATIONS - ITERATIONS // 2)]
    # 0.5 steps are exact in float up to 2^23, so the sum is exact.
    assert results["total"] == [0.5 * THREADS * ITERATIONS]
    assert results["min_max"] == [0, THREADS * ITERATIONS - 1]
    assert results["bits"] == [(1 << THREADS) - 1]
    assert results["histogram"] == [THREADS * ITERATIONS // 8] * 8
    assert results["ticket"] == [THREADS * ITERATIONS]


def test_single_thread_semantics(results: dict) -> None:
    # and: 1100 & 1010 = 1000; xor: 1000 ^ 0110 = 1110; exchange returns 1110;
    # compare-exchange of 7 against 5 fails and reports 7.
    assert results["single"] == [0b1100, 0b1000, 0b1110, 0, 7, 7]
    assert results["float_ops"] == [1.5, 1.25, -2.0]
    assert results["trivial"] == [1, 4, 4]


# Metal code that must not compile, and a word the error must name.
REJECTED = {
    "too_few_components": (
        "float4 v = float4(1.0f, 2.0f, 3.0f); (void)v;",
        "Metal vector constructor",
    ),
    "too_many_components": (
        "float2 v = float2(float2(1.0f), 1.0f); (void)v;",
        "Metal vector constructor",
    ),
    "vector_static_cast": ("float4 v = static_cast<float4>(int4(1)); (void)v;", "static_cast"),
    "implicit_vector_conversion": ("int4 i = int4(1); float4 v = i; (void)v;", "float4"),
    "as_type_size": ("uint u = as_type<uint>(half(1.0f)); (void)u;", "as_type"),
    "float_atomic_min": (
        "atomic_float f; atomic_fetch_min_explicit(&f, 1.0f, memory_order_relaxed);",
        "atomic_fetch_min_explicit",
    ),
    "atomic_of_short": ("atomic<short> s; (void)&s;", "metal::atomic<T>"),
    "copy_atomic": ("atomic_int a; atomic_int b = a; (void)&b;", "atomic"),
    "non_metal_math": ("float e = erf(1.0f); (void)e;", "Metal has no erf"),
    "c_float_math": ("float e = expf(1.0f); (void)e;", "Metal has no expf"),
}


# A kernel's own helper with the name of a C function Metal lacks is used.
HELPER_GLOBALS = r"""
namespace metal {
inline float log1p(float x) { return x + 100.0f; }
template <class T> T erf(T x) { return x + T(200); }
}
"""


def test_helpers_may_define_c_math_names_metal_lacks() -> None:
    got = run_checks('emit("helpers", log1p(1.0f), erf(2.0f), erf(half(3.0f)));', HELPER_GLOBALS)
    assert got["helpers"] == [101.0, 202.0, 203.0]


def test_unsupported_code_fails_to_compile_naming_the_problem() -> None:
    errors = compile_errors([body for body, _ in REJECTED.values()])
    for (name, (_, word)), error in zip(REJECTED.items(), errors, strict=True):
        assert "error" in error, name
        assert word in error, f"{name}: expected '{word}' in:\n{error}"


def test_function_constants_fail_to_compile_naming_them() -> None:
    # MSL specification, "Function Constants": their values come from the
    # pipeline the host builds, a step TorchMetalKernel does not have.
    (error,) = compile_errors(
        ["constant bool has_bias [[function_constant(3)]]; (void)has_bias;"], metal_passes=True
    )
    assert "Metal function constants ([[function_constant(index)]]) are not supported" in error
