// Mutexes a forked child gets unlocked.
//
// fork() copies a mutex that another thread holds as locked, and that thread
// does not exist in the child: a child that compiles would wait forever on the
// compiler search, the headers' digest or a counter its parent was in the
// middle of. Each mutex made here is made anew, unlocked, in the child. What
// such a mutex guards is published whole (a found compiler, a digest), so the
// child sees it either there or not yet.
#pragma once

#include <mutex>

namespace coreai_torch::jit {

// A new process-lifetime mutex, unlocked again in every forked child.
std::mutex& child_unlocked_mutex();

}  // namespace coreai_torch::jit
