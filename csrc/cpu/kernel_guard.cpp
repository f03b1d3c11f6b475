#include "cpu/kernel_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ucontext.h>  // <ucontext.h> is deprecated on macOS; this one is not
#include <time.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "cpu/x86_division.h"

namespace coreai_torch::cpu {
namespace {

// Integer division traps only on x86-64 (AArch64 and the others return a value).
#if defined(__x86_64__) && (defined(__linux__) || defined(__APPLE__))
#define COREAI_TRAPPING_DIVISION 1
#else
#define COREAI_TRAPPING_DIVISION 0
#endif

// The signal that tells a thread to abandon kernel code. Its default action
// is to do nothing, so a stray one is harmless.
constexpr int kStopSignal = SIGURG;

constexpr size_t kAltStackBytes = 64 * 1024;
// A fault this close to the stack pointer is a stack overflow: with stack
// probes, the access that runs off a stack is at (or just below) the stack
// pointer, and memory there that is not mapped is past the stack's end.
constexpr uintptr_t kNearStackPointer = 64 * 1024;
constexpr int64_t kRecheckMilliseconds = 100;

// ---- what the signal handlers read ----------------------------------------------

// One per OS thread that runs kernel code. Fields the thread's own handlers
// use are volatile; those other threads' handlers read are atomic.
struct ThreadSlot {
  std::atomic<uintptr_t> owner{0};     // pthread_self() of the thread, 0: free
  std::atomic<int> signalling{0};      // a SIGINT handler is signalling it
  std::atomic<int> launch_depth{0};    // > 0: it takes part in a launch
  std::atomic<uint64_t> generation{0};  // interrupt count when that launch began
  volatile sig_atomic_t in_kernel = 0;
  volatile sig_atomic_t shield = 0;
  volatile sig_atomic_t pending_stop = 0;
  volatile sig_atomic_t expect_division = 0;
  volatile sig_atomic_t debug = 0;
  KernelExit exit = KernelExit::Returned;
  uintptr_t fault_address = 0;
  const GuardRange* guards = nullptr;
  size_t guard_count = 0;
  sigjmp_buf resume;
};

constexpr size_t kMaxThreads = 512;
ThreadSlot g_slots[kMaxThreads];
std::atomic<uint64_t> g_interrupts{0};

thread_local ThreadSlot* tls_slot = nullptr;
thread_local const LaunchScope* tls_scope = nullptr;

uintptr_t self_id() {
  const pthread_t self = pthread_self();
  uintptr_t id = 0;
  std::memcpy(&id, &self, sizeof(self) < sizeof(id) ? sizeof(self) : sizeof(id));
  return id;
}

pthread_t thread_of(uintptr_t id) {
  pthread_t t{};
  std::memcpy(&t, &id, sizeof(t) < sizeof(id) ? sizeof(t) : sizeof(id));
  return t;
}

// The calling thread's slot, without thread-local storage (which a signal
// handler must not be the first to touch).
ThreadSlot* find_slot() {
  const uintptr_t self = self_id();
  for (ThreadSlot& s : g_slots) {
    if (s.owner.load(std::memory_order_relaxed) == self) return &s;
  }
  return nullptr;
}

[[noreturn]] void abandon(ThreadSlot* s, const ucontext_t* uc) {
  s->in_kernel = 0;
  // Leaving the handler without returning: restore the mask it interrupted.
  pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, nullptr);
  siglongjmp(s->resume, 1);
}

bool in_range(const GuardRange& r, uintptr_t a) { return a >= r.begin && a < r.end; }

// The stack pointer of an interrupted context (0 where unknown).
uintptr_t stack_pointer(const ucontext_t* uc) {
#if defined(__linux__) && defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__linux__) && defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.sp);
#elif defined(__APPLE__) && defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext->__ss.__rsp);
#elif defined(__APPLE__) && defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext->__ss.__sp);
#else
  (void)uc;
  return 0;
#endif
}

// A fault in a fiber stack's guard page, or next to the stack pointer (the
// end of an OS thread's stack).
bool is_stack_overflow(const ThreadSlot* s, uintptr_t address, const ucontext_t* uc) {
  for (size_t i = 0; i < s->guard_count; ++i) {
    if (in_range(s->guards[i], address)) return true;
  }
  const uintptr_t sp = stack_pointer(uc);
  return sp != 0 && address + kNearStackPointer >= sp && address < sp + kNearStackPointer;
}

// ---- handlers ----------------------------------------------------------------------

constexpr int kSignals[] = {
    SIGINT, kStopSignal, SIGSEGV, SIGBUS,
#if COREAI_TRAPPING_DIVISION
    SIGFPE,
#endif
};

struct sigaction g_previous[NSIG];
std::atomic<bool> g_recheck{true};  // a handler stepped aside: reinstall at the next launch

void call_previous(int sig, siginfo_t* info, void* context) {
  const struct sigaction& p = g_previous[sig];
  if (p.sa_flags & SA_SIGINFO) {
    if (p.sa_sigaction != nullptr) p.sa_sigaction(sig, info, context);
  } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN && p.sa_handler != nullptr) {
    p.sa_handler(sig);
  }
}

