// Metal's address-space words, for kernel code compiled by the CPU backend.
//
// The JIT's address-space pass (csrc/cpu/source_scan.h) turns `device T*`,
// `constant T*` and `threadgroup T*` into pointers tagged with their address
// space (address_space.h); what it leaves are these words on references,
// template arguments and member functions, where device and thread memory are
// ordinary memory and `constant` data is read-only. `threadgroup` is not a
// macro: the pass rewrites every use it understands (storage becomes
// `static thread_local`, private to the OS thread running the group), so a use
// it did not is a compile error rather than silently per-thread memory.
//
// Include it after the Metal library headers, which use these names freely.
#pragma once

#define device
#define constant const
#define thread

// `constant const T` and `static constant constexpr const T` (MLX's
// STEEL_CONST) are no duplicates in Metal, where constant is an address space.
#pragma clang diagnostic ignored "-Wduplicate-decl-specifier"
