// cpu::run: dispatches a validated launch over threadgroups (Metal's
// dispatchThreads semantics) and, in debug mode, checks what the kernel wrote.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

#include "cpu/group_runner.h"
#include "cpu/jit.h"
#include "cpu/launch_state.h"
#include "launch_args.h"

namespace coreai_torch {
namespace cpu {
namespace {

// ---- services for kernel code (cpu_abi.h) ---------------------------------

void report_loop_mode_call(const char* what) {
  if (LaunchState* state = LaunchState::current()) {
    state->fail("kernel '" + state->kernel() + "' called " + what +
                ", but the CPU backend ran it in loop mode: it found no call to a barrier, "
                "SIMD-group or quad-group function in the source (is the name assembled by a "
                "macro?). Write the call out by name so the kernel runs in fiber mode.");
  }
}

void rt_threadgroup_barrier() {
  if (GroupRunner* runner = GroupRunner::active()) {
    runner->threadgroup_barrier();
  } else {
    report_loop_mode_call("threadgroup_barrier");
  }
}

void rt_simdgroup_barrier() {
  if (GroupRunner* runner = GroupRunner::active()) {
    runner->simd_exchange(nullptr, 0);
  } else {
    report_loop_mode_call("simdgroup_barrier");
  }
}

coreai_cpu_simd_view rt_simd_exchange(const void* value, uint32_t size) {
  if (GroupRunner* runner = GroupRunner::active()) return runner->simd_exchange(value, size);
  report_loop_mode_call("a SIMD-group or quad-group function");
  // Answer as a SIMD-group of one lane so the kernel can finish.
  thread_local unsigned char slot[COREAI_CPU_SIMD_SLOT_BYTES];
  if (size > 0) std::memcpy(slot, value, size);
  return {slot, 1u, 0u};
}

void rt_report_out_of_bounds(const void* base, uint32_t rank, const int64_t* index,
                             const int32_t* extents, const uint32_t* thread_position) {
  LaunchState* state = LaunchState::current();
  if (state == nullptr) return;
  uint32_t position[3] = {thread_position[0], thread_position[1], thread_position[2]};
  // Fibers share the OS thread's copy of the kernel's last position.
  if (GroupRunner* runner = GroupRunner::active()) runner->current_position(position);
  state->out_of_bounds(base, rank, index, extents, position);
}

// ---- dispatch ------------------------------------------------------------

// In 64 bits: a grid of up to 2^32 - 1 threads must not wrap.
uint32_t ceil_div(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((uint64_t{a} + b - 1) / b);
}

// Runs every threadgroup once. Groups are independent (Metal guarantees no
// order between them), so they are spread over torch's intra-op threads; the
// threads of one group always run on one OS thread, which is what makes
// `static thread_local` threadgroup memory private to the running group.
void run_groups(const KernelLibrary& lib, void* const* ptrs, const LaunchArgs& args,
                LaunchState& state) {
  coreai_cpu_group proto{};
  proto.meta_count = static_cast<uint32_t>(args.meta.size());
  int64_t total = 1;
  for (int d = 0; d < 3; ++d) {
    proto.grid[d] = args.grid[d];
    proto.dispatch_size[d] = args.group[d];
    proto.groups_per_grid[d] = ceil_div(args.grid[d], args.group[d]);
    total *= proto.groups_per_grid[d];
  }
  if (total == 0) return;  // an empty grid runs nothing
  const int64_t threads_per_group =
      int64_t{args.group[0]} * int64_t{args.group[1]} * int64_t{args.group[2]};
  // Loop mode: enough threads per task to amortise scheduling; fiber mode:
  // a group is already a sizeable unit of work.
  const int64_t grain = lib.fibers ? 1 : std::max<int64_t>(1, 32768 / threads_per_group);

  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    CurrentLaunch current(&state);
    coreai_cpu_group g = proto;
    for (int64_t linear = begin; linear < end; ++linear) {
      int64_t rest = linear;
      for (int d = 0; d < 3; ++d) {
        g.position[d] = static_cast<uint32_t>(rest % proto.groups_per_grid[d]);
        rest /= proto.groups_per_grid[d];
        // dispatchThreads: the last group along a dimension holds what is left.
        g.size[d] = std::min(proto.dispatch_size[d],
                             proto.grid[d] - g.position[d] * proto.dispatch_size[d]);
      }
      g.thread_count = g.size[0] * g.size[1] * g.size[2];
      if (lib.fibers) {
        GroupRunner::for_this_thread().run(lib.run_thread, ptrs, g, state);
      } else {
        lib.run_group(ptrs, &g);
      }
    }
  });
}

// ---- debug mode: results the kernel never wrote ----------------------------

constexpr uint8_t kPoison[2] = {0xA5, 0x5A};

void poison_results(LaunchArgs& args, uint8_t pattern) {
  for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
    at::Tensor& t = args.args[i].tensor;
    if (t.numel() > 0) std::memset(t.data_ptr(), pattern, t.nbytes());
  }
}

