// The files of the CPU backend's disk cache: sealing a compiled kernel library
// with its size, digest and measured stack needs, checking that seal before a
// library is loaded, and keeping the directory under a size limit.
//
// A cached library is `<key>.so`: the shared object exactly as the compiler
// wrote it, followed by a fixed-size trailer (ELF and Mach-O loaders ignore
// bytes past the end of what the file's headers describe):
//
//   magic "coreai-kernel-v1" (16 bytes)
//   payload size, thread stack bytes, group stack bytes (3 x int64, little endian)
//   SHA-256 of everything before the digest (32 bytes)
//
// A file whose trailer is missing, whose size differs or whose digest does
// not match was truncated or damaged after it was written; it is never
// loaded, and the JIT compiles it again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace coreai_torch::cpu {

// Stack space a library's code needs, measured at compile time (stack_usage.h).
struct StackNeeds {
  int64_t thread_bytes = -1;  // fiber mode: one thread, below the fiber's entry (-1: unknown)
  int64_t group_bytes = -1;   // loop mode: a whole group, below the group entry (-1: unknown)
};

// Appends the trailer to the library at `path` (just compiled, not yet published).
// Returns false with `error` set when the file cannot be read or written.
bool seal_library(const std::string& path, const StackNeeds& needs, std::string& error);

// The stack needs recorded in an intact sealed library; nullopt (and `why`)
// when the file is missing, truncated, damaged or not sealed by this version.
std::optional<StackNeeds> check_sealed_library(const std::string& path, std::string& why);

// Marks a cached library as used now (its modification time is the
// least-recently-used clock) and as loaded by this process, which never
// evicts it afterwards.
void note_library_in_use(const std::string& path);

// The disk cache limit: $COREAI_TORCH_CACHE_MAX_BYTES (a number of bytes,
// optionally with a K, M or G suffix: powers of 1024), else 1 GiB.
int64_t cache_limit_bytes();

// Deletes least-recently-used libraries (with their kept sources) until the
// cache directory holds at most cache_limit_bytes(), never one this process
// has loaded; also removes temporary files that a killed process left behind.
// Safe against other processes doing the same, or loading, at the same time.
void evict_least_recently_used(const std::string& dir);

}  // namespace coreai_torch::cpu
