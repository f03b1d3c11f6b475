#include "cpu/access_checker.h"

#include <dlfcn.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>
#include <utility>
#include <sstream>

#include "cpu/group_runner.h"
#include "cpu/symbolizer.h"

namespace coreai_torch::cpu {

// One access as the shadow remembers it.
struct AccessChecker::Access {
  uint32_t run = 0;            // group run (0: none)
  uint32_t thread = 0;         // thread_index_in_threadgroup
  uint32_t flags = 0;          // COREAI_CPU_ACCESS_*
  uint32_t barriers = 0;       // threadgroup barriers the thread had passed
  uint32_t simd_barriers = 0;  // simdgroup barriers it had passed
  uintptr_t pc = 0;
};

// The shadow of one element of device memory or one byte of threadgroup
// memory: the last write, and up to two reads (by different threads) since.
struct AccessChecker::Cell {
  Access write;
  Access read[2];
};

// One side of a finding: who, where, doing what.
struct AccessChecker::Side {
  uint32_t run = 0;
  uint32_t thread = 0;
  uint32_t flags = 0;
  uintptr_t pc = 0;
};

struct AccessChecker::Raw {
  Kind kind;
  int memory;       // >= 0: a threadgroup variable; < 0: buffer -(memory + 1)
  int64_t element;  // element index (device) or byte offset (threadgroup)
  Side a, b;
  uint32_t extra;   // partial barrier: how many threads arrived; partial SIMD-group
                    // matrix: how many lanes took part (`memory`: the operation)
  int64_t count = 1;
};

struct AccessChecker::Variable {
  uintptr_t begin;
  uint64_t bytes;
  uint32_t element_bytes;
  std::vector<uint32_t> extents;
  std::string name;
  std::vector<Cell> shadow;  // per byte
};

struct AccessChecker::ThreadState {
  uint32_t barriers = 0;
  uint32_t simd_barriers = 0;
  uint32_t simd_calls = 0;  // SIMD-group functions and barriers it has left
};

// The synchronisation point the threads of a group (or the lanes of a
// SIMD-group) are meeting at: where the first one reached it.
struct AccessChecker::Rendezvous {
  bool open = false;
  // Which meeting: how many the arriving threads had left before. A thread
  // leaving meeting g may find the next one already opened by a faster thread.
  uint32_t generation = 0;
  uintptr_t pc = 0;
  uint32_t first = 0;
  uint32_t arrivals = 0;
  std::vector<uint8_t> arrived;
};

namespace {

thread_local AccessChecker* tls_checker = nullptr;

constexpr size_t kMaxFindings = 64;

enum class Order { Ordered, Race, Lockstep };

thread_local std::vector<DebugFinding> tls_last_findings;

}  // namespace

AccessChecker* AccessChecker::current() { return tls_checker; }
void AccessChecker::set_current(AccessChecker* checker) { tls_checker = checker; }

const std::vector<DebugFinding>& last_debug_findings() { return tls_last_findings; }
void set_last_debug_findings(std::vector<DebugFinding> findings) {
  tls_last_findings = std::move(findings);
}

AccessChecker::AccessChecker(std::string kernel, std::vector<CheckedBuffer> buffers,
                             std::string library_path)
    : kernel_(std::move(kernel)),
      buffers_(std::move(buffers)),
      library_path_(std::move(library_path)),
      barrier_(std::make_unique<Rendezvous>()) {
  for (const CheckedBuffer& b : buffers_) {
    // Zeroed pages cost nothing until the kernel touches the elements.
    const size_t n = static_cast<size_t>(std::max<int64_t>(b.end - b.first, 1));
    Cell* cells = static_cast<Cell*>(std::calloc(n, sizeof(Cell)));
    TORCH_CHECK(cells != nullptr, "kernel '", kernel_, "': debug mode cannot allocate ", n,
                " shadow entries for tensor '", b.name, "'");
    device_shadow_.emplace_back(cells, [](Cell* c) { std::free(c); });
  }
}

AccessChecker::~AccessChecker() = default;

bool AccessChecker::locate() {
  GroupRunner* runner = GroupRunner::active();
  if (runner == nullptr) return false;
  const coreai_cpu_group& g = runner->group();
  const bool same = !runs_.empty() && runner == runner_ &&
                    std::memcmp(runs_.back().position, g.position, sizeof g.position) == 0;
  if (!same) {
    runs_.push_back(g);
    runner_ = runner;
    threads_.assign(g.thread_count, ThreadState{});
    simd_.assign((g.thread_count + COREAI_CPU_SIMD_WIDTH - 1) / COREAI_CPU_SIMD_WIDTH,
                 Rendezvous{});
    *barrier_ = Rendezvous{};
  }
  thread_ = runner->current_index();
  return thread_ < threads_.size();
}

AccessChecker::Access AccessChecker::now(uint32_t flags, const void* pc) const {
  const ThreadState& t = threads_[thread_];
  return {static_cast<uint32_t>(runs_.size()), thread_, flags, t.barriers, t.simd_barriers,
          reinterpret_cast<uintptr_t>(pc)};
}

void AccessChecker::add(Kind kind, int memory, int64_t element, const Side& a, const Side& b,
                        uint32_t extra) {
  const auto key = std::make_tuple(static_cast<int>(kind), memory, a.pc, b.pc);
  if (auto it = seen_.find(key); it != seen_.end()) {
    ++raw_[it->second].count;
    return;
  }
  if (raw_.size() >= kMaxFindings) return;
  seen_.emplace(key, raw_.size());
  raw_.push_back({kind, memory, element, a, b, extra});
}

namespace {

// How an earlier access `a` and a later one `b` relate.
Order order(const AccessChecker::Access& a, const AccessChecker::Access& b) {
  if (a.run != b.run) return Order::Race;  // threadgroups of one dispatch are never ordered
  if (a.thread == b.thread) return Order::Ordered;
  if (a.barriers != b.barriers) return Order::Ordered;
  if (a.thread / COREAI_CPU_SIMD_WIDTH == b.thread / COREAI_CPU_SIMD_WIDTH) {
    return a.simd_barriers != b.simd_barriers ? Order::Ordered : Order::Lockstep;
  }
  return Order::Race;
}

bool both_atomic(uint32_t a, uint32_t b) {
  return (a & COREAI_CPU_ACCESS_ATOMIC) != 0 && (b & COREAI_CPU_ACCESS_ATOMIC) != 0;
}

}  // namespace

void AccessChecker::check(Cell& cell, const Access& a, bool threadgroup, int memory,
                          int64_t element) {
  // Threadgroup memory is the running group's: what an earlier group did to it
  // is no access at all.
  auto live = [&](const Access& x) { return x.run != 0 && (!threadgroup || x.run == a.run); };
  auto side = [](const Access& x) { return Side{x.run, x.thread, x.flags, x.pc}; };
  auto conflict = [&](const Access& earlier) {
    if (!live(earlier) || both_atomic(earlier.flags, a.flags)) return;
    const Order o = order(earlier, a);
    if (o == Order::Ordered) return;
    // Two lanes storing to one element in the same instruction race even in
    // lockstep (which store wins is undefined); lockstep orders the rest.
    const bool one_store = (earlier.flags & a.flags & COREAI_CPU_ACCESS_WRITE) != 0 &&
                           earlier.pc == a.pc;
    add(o == Order::Lockstep && !one_store ? Kind::Lockstep : Kind::Race, memory, element,
        side(earlier), side(a));
  };
  conflict(cell.write);
  if ((a.flags & COREAI_CPU_ACCESS_WRITE) != 0) {
    conflict(cell.read[0]);
    conflict(cell.read[1]);
    cell.write = a;
    cell.read[0] = cell.read[1] = Access{};
    return;
  }
  // Keep the latest read of up to two threads: a later write by any third
  // thread conflicts with at least one of them.
  if (!live(cell.read[0]) || cell.read[0].thread == a.thread) {
    cell.read[0] = a;
  } else if (!live(cell.read[1]) || cell.read[1].thread == a.thread) {
    cell.read[1] = a;
  }
}

void AccessChecker::threadgroup_access(Variable& v, uintptr_t address, uint32_t size,
                                       const Access& a) {
  const uintptr_t lo = std::max<uintptr_t>(address, v.begin);
  const uintptr_t hi = std::min<uintptr_t>(address + size, v.begin + v.bytes);
  const int memory = static_cast<int>(&v - variables_.data());
  if ((a.flags & COREAI_CPU_ACCESS_WRITE) == 0) {
    // A read of which no byte was written in this threadgroup (a partly
    // written value is more likely padding or unused lanes than a bug).
    bool written = false;
    for (uintptr_t p = lo; p < hi && !written; ++p) {
      written = v.shadow[p - v.begin].write.run == a.run;
    }
    if (!written) {
      add(Kind::Uninitialized, memory, static_cast<int64_t>(lo - v.begin),
          {a.run, a.thread, a.flags, a.pc}, {});
    }
  }
  for (uintptr_t p = lo; p < hi; ++p) {
    check(v.shadow[p - v.begin], a, true, memory, static_cast<int64_t>(p - v.begin));
  }
}

void AccessChecker::device_access(size_t i, uintptr_t address, uint32_t size, const Access& a) {
  const CheckedBuffer& b = buffers_[i];
  const int memory = -static_cast<int>(i) - 1;
  const auto offset = [&](uintptr_t p) {
    return static_cast<int64_t>(p - b.data) / b.element_bytes -
           (p < b.data && (b.data - p) % b.element_bytes != 0 ? 1 : 0);
  };
  int64_t first = offset(address), last = offset(address + size - 1);
  // An atomic operation on a narrow type works on the aligned word holding it
  // (MLX's half atomics): only the elements of the word in the tensor count.
  if ((a.flags & COREAI_CPU_ACCESS_ATOMIC) != 0 && first <= b.end - 1 && last >= b.first) {
    first = std::max(first, b.first);
    last = std::min(last, b.end - 1);
  }
  if (first < b.first || last >= b.end) {
    add(Kind::OutOfBounds, memory, first < b.first ? first : last,
        {a.run, a.thread, a.flags, a.pc}, {});
    return;
  }
  Cell* shadow = device_shadow_[i].get();
  for (int64_t e = first; e <= last; ++e) check(shadow[e - b.first], a, false, memory, e);
}

void AccessChecker::access(const void* address, uint32_t size, uint32_t flags, const void* pc) {
  if (size == 0 || !locate()) return;
  const auto p = reinterpret_cast<uintptr_t>(address);
  const Access a = now(flags, pc);
  for (Variable& v : variables_) {
    if (p < v.begin + v.bytes && p + size > v.begin) {
      threadgroup_access(v, p, size, a);
      return;
    }
  }
  // A tensor's elements, else the guard zone of its copy (which tensors that
  // share memory share too).
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const CheckedBuffer& b = buffers_[i];
    const uintptr_t lo = b.data + b.first * b.element_bytes, hi = b.data + b.end * b.element_bytes;
    if (b.end > b.first && p < hi && p + size > lo) {
      device_access(i, p, size, a);
      return;
    }
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (p < buffers_[i].guard_end && p + size > buffers_[i].guard_begin) {
      device_access(i, p, size, a);
      return;
    }
  }
}

