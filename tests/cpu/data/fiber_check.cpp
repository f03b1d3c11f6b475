// Checks csrc/cpu/fiber.cpp on its own: the order in which fibers run, values
// kept in callee-saved registers across switches, deep stacks, and the cost of
// a switch. Prints "ok <nanoseconds per switch>" or the first failure.
#include <cstdio>
#include <cstring>

#include "cpu/fiber.h"

using coreai_torch::cpu::FiberContext;
using coreai_torch::cpu::FiberStack;
using coreai_torch::cpu::fiber_prepare;
using coreai_torch::cpu::fiber_switch;

namespace {

struct Ring {
  FiberContext main;
  FiberContext fibers[3];
  int log[64];
  int logged = 0;
  int rounds = 5;
  bool corrupted = false;
};

Ring ring;

// Recursion keeps values live in registers and on the stack across switches.
__attribute__((noinline)) long deep(int id, int depth, long acc) {
  if (depth == 0) {
    ring.log[ring.logged++] = id;
    fiber_switch(ring.fibers[id], ring.fibers[(id + 1) % 3]);
    return acc;
  }
  volatile char pad[512];
  std::memset(const_cast<char*>(pad), depth, sizeof(pad));
  return deep(id, depth - 1, acc * 3 + depth) + pad[7];
}

void entry(void* arg) {
  const int id = static_cast<int>(reinterpret_cast<long>(arg));
  double kept = 0.5 * id;
  for (int r = 0; r < ring.rounds; ++r) {
    const long expected = [&] {
      long acc = 1;
      for (int d = 20; d >= 1; --d) acc = acc * 3 + d;
      long sum = acc;
      for (int d = 1; d <= 20; ++d) sum += d;
      return sum;
    }();
    if (deep(id, 20, 1) != expected || kept != 0.5 * id) ring.corrupted = true;
    kept += 1.0;
    kept -= 1.0;
  }
  fiber_switch(ring.fibers[id], ring.main);
}

}  // namespace

int main() {
  FiberStack stacks[3] = {FiberStack(256 * 1024), FiberStack(256 * 1024), FiberStack(256 * 1024)};
  for (long i = 0; i < 3; ++i) {
    fiber_prepare(ring.fibers[i], stacks[i], &entry, reinterpret_cast<void*>(i), 64 * i);
  }
  fiber_switch(ring.main, ring.fibers[0]);
  // Fiber 0 returns to main once the others have logged their last round too
  // (they are then left suspended, as an abandoned fiber would be).
  if (ring.corrupted) {
    std::printf("a fiber's registers or stack changed across a switch\n");
    return 1;
  }
  const int expected_logged = 3 * ring.rounds;
  if (ring.logged != expected_logged) {
    std::printf("logged %d switches, expected %d\n", ring.logged, expected_logged);
    return 1;
  }
  for (int k = 0; k < ring.logged; ++k) {
    if (ring.log[k] != k % 3) {
      std::printf("switch %d went to fiber %d, expected %d\n", k, ring.log[k], k % 3);
      return 1;
    }
  }
  std::printf("ok %.1f\n", coreai_torch::cpu::fiber_switch_nanoseconds(200000));
  return 0;
}
