// Fiber mode of the CPU backend, on the kernel library's side: the scheduler
// of one threadgroup's fibers, its barriers, the rendezvous of SIMD-group
// functions and the lockstep points of threadgroup memory (docs/cpu.md,
// "Fiber mode"). The launcher maps the stacks and fills in a
// coreai_cpu_fibers (cpu_abi.h); everything that runs while the group runs is
// here, compiled into the kernel: a barrier is a direct call that switches
// straight to the next thread's fiber, with no indirect call and no
// thread-local lookup.
//
// Scheduling is cooperative, on one OS thread, in thread-index order. A thread
// runs until it must wait (a barrier, a SIMD-group function, a lockstep point)
// or returns; the next runnable thread after it resumes. Only threads that are
// still running are waited for.
//
// SIMD-group functions operate over the active lanes (Metal Shading Language
// specification, 6.9.2 "SIMD-Group Functions": the active threads are the
// ones executing the call; threads that have returned, or that control flow
// took elsewhere, are inactive). A lane that reaches one waits while another
// lane of its SIMD-group can still run. Once none can, the lanes waiting at
// one call site are released together: a call site is the chain of return
// addresses from the rendezvous up to the thread's entry, so the two calls of
// `if (c) a = f(x); else b = f(y);` (f inlined or not) are different sites,
// and lanes at different sites form groups of their own. The site released
// first is the one earliest in the source (helper_src before src, then line
// and column): structured control flow reaches a later site only after the
// earlier ones, so lanes that left a loop or an `if` early wait at the join
// for the lanes still inside it, as the GPU's reconvergence does.
//
// Lockstep: the lanes of a SIMD-group run in step on the GPU, and kernels pass
// values between them through threadgroup memory without a barrier (ggml's
// vector flash attention). Here they run one after another between waits, so
// every access to threadgroup memory says what it is (lockstep namespace
// below, filled in by the source pass, csrc/cpu/source_scan.h): a lane that
// goes from reading to writing, or from writing to reading, waits until the
// other lanes of its SIMD-group have done their accesses up to the same point
// (until each has switched too, or waits elsewhere, or returned). Runs of
// reads, and runs of writes, need no waiting: no lane can see another's
// access inside one. An access whose kind the source pass cannot tell
// (`t[i] += x`, `&t[i]` handed on) is a point of its own.
#ifndef COREAI_MSL_FIBER_RUNTIME_H
#define COREAI_MSL_FIBER_RUNTIME_H

#include <cstdint>
#include <cstring>

#include "cpu_abi.h"

// 1 in kernels the JIT runs in fiber mode, 0 in loop mode (and when a header
// is compiled on its own).
#ifndef COREAI_CPU_FIBER_MODE
#define COREAI_CPU_FIBER_MODE 0
#endif

#if COREAI_CPU_FIBER_MODE
#define COREAI_FIBER_SWITCH_DEFINITION 1
#include "fiber_switch.h"
#endif

// A function whose calls must stay where they are in the control flow: the
// set of lanes that reach a call together is what the call operates over. The
// JIT compiles fiber-mode kernels with -fconvergent-functions (so that user
// helpers are convergent too) and -fno-omit-frame-pointer (the call-site walk).
#define COREAI_CONVERGENT [[clang::convergent]]

namespace coreai::lockstep {

// What an access to threadgroup memory does.
enum kind : std::uint8_t { none = 0, read = 1, write = 2, other = 3 };

}  // namespace coreai::lockstep

#if COREAI_CPU_FIBER_MODE

