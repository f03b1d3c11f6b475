#include "cpu/debug_buffers.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

namespace coreai_torch::cpu {
namespace {

// Guard bytes on each side of a copy: a quarter of its size, at least a page
// (an index off by a few elements) and at most 16 MiB.
size_t guard_bytes(size_t bytes) {
  const size_t quarter = (bytes / 4 + 63) / 64 * 64;
  return std::clamp<size_t>(quarter, 4096, size_t{16} << 20);
}

// What guard memory holds: recognisable in a debugger, and no value a kernel
// should mistake for data (a NaN as float, a large negative int).
constexpr unsigned char kGuardByte = 0xFB;

struct Span {
  size_t tensor;  // index among the tensor arguments
  unsigned char* begin;
  unsigned char* end;
};

}  // namespace

DebugBuffers::DebugBuffers(const KernelRecord& record, const LaunchArgs& args) {
  std::vector<const at::Tensor*> tensors;
  for (const BoundArg& a : args.args) {
    if (a.kind == BoundArg::Kind::Tensor) tensors.push_back(&a.tensor);
  }
  pointers_.resize(tensors.size());
  checked_.resize(tensors.size());
  // The memory each tensor's elements span: element offsets [first, end).
  std::vector<Span> spans;
  for (size_t j = 0; j < tensors.size(); ++j) {
    const at::Tensor& t = *tensors[j];
    CheckedBuffer& c = checked_[j];
    c.name = record.tensor_names[j];
    c.element_bytes = static_cast<int64_t>(t.element_size());
    c.sizes = t.sizes().vec();
    c.strides = t.strides().vec();
    pointers_[j] = t.data_ptr();
    if (t.numel() == 0) continue;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t reach = (t.size(d) - 1) * t.stride(d);
      (reach < 0 ? c.first : c.end) += reach;
    }
    c.end += 1;
    auto* data = static_cast<unsigned char*>(t.data_ptr());
    spans.push_back({j, data + c.first * c.element_bytes, data + c.end * c.element_bytes});
  }
  // Overlapping spans share one copy.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size();) {
    size_t k = i + 1;
    unsigned char* end = spans[i].end;
    while (k < spans.size() && spans[k].begin < end) end = std::max(end, spans[k++].end);
    Copy copy{spans[i].begin, static_cast<size_t>(end - spans[i].begin), nullptr, 0};
    copy.guard = guard_bytes(copy.bytes);
    const size_t total = copy.bytes + 2 * copy.guard;
    copy.block = static_cast<unsigned char*>(std::aligned_alloc(64, (total + 63) / 64 * 64));
    TORCH_CHECK(copy.block != nullptr, "kernel '", record.name, "': debug mode cannot allocate ",
                total, " bytes for a guarded copy of its tensors");
    std::memset(copy.block, kGuardByte, copy.guard);
    std::memcpy(copy.block + copy.guard, copy.original, copy.bytes);
    std::memset(copy.block + copy.guard + copy.bytes, kGuardByte, copy.guard);
    for (size_t s = i; s < k; ++s) {
      const size_t j = spans[s].tensor;
      unsigned char* data = static_cast<unsigned char*>(tensors[j]->data_ptr());
      unsigned char* moved = copy.block + copy.guard + (data - copy.original);
      pointers_[j] = moved;
      CheckedBuffer& c = checked_[j];
      c.data = reinterpret_cast<uintptr_t>(moved);
      c.guard_begin = reinterpret_cast<uintptr_t>(copy.block);
      c.guard_end = reinterpret_cast<uintptr_t>(copy.block + total);
    }
    copies_.push_back(copy);
    i = k;
  }
  // Results are contiguous tensors of their own (launch.cpp allocates them).
  for (size_t j = tensors.size() - args.num_results; j < tensors.size(); ++j) {
    const at::Tensor& t = *tensors[j];
    results_.push_back(t.numel() == 0 ? t
                                      : at::from_blob(pointers_[j], t.sizes(), t.strides(),
                                                      t.options()));
  }
}

DebugBuffers::~DebugBuffers() {
  for (const Copy& c : copies_) std::free(c.block);
}

void DebugBuffers::copy_back() const {
  for (const Copy& c : copies_) std::memcpy(c.original, c.block + c.guard, c.bytes);
}

}  // namespace coreai_torch::cpu
