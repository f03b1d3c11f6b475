"""Address spaces as Metal types them, and helper code that reopens namespace metal.

In Metal `device T*`, `threadgroup T*`, `constant T*` and `thread T*` are
distinct types (MSL specification, "Address Spaces"): overloads and template
specialisations may differ only in them, a `const device T*` parameter deduces
T from a `device T*` argument, the name of a threadgroup array is a threadgroup
pointer, and a pointer cannot be cast to another address space. Real helper
code relies on each (MLX's steel/utils/type_traits.h specialises
pointer_element per address space; its loaders overload device and
threadgroup sources). The CPU backend keeps the address space in the pointer
type (coreai_msl/address_space.h, csrc/cpu/address_spaces.cpp).
"""

from __future__ import annotations

import pytest
from support.msl_harness import compile_errors, run_checks

HELPERS = r"""
namespace metal {
// As in MLX's steel/utils/type_traits.h.
template <typename T> struct pointer_element {};
template <typename T> struct pointer_element<thread T*> {
  using type = remove_cv_t<T>; static constexpr int space = 0; };
template <typename T> struct pointer_element<device T*> {
  using type = remove_cv_t<T>; static constexpr int space = 1; };
template <typename T> struct pointer_element<constant T*> {
  using type = remove_cv_t<T>; static constexpr int space = 2; };
template <typename T> struct pointer_element<threadgroup T*> {
  using type = remove_cv_t<T>; static constexpr int space = 3; };
template <typename T> using pointer_element_t = typename pointer_element<remove_cv_t<T>>::type;
}  // namespace metal

namespace metal::detail_test {
inline int answer() { return 42; }
}

template <typename T> int which(thread T*) { return 0; }
template <typename T> int which(const device T*) { return 1; }
template <typename T> int which(constant T*) { return 2; }
template <typename T> int which(threadgroup T*) { return 3; }

float first(const device float* p) { return p[0]; }
float first(const threadgroup float* p) { return p[0] + 1000.0f; }

template <typename T>
T sum3(const device T* p) { return p[0] + p[1] + p[2]; }

struct block { half d; uchar qs[4]; };
float decode(device const block* b, short i) { return float(b->d) * float(b->qs[i]); }

constant float table[4] = {1.0f, 2.0f, 4.0f, 8.0f};
"""

BODY = r"""
float storage[8] = {1, 2, 3, 4, 5, 6, 7, 8};
device float* d = storage;
const device float* cd = d;                // to a pointer to const
constant float* c = table;
threadgroup float tile[4][2];
tile[0][0] = 3; tile[1][0] = 9; tile[1][1] = 10;
threadgroup float* t = &tile[0][0];
float local = 5;
thread float* p = &local;
emit("which", which(p), which(d), which(cd), which(c), which(t), which(tile[1]));
emit("element", pointer_element<device half*>::space, pointer_element<threadgroup int*>::space,
     pointer_element<constant float*>::space, pointer_element<thread uint*>::space,
     is_same_v<pointer_element_t<const device half*>, half>);
emit("overload", first(d), first(t));
emit("tile", first(tile[1]), tile[1][1], first(tile[0]), which(tile[2] + 1));
emit("deduce", sum3(d), sum3(d + 2));
emit("arith", *(d + 3), d[5], (d + 6) - d, (d + 1) > d, d == cd, d != nullptr, bool(d));
device float *a = d + 1, *b = d + 2;
emit("two", *a, *b);
device float4* v = (device float4*)d;
emit("cast", v[1], *reinterpret_cast<device float2*>(d + 6), ((device const uchar*)d)[3]);
device block* blk = (device block*)storage;
blk->d = half(0.5f); blk->qs[2] = 6;
emit("struct", decode(blk, 2));
emit("constant", c[3], table[2]);
emit("namespace", detail_test::answer());
int n = 0; for (device float* it = d; it != d + 8; ++it) n += int(*it);
emit("loop", n);
// A float4 at an address that is only float-aligned, as llama.cpp's
// kernel_mul_mm stores rows of any length: device memory makes no promise.
float row[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
device float4* unaligned = (device float4*)(row + 1);
unaligned[1] = unaligned[0] * 2.0f;
emit("unaligned", row[5], row[8], (*unaligned).w);
"""


@pytest.fixture(scope="module")
def got() -> dict:
    return run_checks(BODY, helpers=HELPERS, metal_passes=True)


def test_overloads_and_specialisations_per_address_space(got: dict) -> None:
    assert got["which"] == [0, 1, 1, 2, 3, 3]
    assert got["element"] == [1, 3, 2, 0, 1]
    assert got["overload"] == [1.0, 1003.0]


def test_threadgroup_arrays_and_their_rows_are_threadgroup_pointers(got: dict) -> None:
    assert got["tile"] == [1009.0, 10.0, 1003.0, 3]


def test_pointer_operations(got: dict) -> None:
    assert got["deduce"] == [6.0, 12.0]
    assert got["arith"] == [4.0, 6.0, 6, 1, 1, 1, 1]
    assert got["two"] == [2.0, 3.0]
    # float4 at index 1 is storage[4:8]; the uchar view reads the top byte of 1.0f.
    assert got["cast"] == [5.0, 6.0, 7.0, 8.0, 7.0, 8.0, 0x3F]
    assert got["struct"] == [3.0]
    assert got["constant"] == [8.0, 4.0]
    assert got["loop"] == [36]
    assert got["unaligned"] == [2.0, 8.0, 4.0]


def test_namespace_metal_reopened_in_helper_code(got: dict) -> None:
    assert got["namespace"] == [42]


def test_what_metal_refuses_is_refused() -> None:
    errors = compile_errors(
        [
            # No conversion between address spaces, explicit or implicit.
            "device float* d = nullptr; threadgroup float* t = (threadgroup float*)d;",
            "device float* d = nullptr; threadgroup float* t = d;",
            # constant memory is read-only.
            "constant float* c = nullptr; c[0] = 1.0f;",
            # A device pointer is not a thread pointer.
            "float x = 0; device float* d = &x; float* p = d;",
        ],
        metal_passes=True,
    )
    assert "cannot be cast to another address space" in errors[0]
    assert "no viable conversion" in errors[1]
    assert "read-only" in errors[2] or "const" in errors[2]
    assert "no viable conversion" in errors[3]