namespace coreai::fiber {

inline constexpr unsigned kWidth = COREAI_CPU_SIMD_WIDTH;

// The group this OS thread runs (set by run_fibers).
inline thread_local coreai_cpu_fibers* tls_group = nullptr;

// The lane running this code. A fiber runs the same lane all its life, so the
// answer is constant wherever it is asked: `const` lets the compiler ask once
// per function, and `noconvergent` lets it hoist the call out of loops.
[[gnu::const, gnu::noinline, clang::noconvergent]] inline coreai_cpu_lane* current_lane() {
  return &tls_group->lanes[tls_group->current];
}

inline unsigned lane_of(const coreai_cpu_lane* me) { return me->info.index % kWidth; }
inline coreai_cpu_simdgroup& simd_of(coreai_cpu_fibers* f, const coreai_cpu_lane* me) {
  return f->simds[me->info.index / kWidth];
}

// Index of the next runnable thread after `from`, or -1.
inline std::int64_t next_runnable(const coreai_cpu_fibers* f, std::uint32_t from) {
  const std::uint32_t n = f->thread_count;
  std::uint32_t k = from;
  for (std::uint32_t step = 0; step < n; ++step) {
    k = k + 1 == n ? 0 : k + 1;
    if (f->lanes[k].status == COREAI_CPU_RUNNABLE) return k;
  }
  return -1;
}

inline void make_runnable(coreai_cpu_simdgroup& sg, coreai_cpu_fibers* f, std::uint32_t first,
                          std::uint32_t mask) {
  sg.runnable += static_cast<std::uint32_t>(__builtin_popcount(mask));
  for (; mask != 0; mask &= mask - 1) {
    f->lanes[first + static_cast<std::uint32_t>(__builtin_ctz(mask))].status = COREAI_CPU_RUNNABLE;
  }
}

// Once no lane of SIMD-group `s` can run, the waiting lanes whose position
// comes first in the source go on: the lanes at that lockstep point, or the
// lanes at that SIMD-group call site, which exchange their values.
[[gnu::noinline]] inline void settle(coreai_cpu_fibers* f, std::uint32_t s) {
  coreai_cpu_simdgroup& sg = f->simds[s];
  const std::uint32_t first = s * kWidth;
  const std::uint32_t all = sg.waiting | sg.lockstep;
  if (all == 0) return;
  unsigned pick = static_cast<unsigned>(__builtin_ctz(all));
  for (std::uint32_t m = all & (all - 1); m != 0; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
    if (sg.order[l] < sg.order[pick]) pick = l;
  }
  std::uint32_t mask = 0;
  if ((sg.lockstep >> pick) & 1u) {
    for (std::uint32_t m = sg.lockstep; m != 0; m &= m - 1) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
      if (sg.order[l] == sg.order[pick]) mask |= 1u << l;
    }
    sg.lockstep &= ~mask;
  } else {
    for (std::uint32_t m = sg.waiting; m != 0; m &= m - 1) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
      if (sg.site[l] == sg.site[pick]) {
        mask |= 1u << l;
        std::memcpy(sg.view[l], sg.in[l], COREAI_CPU_SIMD_SLOT_BYTES);
      }
    }
    sg.waiting &= ~mask;
    sg.view_active = mask;
    sg.combined_ready = 0;
  }
  make_runnable(sg, f, first, mask);
}

[[noreturn]] inline void leave_for_launcher(coreai_cpu_fibers* f, coreai_cpu_lane* me) {
  coreai_fiber_switch(&me->context, f->main_context);
  __builtin_unreachable();  // an abandoned or finished fiber is never resumed
}

// The caller has set its own status to a waiting one; returns once it is
// runnable again, having run the other threads in the meantime.
inline void wait(coreai_cpu_fibers* f, coreai_cpu_lane* me) {
  coreai_cpu_simdgroup& sg = simd_of(f, me);
  if (--sg.runnable == 0) settle(f, me->info.index / kWidth);
  if (me->status == COREAI_CPU_RUNNABLE) return;  // released by its own arrival
  const std::int64_t next = next_runnable(f, f->current);
  if (next < 0) {
    // Nobody can release this thread (cannot happen with the rules above,
    // kept so that a fault in them ends the group instead of hanging it).
    f->stuck = 1;
    leave_for_launcher(f, me);
  }
  const std::uint32_t mine = f->current;
  f->current = static_cast<std::uint32_t>(next);
  coreai_fiber_switch(&me->context, f->lanes[next].context);
  f->current = mine;  // resumed: whoever switched back set it already
}

inline void release_barrier(coreai_cpu_fibers* f) {
  f->at_barrier = 0;
  const std::uint32_t n = f->thread_count;
  for (std::uint32_t k = 0; k < n; ++k) {
    coreai_cpu_lane& t = f->lanes[k];
    if (t.status == COREAI_CPU_AT_BARRIER) {
      t.status = COREAI_CPU_RUNNABLE;
      ++f->simds[k / kWidth].runnable;
    }
  }
}

// threadgroup_barrier: waits until every thread of the group that is still
// running arrives. All fibers share one OS thread, so program order already
// makes every write visible to the threads resumed after it.
// `me` is current_lane(), which the caller asks for inline: a const call, so
// the compiler asks once per function, not once per barrier.
COREAI_CONVERGENT [[gnu::noinline]] inline void threadgroup_barrier(coreai_cpu_lane* me) {
  coreai_cpu_fibers* f = me->fibers;
  me->access = lockstep::none;
  if (++f->at_barrier == f->running) {
    release_barrier(f);  // the last to arrive carries on
    return;
  }
  me->status = COREAI_CPU_AT_BARRIER;
  wait(f, me);
}

// The call site of the rendezvous that called this: the source position of
// the user's call, and the return addresses from the caller up to the fiber's
// entry (a helper called from two places gives two sites). The position is
// part of the key because the optimiser may merge two calls of one function
// on both sides of an `if` into one call whose arguments are selected.
[[gnu::always_inline]] inline std::uint64_t call_site(const coreai_cpu_lane* me,
                                                       void* const* frame, std::uint64_t order) {
  std::uint64_t key = (0x9E3779B97F4A7C15ull ^ order) * 0x100000001B3ull;
  const auto low = reinterpret_cast<std::uintptr_t>(me->stack_bottom);
  const auto high = reinterpret_cast<std::uintptr_t>(me->stack_top);
  for (int depth = 0; depth < 64; ++depth) {
    const auto at = reinterpret_cast<std::uintptr_t>(frame);
    if (frame == me->entry_frame || at < low || at >= high) break;
    key = (key ^ reinterpret_cast<std::uintptr_t>(frame[1])) * 0x100000001B3ull;
    frame = static_cast<void* const*>(frame[0]);
  }
  return key;
}