void AccessChecker::threadgroup_storage(const coreai_cpu_threadgroup_storage& s) {
  const auto begin = reinterpret_cast<uintptr_t>(s.address);
  for (const Variable& v : variables_) {
    if (v.begin == begin) return;
  }
  Variable v{begin, s.bytes, std::max<uint32_t>(s.element_bytes, 1), {}, s.name ? s.name : "?",
             std::vector<Cell>(s.bytes)};
  v.extents.assign(s.extents, s.extents + std::min<uint32_t>(s.rank, 4));
  variables_.push_back(std::move(v));
}

void AccessChecker::sync(uint32_t kind, bool leaving, const void* pc) {
  if (!locate()) return;
  ThreadState& t = threads_[thread_];
  const Side me{static_cast<uint32_t>(runs_.size()), thread_, 0,
                reinterpret_cast<uintptr_t>(pc)};
  if (kind == COREAI_CPU_SYNC_THREADGROUP_BARRIER) {
    Rendezvous& r = *barrier_;
    const uint32_t generation = t.barriers;
    if (!leaving) {
      if (!r.open || r.generation != generation) {
        r = Rendezvous{true, generation, me.pc, thread_, 0,
                       std::vector<uint8_t>(threads_.size(), 0)};
      } else if (r.pc != me.pc) {
        add(Kind::DivergentBarrier, 0, 0, {me.run, r.first, 0, r.pc}, me);
      }
      ++r.arrivals;
      r.arrived[thread_] = 1;
      return;
    }
    ++t.barriers;
    if (!r.open || r.generation != generation) return;
    // The first thread to leave: every thread that will arrive has arrived.
    r.open = false;
    if (r.arrivals < threads_.size()) {
      const auto missing = static_cast<uint32_t>(
          std::find(r.arrived.begin(), r.arrived.end(), 0) - r.arrived.begin());
      add(Kind::PartialBarrier, 0, 0, {me.run, r.first, 0, r.pc}, {me.run, missing, 0, 0},
          r.arrivals);
    }
    return;
  }
  Rendezvous& r = simd_[thread_ / COREAI_CPU_SIMD_WIDTH];
  const uint32_t generation = t.simd_calls;
  if (!leaving) {
    if (!r.open || r.generation != generation) {
      r.open = true;
      r.generation = generation;
      r.pc = me.pc;
      r.first = thread_;
    } else if (r.pc != me.pc) {
      add(Kind::SimdParticipation, 0, 0, {me.run, r.first, 0, r.pc}, me);
    }
    return;
  }
  if (kind == COREAI_CPU_SYNC_SIMDGROUP_BARRIER) ++t.simd_barriers;
  ++t.simd_calls;
  if (r.generation == generation) r.open = false;
}

