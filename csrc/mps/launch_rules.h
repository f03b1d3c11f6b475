// What the MPS backend decides without Metal: which inputs are copied before
// they are bound and the strides their views are given, where a tensor is
// bound, which failed compiles are remembered, and what a user whose process
// cannot run Metal 4 kernels is told. Plain C++, so that
// tests/mps/test_mps_launch_rules.py checks every rule on any machine; the .mm
// files gather the facts from Metal and apply the answers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "contract/contract.h"

namespace coreai_torch::mps {

// Metal tensor extents, strides and the kernel's index arithmetic are `int`.
inline constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

// ------------------------------------------------------------------ inputs

// How an input of rank >= 1 is bound: copied to a contiguous tensor first or
// not, and the strides (torch order, in elements) its view is given.
struct InputPlan {
  bool copy = false;
  std::vector<int64_t> strides;
};

// A dimension of size 1 is only ever read at index 0, so any stride serves it;
// it is stated as 1, which keeps the layout positive and non-overlapping.
inline std::vector<int64_t> stated_strides(const std::vector<int64_t>& sizes,
                                           std::vector<int64_t> strides) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) strides[d] = 1;
  }
  return strides;
}

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(sizes[d], 1);
  return strides;
}

// Whether a Metal tensor_inline view can take this layout as it is. Metal
// tensors take their layout from C++ mdspan's layout_stride, whose mapping
// requires every stride positive and the elements not to overlap (some order
// of the dimensions in which each stride is at least the previous stride times
// the previous extent); every Metal example found uses a unit innermost
// stride. A broadcast (stride 0) and any overlapping view are copied until a
// Mac shows Metal takes them (docs/mps.md). The span must stay within `int`.
inline bool bindable_as_is(const std::vector<int64_t>& sizes,
                           const std::vector<int64_t>& strides) {
  const size_t rank = sizes.size();
  if (strides[rank - 1] != 1) return false;
  int64_t span = 1;
  std::vector<size_t> order;
  for (size_t d = 0; d < rank; ++d) {
    if (strides[d] <= 0) return false;
    span += (sizes[d] - 1) * strides[d];
    order.push_back(d);
  }
  if (span > kMaxIndex) return false;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return strides[a] != strides[b] ? strides[a] < strides[b] : sizes[a] < sizes[b];
  });
  for (size_t i = 1; i < rank; ++i) {
    if (strides[order[i]] < strides[order[i - 1]] * sizes[order[i - 1]]) return false;
  }
  return true;
}

// The plan for an input of rank >= 1 with these torch sizes and strides.
inline InputPlan plan_input(const std::vector<int64_t>& sizes,
                            const std::vector<int64_t>& strides) {
  const bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
  // An empty input is never read: it keeps its memory and gets packed strides.
  if (empty) return {false, stated_strides(sizes, contiguous_strides(sizes))};
  std::vector<int64_t> stated = stated_strides(sizes, strides);
  if (bindable_as_is(sizes, stated)) return {false, stated};
  return {true, stated_strides(sizes, contiguous_strides(sizes))};
}

// ----------------------------------------------------------------- binding

// Where a tensor's buffer argument points. A tensor without an MTLBuffer (an
// empty tensor whose storage has no memory) and any tensor with no element are
// bound to a small placeholder buffer at offset 0: an empty view of a real
// buffer may sit at an offset equal to the buffer's length, which Metal's API
// validation (MTL_DEBUG_LAYER=1) aborts on, and the kernel cannot touch an
// element of it anyway.
struct BufferBinding {
  bool placeholder = false;
  uint64_t offset = 0;  // bytes
};

inline BufferBinding buffer_binding(bool has_buffer, int64_t numel, int64_t storage_offset,
                                    int64_t element_size) {
  if (!has_buffer || numel == 0) return {true, 0};
  return {false, static_cast<uint64_t>(storage_offset * element_size)};
}

// ------------------------------------------------------ machine and process

// macOS tells a program built against an SDK older than macOS 26 that it runs
// 16.x (Apple's compatibility numbering), so 16 means 26 or newer.
inline bool os_runs_metal4(int64_t os_major) { return os_major >= 26 || os_major == 16; }