// Publishes `size` bytes of `value` as the caller's lane value and waits for
// the lanes of its SIMD-group that call from the same site; returns the
// SIMD-group, whose `view` then holds their values (view_active: who took part).
// `me`: current_lane(), as for threadgroup_barrier.
COREAI_CONVERGENT [[gnu::noinline]] inline const coreai_cpu_simdgroup* rendezvous(
    coreai_cpu_lane* me, const void* value, std::uint32_t size, std::uint64_t order) {
  coreai_cpu_fibers* f = me->fibers;
  coreai_cpu_simdgroup& sg = simd_of(f, me);
  const unsigned lane = lane_of(me);
  sg.site[lane] =
      call_site(me, static_cast<void* const*>(__builtin_frame_address(0)), order);
  sg.order[lane] = order;
  if (size > 0) std::memcpy(sg.in[lane], value, size);
  sg.waiting |= 1u << lane;
  me->access = lockstep::none;
  me->status = COREAI_CPU_AT_SIMD;
  wait(f, me);
  return &sg;
}

// A lockstep point: the caller's SIMD-group catches up with it. `order`:
// the access's position in the source (0 when the source pass did not see it).
COREAI_CONVERGENT [[gnu::noinline]] inline void catch_up(coreai_cpu_lane* me, lockstep::kind k,
                                                        std::uint64_t order) {
  if (me->access != lockstep::none) {
    coreai_cpu_fibers* f = me->fibers;
    coreai_cpu_simdgroup& sg = simd_of(f, me);
    sg.order[lane_of(me)] = order;
    sg.lockstep |= 1u << lane_of(me);
    me->status = COREAI_CPU_AT_LOCKSTEP;
    wait(f, me);
  }
  me->access = k;
}

[[noreturn]] inline void finish(coreai_cpu_fibers* f, coreai_cpu_lane* me) {
  me->status = COREAI_CPU_DONE;
  --f->running;
  coreai_cpu_simdgroup& sg = simd_of(f, me);
  --sg.runnable;
  // The threads waiting for this one no longer need to.
  if (f->at_barrier > 0 && f->at_barrier == f->running) release_barrier(f);
  if (sg.runnable == 0) settle(f, me->info.index / kWidth);
  const std::int64_t next = next_runnable(f, f->current);
  if (next < 0) {
    f->stuck = f->running > 0;
    leave_for_launcher(f, me);
  }
  f->current = static_cast<std::uint32_t>(next);
  coreai_fiber_switch(&me->context, f->lanes[next].context);
  __builtin_unreachable();  // a finished fiber is never resumed
}

using thread_body = void (*)(void* const* args, const coreai_cpu_group* group,
                             const coreai_cpu_thread* thread);

template <thread_body Body>
[[noreturn]] void fiber_main(void* arg) {
  auto* f = static_cast<coreai_cpu_fibers*>(arg);
  coreai_cpu_lane* me = &f->lanes[f->current];
  me->entry_frame = __builtin_frame_address(0);
  Body(f->args, f->group, &me->info);
  finish(f, me);
}

// Runs the group the launcher prepared until every thread has returned (or
// none can run: f->stuck).
template <thread_body Body>
void run_fibers(coreai_cpu_fibers* f) {
  tls_group = f;
  const std::uint32_t n = f->thread_count;
  for (std::uint32_t k = 0; k < n; ++k) {
    coreai_cpu_lane& t = f->lanes[k];
    t.context = coreai_fiber_prepare(t.stack_top, t.stack_bottom, &fiber_main<Body>, f);
    t.fibers = f;
    t.status = COREAI_CPU_RUNNABLE;
    t.access = lockstep::none;
  }
  for (std::uint32_t s = 0; s * kWidth < n; ++s) {
    coreai_cpu_simdgroup& sg = f->simds[s];
    sg.runnable = n - s * kWidth < kWidth ? n - s * kWidth : kWidth;
    sg.waiting = 0;
    sg.lockstep = 0;
  }
  f->running = n;
  f->at_barrier = 0;
  f->current = 0;
  f->stuck = 0;
#if COREAI_FIBER_UCONTEXT
  thread_local ucontext_t launcher_context;
  f->main_context = &launcher_context;
#endif
  coreai_fiber_switch(&f->main_context, f->lanes[0].context);
}

}  // namespace coreai::fiber

#endif  // COREAI_CPU_FIBER_MODE

namespace coreai::lockstep {

// Called before each access to threadgroup memory (address_space.h), with
// the access's position in the source when the source pass knows it.
[[gnu::always_inline]] inline void access(kind k, std::uint64_t order = 0) {
#if COREAI_CPU_FIBER_MODE
  coreai_cpu_lane* me = coreai::fiber::current_lane();
  if (__builtin_expect(me->access == k && k != other, 1)) return;
  coreai::fiber::catch_up(me, k, order);
#else
  (void)k;
  (void)order;
#endif
}

}  // namespace coreai::lockstep

#endif  // COREAI_MSL_FIBER_RUNTIME_H
