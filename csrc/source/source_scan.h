// Text-level passes that turn a kernel's Metal source into the C++ the CPU
// backend compiles (docs/internals.md §3, docs/cpu.md). Every pass keeps each
// line where it was, so the compiler's #line-mapped messages still point at the
// user's own lines; comments, string and character literals are left alone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::source {

// All the passes below, in order, then the guards of the words Metal refuses
// (metal_fidelity.h, with_refused_word_guards): what translation_unit() compiles.
std::string metal_to_cpp(std::string_view source);

// Address spaces (coreai_msl/address_space.h). A pointer declarator
// `device T*`, `threadgroup T*` or `constant T*` (with any cv-qualifiers around
// the address space) becomes `::coreai::device_ptr<T>`, `threadgroup_ptr<T>` or
// `constant_ptr<const T>`, so overloads and specialisations per address space
// coexist; reinterpret_cast and its kin to such a type become
// ::coreai::pointer_cast. Storage `threadgroup T name[N]...;` becomes
// COREAI_THREADGROUP_STORAGE storage, which the target header defines (the
// CPU: `static thread_local`, private to the OS thread that runs the whole
// group; the GPU: shared memory), plus a `const ::coreai::threadgroup_ptr<...>`
// with the array's name; other threadgroup storage just becomes
// COREAI_THREADGROUP_STORAGE. On references,
// template arguments and member-function qualifiers `threadgroup` is dropped
// (`device` and `constant` are macros: nothing and const). The parameters of
// the `[[kernel]]` function keep plain pointers: the launcher binds them.
std::string rewrite_address_spaces(std::string_view source);

// Lockstep accesses (coreai_msl/fiber_runtime.h). Each access to threadgroup
// memory through a name the source declares as such (`threadgroup T a[N]`,
// `threadgroup T* p`, and `auto q = p + k`) is wrapped by the kind of access
// it is: `::coreai::tg_write(a)[i] = v` (an assignment), `tg_other(a)[i]`
// (a compound assignment, an increment, a member function call, an argument
// that a `threadgroup T&` parameter may bind), `tg_address(a)[i]` (under
// `&`), else `tg_read(a)[i]`. The wrappers are the identity on anything but a
// threadgroup pointer, so a name that means something else in another scope
// is harmless. Runs before rewrite_address_spaces, which drops the words.
std::string mark_threadgroup_accesses(std::string_view source);

// The accesses mark_threadgroup_accesses wraps: where the name is in the
// source and the kind of access (Address: `&t[i]`, no access).
struct ThreadgroupAccess {
  enum class Kind { Address, Read, Write, Other };
  size_t begin, end;  // the name's characters
  Kind kind;
};
std::vector<ThreadgroupAccess> find_threadgroup_accesses(std::string_view source);

// True if the source declares threadgroup storage (an array or a variable).
bool declares_threadgroup_storage(std::string_view source);

// Metal overloads functions on the address space of a reference or of the
// object (`T get() const thread` / `T get() const device`, `f(thread T&)` /
// `f(device T&)`); C++ cannot, and on the CPU one version serves objects in
// any memory. Of the versions of a function that differ only in such
// address-space words, the thread (or unqualified) one is kept, else the
// first; the others are removed. Pointer address spaces are types of their
// own (rewrite_address_spaces) and keep their overloads.
std::string drop_address_space_variants(std::string_view source);

// `namespace metal {` at the top level of the source (helper code adding to
// Metal's namespace, as MLX does) is dropped together with its closing brace:
// the whole kernel is already compiled inside namespace metal. For the same
// reason a global qualification of a namespace the source opens at its top
// level, `::c10::metal::opmath_t` (PyTorch's helpers write such names), becomes
// `::metal::c10::metal::opmath_t`.
std::string drop_metal_namespace_reopening(std::string_view source);

// Casts with Metal's meaning (coreai_msl/conversion.h). `(T)x`, where T is a
// Metal vector type, vec<...>, a typedef or alias, or a template type
// parameter, becomes `::coreai::cast_to<T>->*x`, and `(decltype(e))x` becomes
// `::coreai::cast_to<::std::remove_reference_t<decltype(e)>>->*x`; `T(args)`
// with T a typedef, alias, template type parameter or vec<...> becomes
// `::coreai::construct<T>(args)`. Vector operands then convert component by
// component where clang would reinterpret the bits.
std::string rewrite_conversions(std::string_view source);

// Directives Metal spells differently: `#pragma unroll full` becomes clang's
// `#pragma unroll`.
std::string rewrite_metal_pragmas(std::string_view source);

// Metal's function constants (`constant bool f [[function_constant(0)]];`) get
// their values when the host builds a pipeline, which TorchMetalKernel does not
// do: the attribute becomes an initialisation that fails to compile with a
// message naming function constants (coreai_msl/unavailable.h).
std::string refuse_function_constants(std::string_view source);

// Metal's half literals (`1.5h`, `2e-3h`) spelled as C++'s `_Float16` literals
// (`1.5f16`): the same value, rounded once to half. Directives are left alone.
std::string rewrite_half_literals(std::string_view source);

// True if the source calls a barrier, a SIMD-group or quad-group function
// (threadgroup_barrier, simd_*, quad_*, simdgroup_*), names a cooperative
// execution scope of MetalPerformancePrimitives (execution_simdgroup(s)), or
// declares threadgroup storage: such kernels need one fiber per thread.
bool needs_fibers(std::string_view source);

}  // namespace coreai_torch::source
