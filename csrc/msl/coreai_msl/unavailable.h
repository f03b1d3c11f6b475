// C math names that Metal does not have, and Metal's function constants.
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
