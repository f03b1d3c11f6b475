// cpu::run: dispatches a validated launch over threadgroups (Metal's
// dispatchThreads semantics) and, in debug mode, checks what the kernel wrote.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "cpu/access_checker.h"
#include "cpu/debug_buffers.h"
#include "cpu/group_runner.h"
#include "cpu/target.h"
#include "cpu/kernel_guard.h"
#include "cpu/launch_state.h"
#include "specializations/launch_args.h"

namespace coreai_torch {
namespace cpu {
namespace {

// ---- services for kernel code (cpu_abi.h) ---------------------------------

void rt_report_loop_mode_call(const char* what) {
  KernelThread::Shield shield;  // allocates: see kernel_guard.h
  if (LaunchState* state = LaunchState::current()) {
    state->fail("kernel '" + state->kernel() + "' called " + what +
                ", but the CPU backend ran it in loop mode: it found no call to a barrier, "
                "SIMD-group or quad-group function in the source (is the name assembled by a "
                "macro?). Write the call out by name so the kernel runs in fiber mode.");
  }
}

void rt_report_out_of_bounds(const void* base, uint32_t rank, const int64_t* index,
                             const int32_t* extents, const uint32_t* thread_position) {
  KernelThread::Shield shield;
  LaunchState* state = LaunchState::current();
  if (state == nullptr) return;
  uint32_t position[3] = {thread_position[0], thread_position[1], thread_position[2]};
  // Fibers share the OS thread's copy of the kernel's last position.
  if (GroupRunner* runner = GroupRunner::active()) runner->current_position(position);
  state->out_of_bounds(base, rank, index, extents, position);
}

// Debug mode's checks (access_checker.h). The launching thread runs every
// group of a debug launch, with its checker current. The checker allocates:
// shielded from interrupts like every service that does.
void rt_debug_access(const void* address, uint32_t size, uint32_t flags, const void* pc) {
  if (AccessChecker* checker = AccessChecker::current()) {
    KernelThread::Shield shield;
    checker->access(address, size, flags, pc);
  }
}

void rt_debug_sync(uint32_t kind, uint32_t leaving) {
  if (AccessChecker* checker = AccessChecker::current()) {
    KernelThread::Shield shield;
    // Called from the barrier or SIMD-group function inlined into the kernel:
    // the return address names the call in the kernel's source.
    checker->sync(kind, leaving != 0, __builtin_return_address(0));
  }
}

void rt_debug_simdgroup_matrix(uint32_t op, uint32_t active) {
  if (AccessChecker* checker = AccessChecker::current()) {
    KernelThread::Shield shield;
    // Called from the SIMD-group matrix function inlined into the kernel.
    checker->simdgroup_matrix(op, active, __builtin_return_address(0));
  }
}

void rt_debug_threadgroup_storage(const coreai_cpu_threadgroup_storage* storage) {
  if (AccessChecker* checker = AccessChecker::current()) {
    KernelThread::Shield shield;
    checker->threadgroup_storage(*storage);
  }
}

// What the CPU backend computes where a GPU's result is undefined (x86_division.h).
constexpr const char* kDivisionResults =
    "A GPU does not trap on it and Metal leaves the result undefined; outside debug mode the "
    "CPU backend computes x / 0 = 0, x % 0 = x, INT_MIN / -1 = INT_MIN and INT_MIN % -1 = 0.";

void rt_report_division(uint32_t overflow, const char* file, uint32_t line, uint32_t column,
                        const char* type, uint64_t lhs, uint64_t rhs, uint32_t is_signed,
                        const uint32_t* thread_position) {
  KernelThread::Shield shield;
#if defined(__x86_64__)
  // x86-64 traps on this division right after the report; the launcher
  // completes it (the launch fails on the report anyway).
  KernelThread::current().expect_division_fault();
#endif
  LaunchState* state = LaunchState::current();
  if (state == nullptr) return;
  uint32_t position[3] = {thread_position[0], thread_position[1], thread_position[2]};
  if (GroupRunner* runner = GroupRunner::active()) runner->current_position(position);
  auto value = [&](uint64_t v) {
    return is_signed ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
  };
  std::ostringstream msg;
  msg << "kernel '" << state->kernel() << "': integer division or remainder "
      << (overflow ? "overflow" : "by zero") << " at " << file << ":" << line << ":" << column
      << " (" << value(lhs) << " by " << value(rhs) << ", type " << type
      << ") by the thread at thread_position_in_grid (" << position[0] << ", " << position[1]
      << ", " << position[2] << "). " << kDivisionResults;
  state->fail(msg.str());
}

// ---- dispatch ------------------------------------------------------------

// In 64 bits: a grid of up to 2^32 - 1 threads must not wrap.
uint32_t ceil_div(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((uint64_t{a} + b - 1) / b);
}

// Loop mode runs a group with frames up to this size on the OS thread's stack
// without asking how much of it is left (an OS thread has megabytes, and
// finding its bounds can cost a read of /proc/self/maps); an overflow would
// still be caught.
constexpr int64_t kSmallFrameBytes = 64 * 1024;

// One call of a loop-mode group, as kernel code for KernelThread::run.
struct GroupCall {
  coreai_cpu_kernel_run_group_fn run_group;
  void* const* args;
  const coreai_cpu_group* group;
  static void invoke(void* self) {
    const auto* call = static_cast<const GroupCall*>(self);
    call->run_group(call->args, call->group);
  }
};

std::string kib(size_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

std::string measured(int64_t need) {
  return need < 0 ? std::string("the compiler could not measure its frames (alloca or a "
                                "variable-length array)")
                  : "the compiler measured up to " + kib(static_cast<size_t>(need)) +
                        " of frames";
}

// The message for kernel code that a fault abandoned.
std::string describe_fault(KernelExit exit, const std::string& kernel, uintptr_t address,
                           const coreai_cpu_group& g, const GroupRunner* fiber_runner,
                           size_t stack_bytes, int64_t need) {
  std::ostringstream msg;
  msg << "kernel '" << kernel << "': ";
  std::ostringstream where;
  where << "threadgroup (" << g.position[0] << ", " << g.position[1] << ", " << g.position[2]
        << ")";
  if (fiber_runner != nullptr) {
    uint32_t p[3];
    fiber_runner->current_position(p);
    where << ", the thread at thread_position_in_grid (" << p[0] << ", " << p[1] << ", " << p[2]
          << ")";
  }
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%" PRIxPTR, address);
  switch (exit) {
    case KernelExit::StackOverflow:
      msg << "a thread overflowed its stack (" << where.str() << "): the stack holds "
          << (stack_bytes ? kib(stack_bytes) : std::string("what the OS thread had left"))
          << " and " << measured(need)
          << ". Large local arrays live on this stack: make them smaller, or keep them in "
             "threadgroup or device memory.";
      break;
    case KernelExit::InvalidAccess:
      msg << "invalid memory access at address " << hex << " (" << where.str()
          << "): a pointer or an index outside every buffer. Run the kernel in debug mode "
             "(kernel.debug = True, or COREAI_TORCH_DEBUG=1) to find the tensor and index.";
      break;
    case KernelExit::DivisionFault:
      msg << "integer division or remainder by zero, or INT_MIN by -1, in a vector operation ("
          << where.str() << "). " << kDivisionResults
          << " (Debug mode reports scalar divisions with their source line; vector ones where "
             "the CPU traps on them, as x86-64 does.)";
      break;
    default:
      break;
  }
  msg << " The launch was abandoned; its results are incomplete.";
  return msg.str();
}

// ---- large results: their pages ------------------------------------------

// A large result is fresh memory from the allocator, and each of its pages
// would trap on the kernel's first store to it, one fault per 4 KiB page.
// Asking Linux to map the pages (MADV_POPULATE_WRITE, Linux 5.14) does the
// same zeroing without the traps: one thread adding 2^24 floats into a fresh
// 64 MiB result took 44-48 ms with the faults and 33 ms after mapping (a
// standalone copy of the loop).
// When they are mapped matters too: pages mapped all before the groups run are zeroed
// out of the cache by the time the kernel stores to them, and each store
// then reads its line back from memory. So each worker maps the slice of
// every large result that its next groups are likely to write, a few hundred
// KiB at a time (the zeroed lines are still in its L2 when the stores come):
// the slice of group g of G is the same fraction g/G of the result, exact for
// a kernel whose groups write their results in order, as elementwise kernels
// do. Other kernels still get each page mapped once (slices tile a result);
// a page stored to before its slice is mapped faults in as usual.
// A hint only: where it is refused (an older kernel), the pages fault in as
// they would have. Contents are untouched: the results are uninitialised
// memory either way.
class ResultPages {
 public:
  ResultPages() = default;  // maps nothing
  ResultPages(const LaunchArgs& args, int64_t groups) : groups_(groups) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    page_mask_ = ~(page - 1);
    uintptr_t bytes = 0;
    for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
      const at::Tensor& t = args.args[i].tensor;
      if (t.nbytes() < kMinBytes) continue;
      const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
      const Range r{(start + page - 1) & page_mask_, (start + t.nbytes()) & page_mask_};
      ranges_.push_back(r);
      bytes += r.end - r.begin;
    }
    if (!ranges_.empty()) {
      step_ = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(kSliceBytes) * groups / bytes));
    }
#else
    (void)args;
#endif
  }

