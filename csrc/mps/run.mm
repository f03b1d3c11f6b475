// coreai_torch::mps::run: encodes one launch on PyTorch's current MPS stream.
//
// The kernel joins the stream's shared compute encoder exactly as PyTorch's own
// Metal kernels do, so it is ordered with every ATen MPS op before and after it
// and no synchronisation is needed: the encoder is never ended, no other encoder
// is created, and nothing is committed or waited on here.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/mps/MPSDevice.h>
#include <ATen/mps/MPSStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <exception>
#include <string>

#include "specializations/launch_args.h"
#include "mps/launch_rules.h"
#include "mps/mps_backend.h"

namespace coreai_torch::mps {
namespace {

// setBytes:length:atIndex: is meant for data under 4 KB.
constexpr size_t kMaxInlineBytes = 4096;

// Metal's `int`, `float` and `bool` have these sizes; the scalar arguments are
// passed with setBytes using them.
static_assert(sizeof(int32_t) == 4 && sizeof(float) == 4 && sizeof(bool) == 1,
              "scalar sizes must match Metal's int, float and bool");

// The placeholder of buffer_binding (launch_rules.h): what a tensor with no
// MTLBuffer or no element is bound to, never nil (Metal's API validation
// aborts the process on a nil buffer binding). The kernel cannot read or write
// such a tensor, so one small buffer per process serves every such binding.
id<MTLBuffer> placeholder_buffer() {
  static id<MTLBuffer> buffer = [at::mps::MPSDevice::getInstance()->device()
      newBufferWithLength:16
                  options:MTLResourceStorageModeShared];
  TORCH_CHECK(buffer != nil, "coreai_torch: cannot allocate the MTLBuffer bound to empty tensors");
  return buffer;
}

std::string tensor_label(const KernelRecord& record, size_t ordinal, bool is_input) {
  std::string label = is_input ? "input '" : "result '";
  label += ordinal < record.tensor_names.size() ? record.tensor_names[ordinal] : "?";
  return label + "'";
}

void write_metal_strides(std::vector<int32_t>& meta, size_t offset,
                         const std::vector<int64_t>& strides) {
  const size_t rank = strides.size();
  for (size_t d = 0; d < rank; ++d) {
    meta[offset + rank + d] = static_cast<int32_t>(strides[rank - 1 - d]);
  }
}

// Checks every tensor and makes the inputs bindable (plan_input in
// launch_rules.h says which are copied and what strides their views get; the
// copies are encoded on the same stream, before the kernel). A 0-d input at a
// non-zero storage offset is copied to a fresh tensor: it is a `constant T&`
// argument, and Metal wants constant-address-space buffer offsets aligned far
// more strictly than an element. Results are ours and always contiguous.
void prepare_tensors(const KernelRecord& record, LaunchArgs& args) {
  const size_t first_result = args.args.size() - args.num_results;
  size_t ordinal = 0;
  for (size_t i = 0; i < args.args.size(); ++i) {
    BoundArg& arg = args.args[i];
    if (arg.kind != BoundArg::Kind::Tensor) {
      continue;
    }
    const bool is_input = i < first_result;
    at::Tensor& tensor = arg.tensor;
    TORCH_CHECK(tensor.defined() && tensor.is_mps(), "coreai_torch: kernel '", record.name,
                "': ", tensor_label(record, ordinal, is_input), " is on ",
                tensor.defined() ? tensor.device().str() : std::string("no device"),
                ", but this launch runs on MPS and needs every tensor on the mps device");
    TORCH_CHECK(tensor.numel() <= kMaxIndex, "coreai_torch: kernel '", record.name, "': ",
                tensor_label(record, ordinal, is_input), " has ", tensor.numel(),
                " elements; Metal tensors index with int, so the MPS backend takes fewer than "
                "2^31 elements per tensor");
    const int64_t rank = tensor.dim();
    if (rank == 0) {
      if (is_input && tensor.storage_offset() != 0) {
        tensor = tensor.clone();
      }
    } else if (is_input) {
      const auto meta_offset = static_cast<size_t>(record.layout.offsets[ordinal]);
      TORCH_INTERNAL_ASSERT(meta_offset + 2 * rank <= args.meta.size(), "kernel '", record.name,
                            "': the metadata buffer is shorter than its tensors need");
      const InputPlan plan = plan_input(tensor.sizes().vec(), tensor.strides().vec());
      if (plan.copy) {
        tensor = tensor.contiguous();
      }
      write_metal_strides(args.meta, meta_offset, plan.strides);
    } else {
      TORCH_INTERNAL_ASSERT(tensor.is_contiguous(), "kernel '", record.name, "': ",
                            tensor_label(record, ordinal, is_input),
                            " was allocated non-contiguous");
    }
    ++ordinal;
  }
}

void check_threadgroup(const KernelRecord& record, const LaunchArgs& args,
                       id<MTLComputePipelineState> pipeline) {
  const auto& group = args.group;
  const uint64_t threads = uint64_t{group[0]} * group[1] * group[2];
  const NSUInteger limit = pipeline.maxTotalThreadsPerThreadgroup;
  TORCH_CHECK_VALUE(threads >= 1 && threads <= limit, "coreai_torch: kernel '", record.name,
                    "': threads_per_thread_group (", group[0], ", ", group[1], ", ", group[2],
                    ") has ", threads, " threads, but this kernel's compiled pipeline runs 1 to ",
                    limit,
                    " threads per threadgroup on this GPU (Metal lowers the limit below ",
                    kMaxThreadsPerThreadgroup,
                    " for kernels that use many registers); use a smaller threadgroup");
}

// Nothing can be written when the grid is empty or every result is empty.
bool nothing_to_run(const LaunchArgs& args) {
  if (args.grid[0] == 0 || args.grid[1] == 0 || args.grid[2] == 0) {
    return true;
  }
  if (args.num_results == 0) {
    return false;
  }
  for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
    if (args.args[i].tensor.numel() != 0) {
      return false;
    }
  }
  return true;
}

// Binds the arguments in signature order (buffer index = position among the
// buffer parameters: inputs, results, then the metadata) and dispatches.
void encode_on(id<MTLComputeCommandEncoder> encoder, id<MTLComputePipelineState> pipeline,
               const LaunchArgs& args) {
  [encoder setComputePipelineState:pipeline];
  NSUInteger index = 0;
  for (const BoundArg& arg : args.args) {
    switch (arg.kind) {
      case BoundArg::Kind::Tensor: {
        const at::Tensor& tensor = arg.tensor;
        // An MPS storage's data pointer is its MTLBuffer.
        id<MTLBuffer> buffer = (__bridge id<MTLBuffer>)tensor.storage().data();
        const BufferBinding binding =
            buffer_binding(buffer != nil, tensor.numel(), tensor.storage_offset(),
                           static_cast<int64_t>(tensor.element_size()));
        [encoder setBuffer:binding.placeholder ? placeholder_buffer() : buffer
                    offset:static_cast<NSUInteger>(binding.offset)
                   atIndex:index];
        break;
      }
      case BoundArg::Kind::Int:
        [encoder setBytes:&arg.int_value length:sizeof(int32_t) atIndex:index];
        break;
      case BoundArg::Kind::Float:
        [encoder setBytes:&arg.float_value length:sizeof(float) atIndex:index];
        break;
      case BoundArg::Kind::Bool:
        [encoder setBytes:&arg.bool_value length:sizeof(bool) atIndex:index];
        break;
    }
    ++index;
  }
  [encoder setBytes:args.meta.data() length:args.meta.size() * sizeof(int32_t) atIndex:index];
  [encoder dispatchThreads:MTLSizeMake(args.grid[0], args.grid[1], args.grid[2])
      threadsPerThreadgroup:MTLSizeMake(args.group[0], args.group[1], args.group[2])];
}

void encode(id<MTLComputePipelineState> pipeline, const LaunchArgs& args) {
  at::mps::MPSStream* stream = at::mps::getCurrentMPSStream();
  TORCH_INTERNAL_ASSERT(stream != nullptr, "PyTorch has no current MPS stream");
  const LaunchArgs* launch = &args;
  // The stream's encoder may only be touched on the stream's serial queue. A
  // C++ exception must not unwind through libdispatch, so it is carried out of
  // the block and rethrown here.
  __block std::exception_ptr failure;
  dispatch_sync(stream->queue(), ^{
    @autoreleasepool {
      try {
        encode_on(stream->commandEncoder(), pipeline, *launch);
      } catch (...) {
        failure = std::current_exception();
      }
    }
  });
  if (failure) {
    std::rethrow_exception(failure);
  }
}

}  // namespace

