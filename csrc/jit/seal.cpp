#include "jit/seal.h"

#include <cinttypes>
#include <cstdio>

#include "jit/sha256.h"

namespace coreai_torch::jit {
namespace {

constexpr std::string_view kPrefix = "\n// coreai-kernel-v2 ";
constexpr size_t kNumberChars = 20;  // "%+020" PRId64 / "%020" PRIu64
constexpr size_t kHexChars = 64;
// prefix, three numbers and the key each followed by a space, digest, newline
constexpr size_t kLineBytes = kPrefix.size() + 3 * (kNumberChars + 1) + kHexChars + 1 +
                              kHexChars + 1;
constexpr size_t kDigestAt = kLineBytes - kHexChars - 1;

// The line without its digest and final newline.
std::string fields(size_t payload_bytes, const std::string& key, SealNotes notes) {
  char numbers[3 * (kNumberChars + 1) + 1];
  std::snprintf(numbers, sizeof(numbers), "%020" PRIu64 " %+020" PRId64 " %+020" PRId64 " ",
                static_cast<uint64_t>(payload_bytes), notes.a, notes.b);
  return std::string(kPrefix) + numbers + key + " ";
}

bool parse_int(std::string_view text, int64_t& out) {
  int64_t v = 0;
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    i = 1;
  }
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  out = negative ? -v : v;
  return true;
}

}  // namespace

size_t seal_line_bytes() { return kLineBytes; }

std::string seal_line(std::string_view payload, const std::string& key, SealNotes notes) {
  std::string line = fields(payload.size(), key, notes);
  line += Sha256().update(payload).update(line).hex_digest();
  line += "\n";
  return line;
}

bool has_seal_of(std::string_view tail, int64_t size, const std::string& key) {
  if (tail.size() < kLineBytes || size < static_cast<int64_t>(kLineBytes)) return false;
  const std::string_view line = tail.substr(tail.size() - kLineBytes);
  if (line.substr(0, kPrefix.size()) != kPrefix) return false;
  int64_t payload = 0;
  if (!parse_int(line.substr(kPrefix.size(), kNumberChars), payload)) return false;
  const size_t key_at = kPrefix.size() + 3 * (kNumberChars + 1);
  return payload == size - static_cast<int64_t>(kLineBytes) &&
         line.substr(key_at, kHexChars) == key;
}

std::optional<Unsealed> unseal(std::string_view file, const std::string& key, std::string& why) {
  if (file.size() < kLineBytes) {
    why = "shorter than its seal (" + std::to_string(file.size()) + " bytes)";
    return std::nullopt;
  }
  const std::string_view line = file.substr(file.size() - kLineBytes);
  if (line.substr(0, kPrefix.size()) != kPrefix) {
    why = "no coreai_torch seal (truncated, or written by another version)";
    return std::nullopt;
  }
  const size_t at = kPrefix.size();
  int64_t payload_bytes = 0;
  SealNotes notes;
  if (!parse_int(line.substr(at, kNumberChars), payload_bytes) ||
      !parse_int(line.substr(at + kNumberChars + 1, kNumberChars), notes.a) ||
      !parse_int(line.substr(at + 2 * (kNumberChars + 1), kNumberChars), notes.b)) {
    why = "a damaged seal";
    return std::nullopt;
  }
  if (payload_bytes != static_cast<int64_t>(file.size() - kLineBytes)) {
    why = "holds " + std::to_string(file.size() - kLineBytes) + " bytes where " +
          std::to_string(payload_bytes) + " were written";
    return std::nullopt;
  }
  if (line.substr(at + 3 * (kNumberChars + 1), kHexChars) != key) {
    why = "sealed for another cache entry (copied over this one)";
    return std::nullopt;
  }
  const std::string_view payload = file.substr(0, static_cast<size_t>(payload_bytes));
  const std::string expected =
      Sha256().update(payload).update(line.substr(0, kDigestAt)).hex_digest();
  if (line.substr(kDigestAt, kHexChars) != expected) {
    why = "its SHA-256 differs from the one recorded when it was written (damaged)";
    return std::nullopt;
  }
  return Unsealed{payload, notes};
}

}  // namespace coreai_torch::jit