  // Maps the slices of groups [group, the returned group), at most `step_`
  // groups and never past `end`. Returns `end` when there is nothing to map.
  int64_t map_ahead(int64_t group, int64_t end) const {
    if (ranges_.empty()) return end;
    const int64_t until = std::min(end, group + step_);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    for (const Range& r : ranges_) {
      const uintptr_t from = offset(r, group);
      const uintptr_t to = until == groups_ ? r.end : offset(r, until);
      if (to > from) (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE);
    }
#endif
    return until;
  }

 private:
  static constexpr size_t kMinBytes = size_t{4} << 20;
  static constexpr double kSliceBytes = 256 << 10;  // over all large results
  struct Range {
    uintptr_t begin, end;
  };

  // The page where group `g`'s slice of `r` starts.
  uintptr_t offset(const Range& r, int64_t g) const {
    const auto fraction = static_cast<unsigned __int128>(r.end - r.begin) * g / groups_;
    return r.begin + (static_cast<uintptr_t>(fraction) & page_mask_);
  }

  std::vector<Range> ranges_;
  int64_t groups_ = 0;
  int64_t step_ = 0;
  uintptr_t page_mask_ = 0;
};

// Runs every threadgroup once. Groups are independent (Metal guarantees no
// order between them), so they are spread over torch's intra-op threads; the
// threads of one group always run on one OS thread, which is what makes
// `static thread_local` threadgroup memory private to the running group.
// `map_results`: map the large results' pages as the groups run (ResultPages).
void run_groups(const KernelLibrary& lib, void* const* ptrs, const LaunchArgs& args,
                LaunchState& state, const LaunchScope& scope, bool map_results) {
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
  const ResultPages pages = map_results ? ResultPages(args, total) : ResultPages();
  const int64_t threads_per_group =
      int64_t{args.group[0]} * int64_t{args.group[1]} * int64_t{args.group[2]};
  // Loop mode: enough threads per task to amortise scheduling; fiber mode:
  // a group is already a sizeable unit of work.
  // Debug mode runs the groups one after another on the launching thread, so
  // that its checks see one order of events (access_checker.h).
  const int64_t grain = scope.debug() ? total
                        : lib.fibers  ? 1
                                      : std::max<int64_t>(1, 32768 / threads_per_group);
  const size_t fiber_stack = fiber_stack_bytes(lib.stack.thread_bytes);
  // Loop mode runs on the OS thread's own stack when it has room for the
  // kernel's frames, else on a private stack of this size.
  const size_t loop_stack = fiber_stack_bytes(lib.stack.group_bytes);

  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    CurrentLaunch current(&state);
    // Worker threads join the launch for this chunk; the launching thread
    // took part from the start.
    const bool launching_thread = LaunchScope::current() == &scope;
    KernelThread& thread = launching_thread ? scope.thread() : KernelThread::current();
    struct Joined {
      KernelThread& thread;
      const bool joined;
      ~Joined() {
        if (joined) thread.leave();
      }
    } joined{thread, !launching_thread};
    if (joined.joined) thread.join(scope.generation(), scope.debug());
    const bool private_stack = !lib.fibers && lib.stack.group_bytes > kSmallFrameBytes &&
                               thread.stack_left() < loop_stack;
    // Only fiber mode and private stacks use the runner (and its stacks).
    GroupRunner* const runner =
        lib.fibers || private_stack ? &GroupRunner::for_this_thread() : nullptr;
    struct ReleaseStacks {
      GroupRunner* runner;
      ~ReleaseStacks() {
        if (runner != nullptr) runner->release_large_stacks();
      }
    } release_stacks{runner};
    coreai_cpu_group g = proto;
    int64_t mapped = begin;  // result pages are mapped up to this group's slice
    for (int64_t linear = begin; linear < end; ++linear) {
      if (state.stopped()) break;
      if (linear == mapped) mapped = pages.map_ahead(linear, end);
      if (scope.interrupted()) {
        state.stop(/*interrupted=*/true);
        break;
      }
      int64_t rest = linear;
      for (int d = 0; d < 3; ++d) {
        g.position[d] = static_cast<uint32_t>(rest % proto.groups_per_grid[d]);
        rest /= proto.groups_per_grid[d];
        // dispatchThreads: the last group along a dimension holds what is left.
        g.size[d] = std::min(proto.dispatch_size[d],
                             proto.grid[d] - g.position[d] * proto.dispatch_size[d]);
      }
      g.thread_count = g.size[0] * g.size[1] * g.size[2];
      KernelExit exit;
      if (lib.fibers) {
        exit = runner->run(lib.run_fibers, ptrs, g, state, fiber_stack);
      } else if (private_stack) {
        exit = runner->run_group_on_private_stack(lib.run_group, ptrs, g, loop_stack);
      } else {
        GroupCall call{lib.run_group, ptrs, &g};
        exit = thread.run(&GroupCall::invoke, &call);
      }
      if (exit == KernelExit::Returned) continue;
      if (exit == KernelExit::Interrupted) {
        state.stop(/*interrupted=*/true);
        break;
      }
      const size_t stack_bytes = lib.fibers ? fiber_stack : private_stack ? loop_stack : 0;
      const int64_t need = lib.fibers ? lib.stack.thread_bytes : lib.stack.group_bytes;
      state.fail(describe_fault(exit, state.kernel(), thread.fault_address(), g,
                                lib.fibers ? runner : nullptr, stack_bytes, need));
      state.stop(/*interrupted=*/false);
      break;
    }
  });
}

