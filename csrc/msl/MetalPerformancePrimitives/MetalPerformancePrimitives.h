// MetalPerformancePrimitives for the CPU backend: mpp::tensor_ops::matmul2d and
// the cooperative-tensor reductions (coreai_msl/mpp_matmul2d.h). The buffer
// rendering always includes this header and says `using namespace
// mpp::tensor_ops;`. convolution2d is not implemented: naming it fails to
// compile with a message that says so.
#ifndef COREAI_MSL_METAL_PERFORMANCE_PRIMITIVES
#define COREAI_MSL_METAL_PERFORMANCE_PRIMITIVES

#include "../coreai_msl/mpp_matmul2d.h"

namespace mpp {
namespace tensor_ops {

template <class... T>
struct coreai_mpp_unsupported {
  static_assert(sizeof...(T) < 0,
                "mpp::tensor_ops::convolution2d is not supported by the CPU backend of "
                "coreai_torch; run this kernel on an Apple GPU (MPS) or write the convolution "
                "with matmul2d or plain loops");
};

template <class... T>
struct convolution2d_descriptor : coreai_mpp_unsupported<T...> {
  template <class... A>
  constexpr convolution2d_descriptor(A&&...) {}
};

template <auto Descriptor, class... T>
struct convolution2d : coreai_mpp_unsupported<T...> {};

}  // namespace tensor_ops
}  // namespace mpp

#endif  // COREAI_MSL_METAL_PERFORMANCE_PRIMITIVES