// Per result: which elements still hold `pattern` in every byte.
std::vector<at::Tensor> still_poisoned(const LaunchArgs& args, uint8_t pattern) {
  std::vector<at::Tensor> masks;
  for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
    const at::Tensor& t = args.args[i].tensor;
    if (t.numel() == 0) {
      masks.emplace_back();
      continue;
    }
    const at::Tensor bytes =
        at::from_blob(t.data_ptr(), {t.numel(), static_cast<int64_t>(t.element_size())},
                      at::TensorOptions().dtype(at::kByte));
    masks.push_back(bytes.eq(pattern).all(1));
  }
  return masks;
}

std::string describe_unwritten(const KernelRecord& record, const LaunchArgs& args,
                               const std::vector<at::Tensor>& first,
                               const std::vector<at::Tensor>& second) {
  std::ostringstream msg;
  const size_t first_result = record.tensor_names.size() - args.num_results;
  for (size_t r = 0; r < first.size(); ++r) {
    if (!first[r].defined()) continue;
    const at::Tensor unwritten = first[r].logical_and(second[r]);
    const int64_t count = unwritten.sum().item<int64_t>();
    if (count == 0) continue;
    const at::Tensor& result = args.args[args.args.size() - args.num_results + r].tensor;
    msg << (msg.tellp() > 0 ? "\n" : "") << "kernel '" << record.name << "': result '"
        << record.tensor_names[first_result + r] << "' (shape " << result.sizes() << ") has "
        << count << " of " << result.numel()
        << " elements that the kernel never wrote; first at torch index ";
    const at::Tensor where = unwritten.nonzero().flatten().slice(0, 0, 4);
    for (int64_t k = 0; k < where.numel(); ++k) {
      int64_t flat = where[k].item<int64_t>();
      std::vector<int64_t> index(result.dim());
      for (int64_t d = result.dim() - 1; d >= 0; --d) {
        index[d] = flat % result.size(d);
        flat /= result.size(d);
      }
      msg << (k ? ", " : "") << c10::IntArrayRef(index);
    }
    msg << ". Results start uninitialised, as on the GPU: the grid must cover every element "
           "and each thread must write the elements it owns.";
  }
  return msg.str();
}

}  // namespace

const coreai_cpu_runtime& runtime_table() {
  static const coreai_cpu_runtime table{
      COREAI_CPU_ABI_VERSION, &rt_threadgroup_barrier, &rt_simdgroup_barrier,
      &rt_simd_exchange,      &rt_report_out_of_bounds,
  };
  return table;
}

void run(int64_t handle, const KernelRecord& record, LaunchArgs& args) {
  const KernelLibrary& lib = kernel_library(handle, record);

  std::vector<void*> ptrs;
  std::vector<std::pair<const void*, std::string>> tensors;
  ptrs.reserve(args.args.size() + 1);
  size_t tensor_index = 0;
  for (BoundArg& a : args.args) {
    switch (a.kind) {
      case BoundArg::Kind::Tensor:
        ptrs.push_back(a.tensor.data_ptr());
        if (record.options & kOptionDebug) {
          tensors.emplace_back(a.tensor.data_ptr(), record.tensor_names[tensor_index]);
        }
        ++tensor_index;
        break;
      case BoundArg::Kind::Int:
        ptrs.push_back(&a.int_value);
        break;
      case BoundArg::Kind::Float:
        ptrs.push_back(&a.float_value);
        break;
      case BoundArg::Kind::Bool:
        ptrs.push_back(&a.bool_value);
        break;
    }
  }
  ptrs.push_back(args.meta.data());

  LaunchState state(record.name, std::move(tensors));
  if (!(record.options & kOptionDebug)) {
    run_groups(lib, ptrs.data(), args, state);
    TORCH_CHECK(!state.failed(), state.report());
    return;
  }

  // Debug mode: run twice over results filled with two different patterns;
  // an element that holds the pattern after both runs was never written (a
  // kernel that happens to store one pattern cannot store both).
  std::vector<at::Tensor> unwritten[2];
  for (int pass = 0; pass < 2; ++pass) {
    poison_results(args, kPoison[pass]);
    run_groups(lib, ptrs.data(), args, state);
    TORCH_CHECK(!state.failed(), state.report());
    unwritten[pass] = still_poisoned(args, kPoison[pass]);
  }
  const std::string report = describe_unwritten(record, args, unwritten[0], unwritten[1]);
  TORCH_CHECK(report.empty(), report);
}

}  // namespace cpu
}  // namespace coreai_torch