// Refuses a launch whose stacks cannot fit, before anything runs.
void check_stack_budget(const KernelRecord& record, const KernelLibrary& lib,
                        const LaunchArgs& args) {
  const int64_t need = lib.fibers ? lib.stack.thread_bytes : lib.stack.group_bytes;
  if (need < 0) return;
  const size_t threads = lib.fibers ? size_t{args.group[0]} * args.group[1] * args.group[2] : 1;
  const size_t stack = fiber_stack_bytes(need);
  TORCH_CHECK_VALUE(
      threads * stack <= kGroupStackBudgetBytes, "kernel '", record.name, "' needs ",
      kib(static_cast<size_t>(need)), " of stack per ", lib.fibers ? "thread" : "threadgroup",
      " (its stack frames, measured by the compiler; local arrays live there)",
      lib.fibers ? ", and a threadgroup of " + std::to_string(threads) + " threads" : std::string(),
      " would need ", (threads * stack) >> 20, " MiB of stack, more than the ",
      kGroupStackBudgetBytes >> 20,
      " MiB the CPU backend gives one threadgroup. Make the local arrays smaller or keep them in "
      "threadgroup or device memory",
      lib.fibers ? ", or use fewer threads per threadgroup." : ".");
}

// ---- debug mode: results the kernel never wrote ----------------------------