// A fault that is not kernel code's: put the previous handler back and return,
// so that the faulting instruction runs again and faults into it.
void step_aside(int sig) {
  sigaction(sig, &g_previous[sig], nullptr);
  g_recheck.store(true, std::memory_order_relaxed);
}

void on_interrupt(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const struct sigaction& p = g_previous[sig];
  if (!(p.sa_flags & SA_SIGINFO) && p.sa_handler == SIG_IGN) return;
  if (!(p.sa_flags & SA_SIGINFO) && p.sa_handler == SIG_DFL) {
    // The process asked to die on SIGINT: let it.
    sigaction(sig, &p, nullptr);
    raise(sig);
    errno = saved_errno;
    return;
  }
  g_interrupts.fetch_add(1);
  for (ThreadSlot& s : g_slots) {
    s.signalling.fetch_add(1);
    const uintptr_t owner = s.owner.load();
    if (owner != 0 && s.launch_depth.load() > 0) pthread_kill(thread_of(owner), kStopSignal);
    s.signalling.fetch_sub(1);
  }
  call_previous(sig, info, context);
  errno = saved_errno;
}

void on_stop(int sig, siginfo_t* info, void* context) {
  ThreadSlot* s = find_slot();
  if (s != nullptr && s->launch_depth.load(std::memory_order_relaxed) > 0 &&
      g_interrupts.load() != s->generation.load(std::memory_order_relaxed)) {
    if (s->in_kernel) {
      if (s->shield > 0) {
        s->pending_stop = 1;
        return;
      }
      s->exit = KernelExit::Interrupted;
      abandon(s, static_cast<const ucontext_t*>(context));
    }
    return;  // between groups: the launcher sees the interrupt count change
  }
  call_previous(sig, info, context);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  ThreadSlot* s = find_slot();
  if (s != nullptr && s->in_kernel && s->shield == 0) {
    // Kernel code faulted: the access did not happen, and abandoning the
    // kernel leaves nothing half done (see the top of kernel_guard.h).
    const auto* uc = static_cast<const ucontext_t*>(context);
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    s->exit = is_stack_overflow(s, address, uc) ? KernelExit::StackOverflow
                                                : KernelExit::InvalidAccess;
    s->fault_address = address;
    abandon(s, uc);
  }
  step_aside(sig);
}

