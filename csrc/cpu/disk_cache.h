// The files of the kernel disk cache, shared by the CPU and the CUDA backend:
// sealing a compiled artifact with its size, digest and (CPU) measured stack
// needs, checking that seal before an artifact is used, and keeping the
// directory under a size limit.
//
// The cache directory holds, each named by the 64-hex-digit key of what it
// was built from:
//   <key>.so     CPU: a kernel library (sealed), with <key>.cpp, its source
//   <key>.ptx    CUDA: a kernel's PTX (sealed), with <key>.cu, its source
//   <key>.cubin  CUDA: the PTX compiled by the driver for one GPU (sealed)
//   <key>.pch    CUDA: the Metal headers precompiled for one set of flags
// A sealed file is the artifact exactly as the compiler wrote it, followed by
// a fixed-size trailer (ELF and Mach-O loaders ignore bytes past the end of
// what the file's headers describe; the CUDA backend strips it):
//
//   magic "coreai-kernel-v1" (16 bytes)
//   payload size, thread stack bytes, group stack bytes (3 x int64, little endian)
//   SHA-256 of everything before the digest (32 bytes)
//
// A file whose trailer is missing, whose size differs or whose digest does
// not match was truncated or damaged after it was written; it is never
// used, and the JIT compiles it again.
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

// Appends the trailer to the artifact at `path` (just compiled, not yet
// published). Returns false with `error` set when the file cannot be read or
// written.
bool seal_cache_file(const std::string& path, const StackNeeds& needs, std::string& error);

// The stack needs recorded in an intact sealed file; nullopt (and `why`)
// when the file is missing, truncated, damaged or not sealed by this version.
std::optional<StackNeeds> check_sealed_file(const std::string& path, std::string& why);

// The artifact in an intact sealed file, without its trailer; nullopt (and
// `why`) as for check_sealed_file.
std::optional<std::string> read_sealed_file(const std::string& path, std::string& why);

// Marks a cached file as used now (its modification time is the
// least-recently-used clock) and as used by this process, which never evicts
// it afterwards.
void note_cache_file_in_use(const std::string& path);

// Writes `contents` to `path` with private permissions (0600); throws a
// c10::Error naming the file when it cannot.
void write_private_file(const std::string& path, const std::string& contents);

// A suffix that makes temporary file names unique between processes and threads.
std::string unique_suffix();

// The disk cache limit: $COREAI_TORCH_CACHE_MAX_BYTES (a number of bytes,
// optionally with a K, M or G suffix: powers of 1024), else 1 GiB.
int64_t cache_limit_bytes();

// Deletes least-recently-used artifacts (with their kept sources) until the
// cache directory holds at most cache_limit_bytes(), never one this process
// has used; also removes temporary files that a killed process left behind.
// Safe against other processes doing the same, or loading, at the same time.
void evict_least_recently_used(const std::string& dir);

}  // namespace coreai_torch::cpu
