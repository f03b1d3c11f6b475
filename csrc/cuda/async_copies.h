// Tile copies from device to threadgroup memory as asynchronous copies.
//
// A tiled kernel copies its tiles into threadgroup memory before a barrier:
// `*(threadgroup uint4*)dst = *(device const uint4*)src`. On the GPU each
// such copy is a 16-byte load into registers, a wait for it, and a store.
// `cp.async` (sm_80 and later) copies global to shared memory without the
// registers and without waiting: a thread issues all of its copies, then
// waits once (`cp.async.wait_all`). The copy is made where the kernel's IR
// shows one: a 16-byte load from a kernel buffer whose value only a store to
// a threadgroup array takes, 16-byte aligned, in the same block, with nothing
// between them that writes memory. The source address is tested at run time
// (cp.async moves 16 bytes from 16-byte aligned addresses only) unless the IR
// proves it aligned; otherwise the copy runs as it was.
//
// Metal's copy is visible to the copying thread at once. So the copying
// thread waits for its copies before the first instruction after them that
// touches memory or synchronises (a load, a store, a call, a barrier) and
// before it returns; other threads see the tile after the barrier, as in
// Metal.
#pragma once

#include "cuda/known_alignment.h"
#include "cuda/vector_access.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::cuda {

// One copy: the load, and the store that takes its value.
struct AsyncCopy {
  Access load;
  Access store;
  size_t store_line = 0;
  bool source_aligned = false;  // the IR proves it 16-byte aligned
};

// The copies of one function (its lines, the `define` line first) that can
// be asynchronous, keyed by their load's line. Only in a kernel entry
// (@coreai_cuda_kernel), whose pointer parameters are device buffers.
std::map<size_t, AsyncCopy> find_async_copies(const std::vector<std::string_view>& lines,
                                              KnownAlignment& known);

// The copy as it is written in place of its store: a test of the source's
// alignment (unless proven), `cp.async` on one side, the load (its result
// named `%<id>.value`) and the store as they were on the other. Splits the
// block: what follows is in `%<id>.join`.
std::string async_copy(const AsyncCopy& copy, const std::string& id);

// `ir` with `cp.async.wait_all` where a thread may have copies in flight,
// before the first instruction that touches memory or synchronises, and
// before each return; and the intrinsics declared.
std::string wait_for_async_copies(const std::string& ir);

}  // namespace coreai_torch::cuda