#if COREAI_TRAPPING_DIVISION
#if defined(__linux__)
void load_registers(const ucontext_t* uc, X86Registers& r) {
  const greg_t* g = uc->uc_mcontext.gregs;
  const int order[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                         REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
  for (int i = 0; i < 16; ++i) r.gpr[i] = static_cast<uint64_t>(g[order[i]]);
  r.rip = static_cast<uint64_t>(g[REG_RIP]);
}
void store_registers(ucontext_t* uc, const X86Registers& r) {
  greg_t* g = uc->uc_mcontext.gregs;
  g[REG_RAX] = static_cast<greg_t>(r.gpr[0]);
  g[REG_RDX] = static_cast<greg_t>(r.gpr[2]);
  g[REG_RIP] = static_cast<greg_t>(r.rip);
}
#else  // macOS
void load_registers(const ucontext_t* uc, X86Registers& r) {
  const auto& s = uc->uc_mcontext->__ss;
  const uint64_t values[16] = {s.__rax, s.__rcx, s.__rdx, s.__rbx, s.__rsp, s.__rbp,
                               s.__rsi, s.__rdi, s.__r8,  s.__r9,  s.__r10, s.__r11,
                               s.__r12, s.__r13, s.__r14, s.__r15};
  for (int i = 0; i < 16; ++i) r.gpr[i] = values[i];
  r.rip = s.__rip;
}
void store_registers(ucontext_t* uc, const X86Registers& r) {
  auto& s = uc->uc_mcontext->__ss;
  s.__rax = r.gpr[0];
  s.__rdx = r.gpr[2];
  s.__rip = r.rip;
}
#endif

void on_division(int sig, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  ThreadSlot* s = find_slot();
  if (s != nullptr && s->in_kernel && s->shield == 0) {
    X86Registers regs;
    load_registers(uc, regs);
    if (s->debug && !s->expect_division) {
      s->exit = KernelExit::DivisionFault;
      s->fault_address = regs.rip;
      abandon(s, uc);
    }
    if (complete_x86_division(regs)) {
      s->expect_division = 0;
      store_registers(uc, regs);
      return;
    }
  }
  step_aside(sig);
}
#endif

using Handler = void (*)(int, siginfo_t*, void*);

Handler handler_for(int sig) {
  switch (sig) {
    case SIGINT:
      return &on_interrupt;
    case kStopSignal:
      return &on_stop;
#if COREAI_TRAPPING_DIVISION
    case SIGFPE:
      return &on_division;
#endif
    default:
      return &on_fault;
  }
}

int64_t coarse_milliseconds() {
  timespec ts{};
#ifdef CLOCK_MONOTONIC_COARSE
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

std::atomic<int64_t> g_last_check{-kRecheckMilliseconds};

// Puts our handler in front of whatever handles each signal now.
void ensure_handlers() {
  const int64_t now = coarse_milliseconds();
  if (!g_recheck.load(std::memory_order_relaxed) &&
      now - g_last_check.load(std::memory_order_relaxed) < kRecheckMilliseconds) {
    return;
  }
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  g_recheck.store(false, std::memory_order_relaxed);
  g_last_check.store(now, std::memory_order_relaxed);
  for (int sig : kSignals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0) continue;
    const Handler ours = handler_for(sig);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == ours) continue;
    // An ignored SIGINT stays ignored (a background job; programs it starts
    // inherit that disposition, but not a handler).
    if (sig == SIGINT && !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) {
      continue;
    }
    struct sigaction mine {};
    mine.sa_sigaction = ours;
    sigemptyset(&mine.sa_mask);
    // SIGINT's handler signals threads itself; they act once it is done.
    if (sig == SIGINT) sigaddset(&mine.sa_mask, kStopSignal);
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK;
    // Python relies on EINTR to notice SIGINT in blocking calls: keep the
    // previous handler's choice; SIGURG must not disturb anyone's system calls.
    if (sig == kStopSignal || (current.sa_flags & SA_RESTART)) mine.sa_flags |= SA_RESTART;
    g_previous[sig] = current;
    sigaction(sig, &mine, nullptr);
  }
}

// ---- the interrupt hook ------------------------------------------------------------

std::atomic<InterruptHook> g_interrupt_hook{nullptr};

// A forked child has only the forking thread: the others' slots are stale.
void forget_other_threads_after_fork() {
  const uintptr_t self = self_id();
  for (ThreadSlot& s : g_slots) {
    if (s.owner.load() != self) {
      s.owner.store(0);
      s.launch_depth.store(0);
    }
  }
}

}  // namespace

// ---- LaunchScope -------------------------------------------------------------------

LaunchScope::LaunchScope(bool debug)
    : generation_(0), debug_(debug), thread_(&KernelThread::current()), previous_(tls_scope) {
  ensure_handlers();
  generation_ = g_interrupts.load();
  thread_->join(generation_, debug);
  tls_scope = this;
}

LaunchScope::~LaunchScope() {
  tls_scope = previous_;
  thread_->leave();
}

bool LaunchScope::interrupted() const { return g_interrupts.load() != generation_; }

const LaunchScope* LaunchScope::current() { return tls_scope; }

// ---- KernelThread ------------------------------------------------------------------

KernelThread& KernelThread::current() {
  thread_local KernelThread thread;
  return thread;
}

KernelThread::KernelThread() {
  static std::once_flag fork_handler;
  std::call_once(fork_handler,
                 [] { pthread_atfork(nullptr, nullptr, &forget_other_threads_after_fork); });
  const uintptr_t self = self_id();
  for (ThreadSlot& s : g_slots) {
    uintptr_t expected = 0;
    if (s.owner.compare_exchange_strong(expected, self)) {
      slot_ = &s;
      break;
    }
  }
  // No slot (more than kMaxThreads threads launch kernels): this thread runs
  // kernel code unguarded.
  if (slot_ == nullptr) return;
  tls_slot = static_cast<ThreadSlot*>(slot_);

  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
    void* base = mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (base != MAP_FAILED) {
      stack_t ss{};
      ss.ss_sp = base;
      ss.ss_size = kAltStackBytes;
      if (sigaltstack(&ss, nullptr) == 0) {
        alt_stack_ = base;
        alt_stack_bytes_ = kAltStackBytes;
      } else {
        munmap(base, kAltStackBytes);
      }
    }
  }
}

