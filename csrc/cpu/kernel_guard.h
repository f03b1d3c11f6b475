// Faults and interrupts in kernel code. Kernel code is C++ compiled from the
// user's Metal source: it may overflow its stack, divide an integer by zero
// or loop forever, and it cannot throw. This module runs it so that each of
// these comes back to the launcher as a value, never as a dead process:
//
// - Kernels are compiled with stack probes, so a frame too large for its
//   stack touches the stack's guard page first. The SIGSEGV (SIGBUS on macOS)
//   handler abandons kernel code that faults, and tells an overflow (a fault
//   in a fiber stack's guard page or next to the stack pointer) from any other
//   bad access.
// - An integer division that traps (x86-64's `div`/`idiv`: x / 0, INT_MIN / -1)
//   is completed by the SIGFPE handler with AArch64's results and execution
//   goes on (x86_division.h); in debug mode an unreported one is abandoned.
// - SIGINT during a launch stops it: the handler counts the interrupt, sends
//   SIGURG to every OS thread that takes part in a launch, then calls the
//   handler it replaced (Python's, which makes Python raise KeyboardInterrupt).
//   A thread that gets SIGURG while in kernel code abandons it; the others see
//   the count change between threadgroups. A launch in a compile stops the
//   compiler.
//
// Abandoning is a siglongjmp from the handler, which runs on an alternate
// signal stack, back into KernelThread::run. That is sound because kernel
// code holds no locks and owns no heap memory; the launcher services it calls
// that do (reports of problems) are shielded: an interrupt that arrives while
// one runs takes effect when it returns.
//
// The handlers are installed at the first launch and kept; a launch checks at
// most every 100 ms that they are still installed (Python's signal.signal or
// faulthandler.enable replace them) and puts them back in front of whatever
// replaced them. A signal that is not about kernel code goes to the handler
// that was installed before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace coreai_torch::cpu {

// Why kernel code stopped.
enum class KernelExit : uint8_t {
  Returned,       // it ran to the end
  Interrupted,    // SIGINT
  StackOverflow,  // it touched the guard region of its stack
  InvalidAccess,  // it touched memory that is not mapped (or not writable)
  DivisionFault,  // debug mode: a trapping integer division it had not reported
};

// An inaccessible region below a stack: [begin, end).
struct GuardRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

// One launch on the calling thread, from before its compile to its end: while
// it exists, SIGINT stops the launch (and a compile it waits for).
class LaunchScope {
 public:
  // `debug`: the launch is in debug mode.
  explicit LaunchScope(bool debug);
  ~LaunchScope();
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

  // The interrupt count when the launch began: workers join with it.
  uint64_t generation() const { return generation_; }
  bool debug() const { return debug_; }
  // The launching thread (workers use KernelThread::current()).
  class KernelThread& thread() const { return *thread_; }
  // True once a SIGINT has arrived since the launch began.
  bool interrupted() const;
  // The scope of the launch running on this thread, or nullptr.
  static const LaunchScope* current();

 private:
  uint64_t generation_;
  bool debug_;
  class KernelThread* thread_;
  const LaunchScope* previous_;
};

// The calling OS thread as a runner of kernel code.
class KernelThread {
 public:
  // Registers the calling thread on first use: an alternate signal stack if it
  // has none, and the bounds of its own stack.
  static KernelThread& current();

  // While joined, SIGINT for the launch that began at `generation` reaches
  // this thread. `debug`: the launch is in debug mode. Joins nest.
  void join(uint64_t generation, bool debug);
  void leave();

  // Runs fn(arg) as kernel code; `Returned` unless a fault or an interrupt
  // abandoned it (then fault_address() says where, for a stack overflow).
  KernelExit run(void (*fn)(void*), void* arg);
  uintptr_t fault_address() const;

  // Guard regions of the stacks kernel code may run on besides this thread's
  // own (fiber stacks); the array must outlive the kernel code's run.
  void set_stack_guards(const GuardRange* ranges, size_t count);

  // Bytes of this OS thread's own stack below the caller's frame (a large
  // number if the bounds are unknown).
  size_t stack_left();

  // Debug mode: the kernel reported a division that is about to trap; it is
  // completed silently (the report already fails the launch).
  void expect_division_fault();

  // Marks a launcher service called from kernel code: an interrupt waits
  // until it returns (it may hold a lock or allocate).
  class Shield {
   public:
    Shield();
    ~Shield();
    Shield(const Shield&) = delete;
    Shield& operator=(const Shield&) = delete;

   private:
    void* slot_;
  };

  ~KernelThread();

 private:
  KernelThread();
  void* slot_ = nullptr;        // its entry in the table the signal handlers read
  void* alt_stack_ = nullptr;   // the alternate signal stack it mapped, if any
  size_t alt_stack_bytes_ = 0;
  uintptr_t stack_low_ = 0;     // lowest address of its own stack (0: not looked up, 1: unknown)
};

// Raises the exception for a launch stopped by SIGINT. Python builds register
// a hook that raises KeyboardInterrupt (or whatever Python's SIGINT handler
// raises); without one, a c10::Error saying so.
using InterruptHook = void (*)(const std::string& message);
void set_interrupt_hook(InterruptHook hook);
[[noreturn]] void throw_interrupted(const std::string& message);

}  // namespace coreai_torch::cpu