void run(int64_t /*handle*/, const KernelRecord& record, LaunchArgs& args) {
  const std::string& unavailable = metal4_unavailable_reason();
  TORCH_CHECK(unavailable.empty(), "coreai_torch: kernel '", record.name,
              "' cannot run on MPS: ", unavailable);
  // A compute encoder's argument table has kMaxParameters buffer slots;
  // register_kernel refuses a record that needs more.
  TORCH_INTERNAL_ASSERT(args.args.size() + 1 <= static_cast<size_t>(kMaxParameters), "kernel '",
                        record.name, "': more buffers than Metal binds");
  TORCH_INTERNAL_ASSERT(!args.meta.empty() && args.meta.size() * sizeof(int32_t) < kMaxInlineBytes,
                        "kernel '", record.name, "': the metadata buffer has ", args.meta.size(),
                        " entries");
  TORCH_INTERNAL_ASSERT(args.num_results <= args.args.size(), "kernel '", record.name,
                        "': more results than arguments");

  prepare_tensors(record, args);
  id<MTLComputePipelineState> pipeline = pipeline_for(record).state;
  check_threadgroup(record, args, pipeline);
  if (nothing_to_run(args)) {
    return;
  }
  encode(pipeline, args);
}

}  // namespace coreai_torch::mps

// Introspection for tests and diagnostics:
//   torch.ops.coreai_torch.mps_compile_count()      -> int
//   torch.ops.coreai_torch.mps_unavailable_reason() -> str ("" when kernels can run)
//   torch.ops.coreai_torch.mps_cached_pipelines()   -> int
TORCH_LIBRARY_FRAGMENT(coreai_torch, m) {
  m.def("mps_compile_count() -> int",
        []() -> int64_t { return coreai_torch::mps::compile_count(); });
  m.def("mps_unavailable_reason() -> str",
        []() -> std::string { return coreai_torch::mps::metal4_unavailable_reason(); });
  m.def("mps_cached_pipelines() -> int",
        []() -> int64_t { return coreai_torch::mps::cached_pipelines(); });
}
