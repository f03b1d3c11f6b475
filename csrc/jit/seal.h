// The seal of a file in the kernel cache: the file's bytes exactly as the
// compiler wrote them (the payload), followed by one line of text,
//
//   \n// coreai-kernel-v2 <payload bytes> <note a> <note b> <key> <digest>\n
//
// with the numbers written in fixed width, <key> the 64-hex-digit cache key
// the file is stored under and <digest> the SHA-256 of the payload and the
// line up to the digest. ELF and Mach-O loaders ignore bytes past what a
// file's headers describe, clang ignores them after a precompiled header,
// and in a kept source the line is a comment; the CUDA backend strips it
// from PTX. A file whose seal is missing, whose size differs, whose key is
// another entry's or whose digest does not match was truncated, damaged or
// copied from another entry: it is never used, and is built again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coreai_torch::jit {

// Two numbers a target records with an artifact (the CPU backend: the stack
// its code needs); -1 for "unknown".
struct SealNotes {
  int64_t a = -1;
  int64_t b = -1;
};

// The seal line of `payload` stored under `key`.
std::string seal_line(std::string_view payload, const std::string& key, SealNotes notes);

// The length of every seal line.
size_t seal_line_bytes();

// The payload and notes of `file` if it is intact and sealed under `key`;
// nullopt, with `why`, otherwise.
struct Unsealed {
  std::string_view payload;
  SealNotes notes;
};
std::optional<Unsealed> unseal(std::string_view file, const std::string& key, std::string& why);

// Whether `tail` (at least the last seal_line_bytes() of a file of `size`
// bytes) is a seal line for `key` that matches the size: how eviction tells
// files the cache wrote without reading them whole.
bool has_seal_of(std::string_view tail, int64_t size, const std::string& key);

}  // namespace coreai_torch::jit
