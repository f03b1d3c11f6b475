// How much stack a kernel library's code needs, from the per-function frame
// sizes clang writes with -fstack-usage (`<output stem>.su`, one line per
// emitted function: `file:line:column:function<TAB>bytes<TAB>qualifier`).
//
// Metal has no recursion, so a call chain visits each function at most once
// and the sum of the frames a chain can contain bounds its depth. The bound
// counts every emitted function that the entry point may call: more than
// the deepest chain, never less. A function with a dynamic frame (alloca, a
// variable-length array) makes the need unknown (-1).
#pragma once

#include <cstdint>
#include <string>

namespace coreai_torch::cpu {

// Stack space a library's code needs, measured when it was compiled and
// sealed with it in the disk cache (jit/seal.h's notes).
struct StackNeeds {
  int64_t thread_bytes = -1;  // fiber mode: one thread, below the fiber's entry (-1: unknown)
  int64_t group_bytes = -1;   // loop mode: a whole group, below the group entry (-1: unknown)
};

// `su_text`: the contents of the .su file; `kernel_entry`: the name of the
// kernel function in namespace metal (its frame is counted once when the
// entry points inlined it).
StackNeeds measure_stack_needs(const std::string& su_text, const std::string& kernel_entry);

}  // namespace coreai_torch::cpu