// The note for a process macOS treats as built against an SDK older than
// macOS 26 (it reported 16.x); empty for any other.
inline std::string old_sdk_note(int64_t os_major) {
  if (os_major != 16) return {};
  return "macOS reports version 16 to this process, which it does for programs built against "
         "an SDK older than macOS 26, and it may hide Metal 4 (the GPU family "
         "MTLGPUFamilyMetal4, Metal language 4.0) from them; Pythons from python.org's "
         "installer or from conda may be such programs (`vtool -show-build \"$(python3 -c "
         "'import sys; print(sys.executable)')\"` prints the SDK). Use a Python built against "
         "the macOS 26 SDK (for example Homebrew's, on macOS 26, or one built with Xcode 26) "
         "and install torch and coreai_torch into it.";
}

// What the backend learns about the machine, in the order it asks.
struct MachineFacts {
  int64_t os_major = 0, os_minor = 0, os_patch = 0;
  bool mps_available = false;  // PyTorch's MPS device is usable
  bool has_device = false;     // it has a Metal device behind it
  std::string gpu_name;
  bool metal4_family = false;  // supportsFamily:MTLGPUFamilyMetal4
};

inline constexpr const char* kFallbacks =
    " Kernels still run on CPU tensors (the CPU backend), and the PyTorch reference "
    "(torch_defn) runs anywhere.";

// Empty when Metal 4 kernels can run; otherwise what is missing and what to do.
inline std::string unavailable_reason(const MachineFacts& m) {
  if (!os_runs_metal4(m.os_major)) {
    return "the coreai_torch MPS backend compiles kernels as Metal 4.0, which needs macOS 26 "
           "or newer; this Mac runs macOS " +
           std::to_string(m.os_major) + "." + std::to_string(m.os_minor) + "." +
           std::to_string(m.os_patch) + "." + kFallbacks;
  }
  if (!m.mps_available) {
    return std::string("PyTorch reports no usable MPS device on this Mac.") + kFallbacks;
  }
  if (!m.has_device) {
    return std::string("PyTorch's MPS device has no Metal device behind it.") + kFallbacks;
  }
  if (!m.metal4_family) {
    const std::string note = old_sdk_note(m.os_major);
    if (!note.empty()) {
      return "the GPU '" + m.gpu_name + "' reports no Metal 4 GPU family (MTLGPUFamilyMetal4) "
             "to this process, which the coreai_torch MPS backend needs for Metal tensors. " +
             note + kFallbacks;
    }
    return "the GPU '" + m.gpu_name +
           "' is not in the Metal 4 GPU family (MTLGPUFamilyMetal4), which the coreai_torch MPS "
           "backend needs for Metal tensors." +
           kFallbacks;
  }
  return {};
}

// ----------------------------------------------------------- failed compiles

// The message of a failed library compile. Only MTLLibraryErrorCompileFailure,
// Metal's verdict on the source, is a compile error: marked with
// kCompileErrorMarker, remembered by the record's slot and raised again
// without compiling, MetalCompileError in Python. Any other failure (an
// internal error of Metal's compiler, ...) may not recur, so it is raised
// unmarked and the next launch compiles again.
inline std::string library_failure(const std::string& kernel, bool compile_failure,
                                   const std::string& domain, int64_t code,
                                   const std::string& math_mode, const std::string& metal_message,
                                   int64_t os_major) {
  std::string text;
  if (compile_failure) {
    text = std::string(kCompileErrorMarker) + kernel +
           ": the MPS backend's Metal compiler rejected the kernel (Metal 4.0, " + math_mode +
           "):\n" + metal_message;
  } else {
    text = "coreai_torch: kernel '" + kernel + "': Metal's compiler failed without judging the "
           "source (" + domain + " code " + std::to_string(code) + ", Metal 4.0, " + math_mode +
           "):\n" + metal_message +
           "\nThis is not remembered as the kernel's compile error: the next launch compiles "
           "again.";
  }
  const std::string note = old_sdk_note(os_major);
  if (!note.empty()) text += "\n(If Metal refused language version 4.0: " + note + ")";
  return text;
}

}  // namespace coreai_torch::mps