void AccessChecker::simdgroup_matrix(uint32_t op, uint32_t active, const void* pc) {
  if (!locate()) return;
  const uint32_t first = thread_ / COREAI_CPU_SIMD_WIDTH * COREAI_CPU_SIMD_WIDTH;
  const uint32_t count =
      std::min<uint32_t>(COREAI_CPU_SIMD_WIDTH, static_cast<uint32_t>(threads_.size()) - first);
  const uint32_t lanes = count >= 32 ? ~0u : (1u << count) - 1u;
  const uint32_t absent = lanes & ~active;
  if (absent == 0) return;
  const auto run = static_cast<uint32_t>(runs_.size());
  add(Kind::PartialMatrix, static_cast<int>(op), 0,
      {run, thread_, 0, reinterpret_cast<uintptr_t>(pc)},
      {run, first + static_cast<uint32_t>(__builtin_ctz(absent)), 0, 0},
      static_cast<uint32_t>(__builtin_popcount(active & lanes)));
}

// ---- reports ---------------------------------------------------------------

namespace {

std::string triple(const uint32_t v[3]) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) +
         ")";
}

std::string verb(uint32_t flags) {
  if ((flags & COREAI_CPU_ACCESS_ATOMIC) != 0) {
    return (flags & COREAI_CPU_ACCESS_WRITE) != 0 ? "updated atomically" : "read atomically";
  }
  return (flags & COREAI_CPU_ACCESS_WRITE) != 0 ? "written" : "read";
}

