// C math and C library names that Metal does not have, and Metal's function
// constants.
//
// The C math names: a kernel compiled inside namespace
// metal would otherwise reach the C library's global versions and compile on
// the CPU while failing on the GPU; these declarations make such a call a
// compile error that names the function. A kernel's own helper with one of
// these names (MLX writes its own log1p, for example) is still preferred: any
// non-template, or any template less general than a parameter pack, wins
// overload resolution against the deleted pack.
#pragma once

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wc++26-extensions"

namespace metal {

#define COREAI_MSL_NOT_IN_METAL(name)                                                   \
  template <class... Arguments>                                                         \
  void name(Arguments...) = delete("Metal has no " #name "; define it in helper_src " \
                                   "or use a Metal function");

COREAI_MSL_NOT_IN_METAL(erf)
COREAI_MSL_NOT_IN_METAL(erfc)
COREAI_MSL_NOT_IN_METAL(expm1)
COREAI_MSL_NOT_IN_METAL(log1p)
COREAI_MSL_NOT_IN_METAL(logb)
COREAI_MSL_NOT_IN_METAL(cbrt)
COREAI_MSL_NOT_IN_METAL(hypot)
COREAI_MSL_NOT_IN_METAL(lgamma)
COREAI_MSL_NOT_IN_METAL(tgamma)
COREAI_MSL_NOT_IN_METAL(remainder)
COREAI_MSL_NOT_IN_METAL(remquo)
COREAI_MSL_NOT_IN_METAL(nearbyint)
COREAI_MSL_NOT_IN_METAL(lround)
COREAI_MSL_NOT_IN_METAL(llround)
COREAI_MSL_NOT_IN_METAL(lrint)
COREAI_MSL_NOT_IN_METAL(llrint)
COREAI_MSL_NOT_IN_METAL(scalbn)
COREAI_MSL_NOT_IN_METAL(scalbln)
COREAI_MSL_NOT_IN_METAL(expf)
COREAI_MSL_NOT_IN_METAL(exp2f)
COREAI_MSL_NOT_IN_METAL(logf)
COREAI_MSL_NOT_IN_METAL(log2f)
COREAI_MSL_NOT_IN_METAL(sqrtf)
COREAI_MSL_NOT_IN_METAL(sinf)
COREAI_MSL_NOT_IN_METAL(cosf)
COREAI_MSL_NOT_IN_METAL(tanf)
COREAI_MSL_NOT_IN_METAL(tanhf)
COREAI_MSL_NOT_IN_METAL(powf)
COREAI_MSL_NOT_IN_METAL(fabsf)
COREAI_MSL_NOT_IN_METAL(floorf)
COREAI_MSL_NOT_IN_METAL(ceilf)
COREAI_MSL_NOT_IN_METAL(roundf)
COREAI_MSL_NOT_IN_METAL(fmaxf)
COREAI_MSL_NOT_IN_METAL(fminf)
COREAI_MSL_NOT_IN_METAL(fmodf)
COREAI_MSL_NOT_IN_METAL(fmaf)

#undef COREAI_MSL_NOT_IN_METAL

// The C library, which the CPU's standard headers declare at global scope and
// Metal does not have (MSL specification §1.5.4 "Restrictions": no C++
// standard library; Metal's own functions are those of namespace metal).
// Output, allocation, process control, random numbers and string handling:
// what a kernel ported from C might call. `::name(...)` is refused by the
// source check (csrc/cpu/metal_fidelity.h). Names that helper code may well
// use for a variable of its own (time, read, write, signal...) are left out:
// a variable at namespace scope cannot share its name with these.
#define COREAI_MSL_NO_C_LIBRARY(name)                                                        \
  template <class... Arguments>                                                              \
  void name(Arguments...) = delete("Metal has no C library and no " #name                   \
                                   " (MSL specification 1.5.4, Restrictions); write the "    \
                                   "result to a tensor, or use a function of namespace metal");

COREAI_MSL_NO_C_LIBRARY(printf)
COREAI_MSL_NO_C_LIBRARY(fprintf)
COREAI_MSL_NO_C_LIBRARY(sprintf)
COREAI_MSL_NO_C_LIBRARY(snprintf)
COREAI_MSL_NO_C_LIBRARY(puts)
COREAI_MSL_NO_C_LIBRARY(putchar)
COREAI_MSL_NO_C_LIBRARY(fputs)
COREAI_MSL_NO_C_LIBRARY(fopen)
COREAI_MSL_NO_C_LIBRARY(fclose)
COREAI_MSL_NO_C_LIBRARY(fread)
COREAI_MSL_NO_C_LIBRARY(fwrite)
COREAI_MSL_NO_C_LIBRARY(scanf)
COREAI_MSL_NO_C_LIBRARY(sscanf)
COREAI_MSL_NO_C_LIBRARY(perror)
COREAI_MSL_NO_C_LIBRARY(malloc)
COREAI_MSL_NO_C_LIBRARY(calloc)
COREAI_MSL_NO_C_LIBRARY(realloc)
COREAI_MSL_NO_C_LIBRARY(free)
COREAI_MSL_NO_C_LIBRARY(aligned_alloc)
COREAI_MSL_NO_C_LIBRARY(system)
COREAI_MSL_NO_C_LIBRARY(exit)
COREAI_MSL_NO_C_LIBRARY(_Exit)
COREAI_MSL_NO_C_LIBRARY(abort)
COREAI_MSL_NO_C_LIBRARY(atexit)
COREAI_MSL_NO_C_LIBRARY(getenv)
COREAI_MSL_NO_C_LIBRARY(rand)
COREAI_MSL_NO_C_LIBRARY(srand)
COREAI_MSL_NO_C_LIBRARY(qsort)
COREAI_MSL_NO_C_LIBRARY(bsearch)
COREAI_MSL_NO_C_LIBRARY(atoi)
COREAI_MSL_NO_C_LIBRARY(atof)
COREAI_MSL_NO_C_LIBRARY(strtol)
COREAI_MSL_NO_C_LIBRARY(strtod)
COREAI_MSL_NO_C_LIBRARY(memcpy)
COREAI_MSL_NO_C_LIBRARY(memmove)
COREAI_MSL_NO_C_LIBRARY(memset)
COREAI_MSL_NO_C_LIBRARY(memcmp)
COREAI_MSL_NO_C_LIBRARY(strlen)
COREAI_MSL_NO_C_LIBRARY(strcpy)
COREAI_MSL_NO_C_LIBRARY(strncpy)
COREAI_MSL_NO_C_LIBRARY(strcmp)
COREAI_MSL_NO_C_LIBRARY(strncmp)
COREAI_MSL_NO_C_LIBRARY(strcat)
COREAI_MSL_NO_C_LIBRARY(sleep)
COREAI_MSL_NO_C_LIBRARY(usleep)

#undef COREAI_MSL_NO_C_LIBRARY

}  // namespace metal

namespace coreai {

// Metal's function constants ([[function_constant(index)]], MSL specification
// "Function Constants") take their values when the host builds a pipeline,
// which TorchMetalKernel does not do. The CPU passes turn the attribute into
// an initialisation from this object (refuse_function_constants in
// csrc/cpu/source_scan.h), which fails to compile with this message.
struct function_constant_unsupported {
  template <class T>
  constexpr operator T() const {
    static_assert(sizeof(T) == 0,
                  "Metal function constants ([[function_constant(index)]]) are not supported: "
                  "TorchMetalKernel sets no pipeline constants; make the value a constexpr in "
                  "helper_src or a kernel argument");
    return T{};
  }
};

}  // namespace coreai

#pragma clang diagnostic pop