constexpr uint8_t kPoison[2] = {0xA5, 0x5A};

void poison_results(const std::vector<at::Tensor>& results, uint8_t pattern) {
  for (const at::Tensor& t : results) {
    if (t.numel() > 0) std::memset(t.data_ptr(), pattern, t.nbytes());
  }
}

// Per result: which elements still hold `pattern` in every byte.
std::vector<at::Tensor> still_poisoned(const std::vector<at::Tensor>& results, uint8_t pattern) {
  std::vector<at::Tensor> masks;
  for (const at::Tensor& t : results) {
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

// What a debug launch found: the launch's first reported problem (an
// out-of-bounds index, a division, a fault), then each of the checker's. Also
// kept for last_debug_findings().
std::string describe_findings(const LaunchState& state, std::vector<DebugFinding> found) {
  if (state.failed()) {
    const std::string first = state.report();
    const char* kind = first.find("out-of-bounds access") != std::string::npos ? "out of bounds"
                       : first.find("division") != std::string::npos        ? "division"
                                                                             : "fault";
    found.insert(found.begin(), {kind, "", "", {}, {}, first, 1});
  }
  std::string message;
  for (const DebugFinding& f : found) message += (message.empty() ? "" : "\n") + f.message;
  set_last_debug_findings(std::move(found));
  return message;
}

}  // namespace

const coreai_cpu_runtime& runtime_table() {
  static const coreai_cpu_runtime table{
      COREAI_CPU_ABI_VERSION,
      &rt_report_loop_mode_call,
      &rt_report_out_of_bounds,
      &rt_report_division,
      &rt_debug_access,
      &rt_debug_sync,
      &rt_debug_threadgroup_storage,
      &rt_debug_simdgroup_matrix,
  };
  return table;
}

void run(int64_t handle, const KernelRecord& record, LaunchArgs& args) {
  // From here on SIGINT stops the launch, its compile included.
  const bool debug = (record.options & kOptionDebug) != 0;
  LaunchScope scope(debug);
  const KernelLibrary& lib = kernel_library(record);
  check_stack_budget(record, lib, args);

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
  auto finish = [&] {
    if (state.interrupted()) {
      throw_interrupted("kernel '" + record.name +
                        "' was interrupted (SIGINT) before it finished; its results were "
                        "discarded");
    }
    TORCH_CHECK(!state.failed(), state.report());
  };
  if (!debug) {
    run_groups(lib, ptrs.data(), args, state, scope, /*map_results=*/true);
    finish();
    return;
  }

  // Debug mode: the kernel runs on guarded copies of its tensors
  // (debug_buffers.h), twice, over results filled with two different
  // patterns: an element that holds the pattern after both runs was never
  // written (a kernel that happens to store one pattern cannot store both).
  // The first run is checked access by access (access_checker.h).
  set_last_debug_findings({});
  DebugBuffers buffers(record, args);
  for (size_t i = 0, j = 0; i < args.args.size(); ++i) {
    if (args.args[i].kind != BoundArg::Kind::Tensor) continue;
    state.name_tensor(buffers.pointer(j), record.tensor_names[j]);
    ptrs[i] = buffers.pointer(j++);
  }
  AccessChecker checker(record.name, buffers.checked(), lib.path);
  std::vector<at::Tensor> unwritten[2];
  for (int pass = 0; pass < 2; ++pass) {
    poison_results(buffers.results(), kPoison[pass]);
    {
      struct Checking {
        explicit Checking(AccessChecker* c) { AccessChecker::set_current(c); }
        ~Checking() { AccessChecker::set_current(nullptr); }
      } checking(pass == 0 ? &checker : nullptr);
      run_groups(lib, ptrs.data(), args, state, scope, /*map_results=*/false);
    }
    if (pass == 0 && !state.interrupted()) {
      // (Raw findings can all turn out to be one call: none to report.)
      std::vector<DebugFinding> found =
          checker.found_anything() ? checker.findings() : std::vector<DebugFinding>{};
      const bool errors = std::any_of(found.begin(), found.end(),
                                      [](const DebugFinding& f) { return !is_warning(f.kind); });
      if (state.failed() || errors) {
        buffers.copy_back();
        TORCH_CHECK(false, describe_findings(state, std::move(found)));
      }
      // Warnings alone (is_warning) let the launch complete.
      if (!found.empty()) TORCH_WARN(describe_findings(state, std::move(found)));
    }
    finish();
    unwritten[pass] = still_poisoned(buffers.results(), kPoison[pass]);
  }
  buffers.copy_back();
  const std::string report = describe_unwritten(record, args, unwritten[0], unwritten[1]);
  if (!report.empty()) {
    std::vector<DebugFinding> found = last_debug_findings();
    found.push_back({"unwritten result", "", "", {}, {}, report, 1});
    set_last_debug_findings(std::move(found));
  }
  TORCH_CHECK(report.empty(), report);
}

}  // namespace cpu
}  // namespace coreai_torch