// The torch index of element offset `e` of a tensor, or empty if the
// strides do not name one.
std::string torch_index(const CheckedBuffer& b, int64_t e) {
  if (e < b.first || e >= b.end) return {};
  std::vector<size_t> dims(b.sizes.size());
  std::iota(dims.begin(), dims.end(), 0);
  std::sort(dims.begin(), dims.end(),
            [&](size_t x, size_t y) { return b.strides[x] > b.strides[y]; });
  std::vector<int64_t> index(b.sizes.size(), 0);
  int64_t rest = e;
  for (size_t d : dims) {
    if (b.sizes[d] <= 1 || b.strides[d] <= 0) continue;
    index[d] = rest / b.strides[d];
    rest %= b.strides[d];
    if (index[d] >= b.sizes[d]) return {};
  }
  if (rest != 0) return {};
  std::string out = "[";
  for (size_t d = 0; d < index.size(); ++d) out += (d ? ", " : "") + std::to_string(index[d]);
  return out + "]";
}

}  // namespace

std::vector<DebugFinding> AccessChecker::findings() const {
  // Source positions of every place a finding names.
  std::vector<uintptr_t> pcs;
  for (const Raw& r : raw_) {
    if (r.a.pc) pcs.push_back(r.a.pc);
    if (r.b.pc) pcs.push_back(r.b.pc);
  }
  std::sort(pcs.begin(), pcs.end());
  pcs.erase(std::unique(pcs.begin(), pcs.end()), pcs.end());
  std::map<uintptr_t, CodeLocation> where;
  if (!pcs.empty()) {
    Dl_info info{};
    const uintptr_t base = dladdr(reinterpret_cast<void*>(pcs.front()), &info) != 0
                               ? reinterpret_cast<uintptr_t>(info.dli_fbase)
                               : 0;
    std::vector<uintptr_t> offsets;
    // A return address: the call it returns from ends one byte before.
    for (uintptr_t pc : pcs) offsets.push_back(pc - base - 1);
    const std::vector<CodeLocation> located = symbolize(library_path_, offsets);
    for (size_t i = 0; i < pcs.size() && i < located.size(); ++i) where[pcs[i]] = located[i];
  }
  auto line = [&](uintptr_t pc) {
    auto it = where.find(pc);
    return it == where.end() ? std::string("an unknown place") : it->second.user;
  };
  auto position = [&](const Side& s) {
    const coreai_cpu_group& g = runs_[s.run - 1];
    const uint32_t local[3] = {s.thread % g.size[0], s.thread / g.size[0] % g.size[1],
                               s.thread / (g.size[0] * g.size[1])};
    uint32_t p[3];
    for (int d = 0; d < 3; ++d) p[d] = g.position[d] * g.dispatch_size[d] + local[d];
    return triple(p);
  };
  auto group = [&](const Side& s) { return triple(runs_[s.run - 1].position); };
  auto memory = [&](int m) {
    return m >= 0 ? "threadgroup memory '" + variables_[m].name + "'"
                  : "tensor '" + buffers_[-m - 1].name + "'";
  };
  auto index = [&](int m, int64_t element) {
    if (m < 0) {
      const std::string t = torch_index(buffers_[-m - 1], element);
      return t.empty() ? "element offset " + std::to_string(element) : "torch index " + t;
    }
    const Variable& v = variables_[m];
    int64_t flat = element / v.element_bytes;
    if (v.extents.size() <= 1) return "[" + std::to_string(flat) + "]";
    std::string out;
    for (size_t d = v.extents.size(); d-- > 0;) {
      out = "[" + std::to_string(flat % v.extents[d]) + "]" + out;
      flat /= v.extents[d];
    }
    return out;
  };

  // A read that raced with a later write of another thread is reported as
  // that race, not as a read of unwritten memory (the fibers happened to run
  // the reader first).
  std::set<std::pair<int, uintptr_t>> raced_reads;
  for (const Raw& r : raw_) {
    if ((r.kind == Kind::Race || r.kind == Kind::Lockstep) &&
        (r.a.flags & COREAI_CPU_ACCESS_WRITE) == 0) {
      raced_reads.insert({r.memory, r.a.pc});
    }
  }

  std::vector<DebugFinding> out;
  const std::string k = "kernel '" + kernel_ + "': ";
  for (const Raw& r : raw_) {
    if (r.kind == Kind::Uninitialized && raced_reads.contains({r.memory, r.a.pc})) continue;
    DebugFinding f;
    f.count = r.count;
    std::ostringstream m;
    switch (r.kind) {
      case Kind::Race:
      case Kind::Lockstep: {
        f.kind = r.kind == Kind::Race ? "data race" : kLockstepFinding;
        f.memory = memory(r.memory);
        f.index = index(r.memory, r.element);
        f.threads = {position(r.a), position(r.b)};
        f.lines = {line(r.a.pc), line(r.b.pc)};
        const std::string what = f.memory + (r.memory >= 0 ? f.index : " at " + f.index);
        if (r.kind == Kind::Lockstep) {
          const uint32_t lane_a = r.a.thread % COREAI_CPU_SIMD_WIDTH;
          const uint32_t lane_b = r.b.thread % COREAI_CPU_SIMD_WIDTH;
          m << k << "relies on SIMD-group lockstep: lanes " << lane_a << " and " << lane_b
            << " of SIMD-group " << r.a.thread / COREAI_CPU_SIMD_WIDTH << " of threadgroup "
            << group(r.a) << " pass data through " << what << " without a simdgroup_barrier: "
            << verb(r.a.flags) << " by lane " << lane_a << " (thread_position_in_grid "
            << f.threads[0] << ") at " << f.lines[0] << ", then " << verb(r.b.flags)
            << " by lane " << lane_b << " (" << f.threads[1] << ") at " << f.lines[1]
            << ". A GPU runs the lanes of a SIMD-group in step, but Metal does not promise it; "
               "put simdgroup_barrier(mem_flags::mem_threadgroup) (or a threadgroup_barrier) "
               "between the two.";
        } else if (r.a.run != r.b.run) {
          m << k << "data race on " << what << ": " << verb(r.a.flags)
            << " by the thread at thread_position_in_grid " << f.threads[0] << " (threadgroup "
            << group(r.a) << ") at " << f.lines[0] << ", and " << verb(r.b.flags)
            << " by the thread at " << f.threads[1] << " (threadgroup " << group(r.b) << ") at "
            << f.lines[1]
            << ". Threads of different threadgroups are not ordered within a dispatch: give "
               "each element one writer, use atomics, or split the work into two kernels.";
        } else {
          m << k << "data race on " << what << " in threadgroup " << group(r.a) << ": "
            << verb(r.a.flags) << " by the thread at thread_position_in_grid " << f.threads[0]
            << " at " << f.lines[0] << ", then " << verb(r.b.flags) << " by the thread at "
            << f.threads[1] << " at " << f.lines[1]
            << ", with no threadgroup_barrier between them. Metal orders the threads of a "
               "threadgroup only at barriers: put threadgroup_barrier(mem_flags::"
            << (r.memory >= 0 ? "mem_threadgroup" : "mem_device") << ") between the two.";
        }
        break;
      }
      case Kind::Uninitialized:
        f.kind = kUninitializedFinding;
        f.memory = memory(r.memory);
        f.index = index(r.memory, r.element);
        f.threads = {position(r.a)};
        f.lines = {line(r.a.pc)};
        m << k << "read of " << f.memory << f.index << " that no thread of threadgroup "
          << group(r.a) << " had written, by the thread at thread_position_in_grid "
          << f.threads[0] << " at " << f.lines[0]
          << ". Threadgroup memory starts uninitialised in every threadgroup: write it (and "
             "pass a threadgroup_barrier) before reading it.";
        break;
      case Kind::OutOfBounds: {
        const CheckedBuffer& b = buffers_[-r.memory - 1];
        f.kind = "out of bounds";
        f.memory = memory(r.memory);
        f.index = "element offset " + std::to_string(r.element);
        f.threads = {position(r.a)};
        f.lines = {line(r.a.pc)};
        std::string shape = "[";
        for (size_t d = 0; d < b.sizes.size(); ++d) {
          shape += (d ? ", " : "") + std::to_string(b.sizes[d]);
        }
        shape += "]";
        m << k << "out-of-bounds access through a pointer: " << f.memory << " " << verb(r.a.flags)
          << " at " << f.index << " by the thread at thread_position_in_grid " << f.threads[0]
          << " at " << f.lines[0] << "; the tensor (shape " << shape << ") holds element offsets "
          << b.first << " to " << b.end - 1
          << ". A tensor view checks its indices in debug mode; a pointer from get_data_ptr() "
             "or &x[i] does not, so check the index before the access.";
        break;
      }
      case Kind::PartialBarrier: {
        f.kind = "partial barrier";
        f.threads = {position(r.a), position(r.b)};
        f.lines = {line(r.a.pc)};
        const coreai_cpu_group& g = runs_[r.a.run - 1];
        m << k << "threadgroup_barrier at " << f.lines[0] << " was reached by only " << r.extra
          << " of the " << g.thread_count << " threads of threadgroup " << group(r.a)
          << ": the thread at thread_position_in_grid " << f.threads[1];
        if (g.thread_count - r.extra > 1) m << " and " << g.thread_count - r.extra - 1 << " more";
        m << " had returned before it. Every thread of a threadgroup must reach each barrier "
             "(on a GPU the others may wait forever or run on early): let every thread reach "
             "the barrier and skip only the work (`if (id < n) { ... }`) instead of returning.";
        break;
      }
      case Kind::PartialMatrix: {
        static constexpr const char* kOperations[] = {"simdgroup_load", "simdgroup_store",
                                                      "simdgroup_multiply_accumulate"};
        const coreai_cpu_group& g = runs_[r.a.run - 1];
        const uint32_t first = r.a.thread / COREAI_CPU_SIMD_WIDTH * COREAI_CPU_SIMD_WIDTH;
        const uint32_t lanes = std::min<uint32_t>(COREAI_CPU_SIMD_WIDTH, g.thread_count - first);
        f.kind = "partial SIMD-group matrix";
        f.threads = {position(r.a), position(r.b)};
        f.lines = {line(r.a.pc)};
        m << k << kOperations[r.memory] << " at " << f.lines[0] << " was reached by only "
          << r.extra << " of the " << lanes << " lanes of SIMD-group "
          << r.a.thread / COREAI_CPU_SIMD_WIDTH << " of threadgroup " << group(r.a)
          << ": lane " << r.b.thread % COREAI_CPU_SIMD_WIDTH << " (thread_position_in_grid "
          << f.threads[1] << ")";
        if (lanes - r.extra > 1) m << " and " << lanes - r.extra - 1 << " more";
        m << " did not take part. Metal leaves SIMD-group matrix operations undefined unless "
             "every lane of the SIMD-group runs them together (Metal Shading Language "
             "specification, 2.4 \"SIMD-group Matrix Data Types\": uniform control flow within "
             "the SIMD-group), and GPUs compute them with all lanes (the CUDA backend's tensor "
             "cores do): branch around them only on values that are the same in every lane of "
             "the SIMD-group, and let every lane reach them instead of returning early.";
        break;
      }
      case Kind::DivergentBarrier:
      case Kind::SimdParticipation: {
        const CodeLocation* la = where.count(r.a.pc) ? &where.at(r.a.pc) : nullptr;
        const CodeLocation* lb = where.count(r.b.pc) ? &where.at(r.b.pc) : nullptr;
        // Copies of one call (an unrolled or unswitched loop) are one call.
        if (la != nullptr && lb != nullptr && la->chain == lb->chain) continue;
        f.threads = {position(r.a), position(r.b)};
        f.lines = {line(r.a.pc), line(r.b.pc)};
        if (r.kind == Kind::DivergentBarrier) {
          f.kind = "divergent barrier";
          m << k << "the threads of threadgroup " << group(r.a)
            << " wait at different threadgroup_barrier calls: the thread at "
               "thread_position_in_grid "
            << f.threads[0] << " at " << f.lines[0] << " and the thread at " << f.threads[1]
            << " at " << f.lines[1]
            << ". Every thread must reach the same barrier; the CPU let them pass together, a "
               "GPU need not.";
        } else {
          f.kind = kParticipationFinding;
          m << k << "lanes of SIMD-group " << r.a.thread / COREAI_CPU_SIMD_WIDTH
            << " of threadgroup " << group(r.a)
            << " reached different SIMD-group function calls at once: lane "
            << r.a.thread % COREAI_CPU_SIMD_WIDTH << " (thread_position_in_grid "
            << f.threads[0] << ") at " << f.lines[0] << " and lane "
            << r.b.thread % COREAI_CPU_SIMD_WIDTH << " (" << f.threads[1] << ") at "
            << f.lines[1]
            << ". Each call runs over the lanes that reach it (Metal's active lanes), so a "
               "reduction or shuffle written for the whole SIMD-group sees only part of it; if "
               "that is not intended, have every lane make the same call (mask values instead "
               "of branching around it).";
        }
        break;
      }
    }
    if (r.count > 1) m << " (" << r.count - 1 << " more like it.)";
    f.message = m.str();
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace coreai_torch::cpu
