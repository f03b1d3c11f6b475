// MetalPerformancePrimitives for the CPU backend: not implemented.
//
// The buffer rendering always includes this header and says
// `using namespace mpp::tensor_ops;`, so the namespace has to exist at global
// scope. It is otherwise empty on purpose: the only declarations are poison
// names for the MPP entry points, so that a kernel which uses one fails to
// compile with a message that says why, instead of an unrelated lookup error.
#ifndef COREAI_MSL_METAL_PERFORMANCE_PRIMITIVES
#define COREAI_MSL_METAL_PERFORMANCE_PRIMITIVES

namespace mpp {
namespace tensor_ops {

// Any mention of these templates instantiates the static_assert below.
template <class... T>
struct coreai_mpp_unsupported {
  static_assert(sizeof...(T) < 0,
                "MetalPerformancePrimitives is not supported by the CPU backend of "
                "coreai_torch; run this kernel on an Apple GPU (MPS) or write the operation "
                "without mpp::tensor_ops");
};

template <class... T>
struct matmul2d_descriptor : coreai_mpp_unsupported<T...> {
  template <class... A>
  constexpr matmul2d_descriptor(A&&...) {}
};

// Used as matmul2d<descriptor, execution_simdgroups<N>>: a value, then types.
template <auto Descriptor, class... T>
struct matmul2d : coreai_mpp_unsupported<T...> {};

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
