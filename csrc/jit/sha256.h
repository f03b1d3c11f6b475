// SHA-256 (FIPS 180-4) for the JIT's disk cache keys. Written here rather than
// taken from a crypto library so that _C links nothing beyond torch; the cache
// needs collision resistance, not secrecy, and a fixed, portable digest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace coreai_torch::jit {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view data);
  // Lower-case hex digest; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const unsigned char* block);

  uint32_t state_[8];
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

inline std::string sha256_hex(std::string_view data) { return Sha256().update(data).hex_digest(); }

}  // namespace coreai_torch::jit