KernelThread::~KernelThread() {
  auto* s = static_cast<ThreadSlot*>(slot_);
  if (s == nullptr) return;
  tls_slot = nullptr;
  s->owner.store(0);
  // A SIGINT handler on another thread may be about to signal this one.
  while (s->signalling.load() != 0) {
  }
  s->launch_depth.store(0);
  if (alt_stack_ != nullptr) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    munmap(alt_stack_, alt_stack_bytes_);
  }
}

void KernelThread::join(uint64_t generation, bool debug) {
  auto* s = static_cast<ThreadSlot*>(slot_);
  if (s == nullptr) return;
  s->generation.store(generation, std::memory_order_relaxed);
  s->debug = debug ? 1 : 0;
  // A full fence (the read-modify-write): a SIGINT handler either sees this
  // thread in the launch, or this thread sees its interrupt count in run().
  s->launch_depth.fetch_add(1);
}

void KernelThread::leave() {
  // No fence needed: a SIGINT handler that still sees the old depth sends a
  // stop signal that finds no launch and does nothing.
  auto* s = static_cast<ThreadSlot*>(slot_);
  if (s != nullptr) {
    s->launch_depth.store(s->launch_depth.load(std::memory_order_relaxed) - 1,
                          std::memory_order_release);
  }
}

KernelExit KernelThread::run(void (*fn)(void*), void* arg) {
  ThreadSlot* const s = static_cast<ThreadSlot*>(slot_);
  if (s == nullptr) {
    fn(arg);
    return KernelExit::Returned;
  }
  s->exit = KernelExit::Returned;
  s->pending_stop = 0;
  s->expect_division = 0;
  if (sigsetjmp(s->resume, 0) != 0) return s->exit;  // abandoned by a handler
  s->in_kernel = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (g_interrupts.load() != s->generation.load(std::memory_order_relaxed)) {
    s->in_kernel = 0;
    return KernelExit::Interrupted;
  }
  fn(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s->in_kernel = 0;
  return KernelExit::Returned;
}

uintptr_t KernelThread::fault_address() const {
  const auto* s = static_cast<const ThreadSlot*>(slot_);
  return s == nullptr ? 0 : s->fault_address;
}

void KernelThread::set_stack_guards(const GuardRange* ranges, size_t count) {
  auto* s = static_cast<ThreadSlot*>(slot_);
  if (s == nullptr) return;
  s->guard_count = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s->guards = ranges;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s->guard_count = count;
}

size_t KernelThread::stack_left() {
  if (stack_low_ == 0) {  // looked up once: for the main thread it reads /proc/self/maps
#if defined(__APPLE__)
    const auto top = reinterpret_cast<uintptr_t>(pthread_get_stackaddr_np(pthread_self()));
    stack_low_ = top - pthread_get_stacksize_np(pthread_self());
#else
    pthread_attr_t attributes;
    if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
      void* low = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attributes, &low, &size) == 0) {
        stack_low_ = reinterpret_cast<uintptr_t>(low);
      }
      pthread_attr_destroy(&attributes);
    }
#endif
    if (stack_low_ == 0) stack_low_ = 1;  // unknown: do not look again
  }
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (stack_low_ == 1 || here <= stack_low_) return SIZE_MAX;
  return here - stack_low_;
}

void KernelThread::expect_division_fault() {
  if (auto* s = static_cast<ThreadSlot*>(slot_)) s->expect_division = 1;
}

KernelThread::Shield::Shield() : slot_(tls_slot) {
  if (auto* s = static_cast<ThreadSlot*>(slot_)) s->shield = s->shield + 1;
}

KernelThread::Shield::~Shield() {
  auto* s = static_cast<ThreadSlot*>(slot_);
  if (s == nullptr) return;
  s->shield = s->shield - 1;
  if (s->shield == 0 && s->pending_stop && s->in_kernel) {
    s->pending_stop = 0;
    // The stop signal's handler abandons the kernel code now. Jumping from
    // the handler (on the alternate stack) rather than from here (on a fiber
    // stack) also satisfies glibc's checked longjmp.
    raise(kStopSignal);
  }
}

// ---- interrupts --------------------------------------------------------------------

void set_interrupt_hook(InterruptHook hook) { g_interrupt_hook.store(hook); }

void throw_interrupted(const std::string& message) {
  if (InterruptHook hook = g_interrupt_hook.load()) hook(message);
  C10_THROW_ERROR(Error, message);
}

}  // namespace coreai_torch::cpu
